"""Who holds a listening TCP port, from /proc (Linux), for a test's failure message.

A pod process that dies on "address already in use" at its pod IP says nothing of the
process in the way; ``holders`` names it: the listening sockets on that port bound to the
address or to every address (0.0.0.0 / ::, which also block a bind to the address), and the
processes whose file descriptors hold them. Best effort: a process of another user, or one
gone meanwhile, is not listed.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

_LISTEN = "0A"
# The bind error as asyncio / aiohttp / uvicorn word it: ... address ('127.64.1.3', 8000): address already in use
_IN_USE = re.compile(r"address \('([0-9a-fA-F.:]+)', (\d+)\)[^\n]*address already in use", re.IGNORECASE)


def _hex_ip(field: str) -> str:
    raw = bytes.fromhex(field)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # /proc/net/tcp6: four 32-bit words, each in host (little-endian) order
    return str(ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))


def listening(port: int, proc: Path = Path("/proc")) -> dict[int, str]:
    """inode -> local address of the sockets listening on ``port``."""
    out: dict[int, str] = {}
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, state, inode = f[1], f[3], int(f[9])
            ip, p = local.split(":")
            if state == _LISTEN and int(p, 16) == port:
                out[inode] = _hex_ip(ip)
    return out


def holders(ip: str, port: int, proc: Path = Path("/proc")) -> list[str]:
    """'pid <n> (<address>): <command line>' for each process listening where a bind of ip:port collides."""
    wild = {"0.0.0.0", "::"}
    socks = {i: a for i, a in listening(port, proc).items() if a == ip or a in wild}
    if not socks:
        return []
    found = []
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = os.listdir(pid_dir / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(pid_dir / "fd" / fd)
            except OSError:
                continue
            if target.startswith("socket:[") and (inode := int(target[8:-1])) in socks:
                try:
                    cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    cmd = "?"
                found.append(f"pid {pid_dir.name} ({socks[inode]}:{port}): {cmd[:300]}")
                break
    return found


def explain_bind_failure(log_tail: str, proc: Path = Path("/proc")) -> str:
    """For a log that ends in a bind failure, who holds that address now ('' otherwise)."""
    m = _IN_USE.search(log_tail)
    if m is None:
        return ""
    ip, port = m.group(1), int(m.group(2))
    who = holders(ip, port, proc)
    return f"{ip}:{port} is held by " + ("; ".join(who) if who else "no process found now")
