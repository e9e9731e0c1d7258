"""Stand-ins for NVIDIA's GPU-only libraries in a conformance venv (stdlib, gcc and binutils' nm).

torch's CUDA build links cuBLAS, cuFFT, cuRAND, cuSOLVER, cuSPARSE(Lt), NCCL, nvJitLink and
NVRTC (``DT_NEEDED``), so ``import torch`` maps them (3.0 GB for vLLM 0.11's torch, 2.0 GB for
0.33's) although nothing calls them on a machine without a GPU. ``stub(lib)`` replaces one
such library by a shared object with the same SONAME that defines the same dynamic symbols
under the same version nodes (what the loader checks when torch is mapped: SONAME, version
needs, data symbols), read from the real library just installed. Every function prints which
symbol was called and aborts: a stub that ran would be a bug, never a wrong answer; objects
are zero-filled with the real size. The small libraries torch does call without a GPU
(the CUDA runtime asks for devices; cuDNN's and cuPTI's loaders; cuFile) stay real.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# The GPU math and communication libraries: called only when a GPU runs work.
STUBBED = re.compile(r"^lib(cublas|cublasLt|cufft|curand|cusolver|cusparse|cusparseLt|nccl|nvJitLink|nvrtc)\.so\.\d+$")
# Symbols the linker defines in every shared object.
_LINKER = {"_init", "_fini", "_edata", "_end", "__bss_start"}
# A stand-in defines the library's C API only. C++ symbols (``_Z``: cuSPARSELt exports its
# copies of std::vector members, and a stand-in that aborts would interpose on torch's) and
# the C++ runtime's are left out; a library that needed one at load time fails to load at
# setup (the smoke import), never later.
_NOT_API = re.compile(r"^(_Z|__cxa_|__gxx_|_Unwind_|__gcc_)")
_NM = re.compile(r"^[0-9a-f]+ (?:([0-9a-f]+) )?([A-Za-z]) (\S+?)(?:(@@?)(\S+))?$")


def available() -> bool:
    return shutil.which("gcc") is not None and shutil.which("nm") is not None


def _exports(lib: Path) -> tuple[list[tuple[str, str | None]], list[tuple[str, int, str | None]], set[str]]:
    """(functions, objects with sizes, version nodes) that ``lib`` exports, each with its default version."""
    out = subprocess.run(["nm", "-D", "-S", "--defined-only", "--with-symbol-versions", str(lib)],
                         capture_output=True, text=True, check=True).stdout
    funcs: list[tuple[str, str | None]] = []
    objs: list[tuple[str, int, str | None]] = []
    nodes: set[str] = set()
    for line in out.splitlines():
        m = _NM.match(line.strip())
        if not m:
            continue
        size, kind, name, at, version = m.groups()
        if kind == "A":  # a version node's own symbol
            nodes.add(name)
            continue
        if name in _LINKER or _NOT_API.match(name) or at == "@":  # hidden (non-default) versions: nothing links them
            continue
        if version:
            nodes.add(version)
        if kind in "TtWwi":  # text, weak (taken as code), indirect
            funcs.append((name, version))
        elif kind in "DdBbRrVvGgu":  # data, bss, read-only, weak object, unique
            objs.append((name, int(size or "0", 16) or 8, version))
    return funcs, objs, nodes


def _soname(lib: Path) -> str:
    out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout if shutil.which("readelf") else ""
    m = re.search(r"\(SONAME\).*\[(.+?)\]", out)
    return m.group(1) if m else lib.name


def source(lib_name: str, funcs: list[tuple[str, str | None]], objs: list[tuple[str, int, str | None]],
           nodes: set[str]) -> tuple[str, str]:
    """The C source and the linker version script of a stand-in."""
    c = ["#include <stdio.h>", "#include <stdlib.h>",
         "static void pdserve_stub_called(const char *sym) {",
         f'  fprintf(stderr, "pdserve: %s called in a stand-in for {lib_name} (a conformance venv has no GPU)\\n", sym);',
         "  abort();", "}"]
    for i, (name, _) in enumerate(funcs):
        c.append(f'void pdserve_f{i}(void) __asm__("{name}");')
        c.append(f'void pdserve_f{i}(void) {{ pdserve_stub_called("{name}"); }}')
    for i, (name, size, _) in enumerate(objs):
        c.append(f'char pdserve_o{i}[{size}] __asm__("{name}");')
        c.append(f"char pdserve_o{i}[{size}];")
    by_node: dict[str, list[str]] = {n: [] for n in sorted(nodes)}
    for name, version in [*funcs, *((n, v) for n, _, v in objs)]:
        if version:
            by_node.setdefault(version, []).append(name)
    script = "".join(f"{node} {{ global: {' '.join(f'{s};' for s in syms)} }};\n" if syms else f"{node} {{ }};\n"
                     for node, syms in by_node.items())
    return "\n".join(c) + "\n", script


def stub(lib: Path) -> int:
    """Replace ``lib`` by its stand-in; returns the bytes saved."""
    funcs, objs, nodes = _exports(lib)
    c, script = source(lib.name, funcs, objs, nodes)
    before = lib.stat().st_size
    with tempfile.TemporaryDirectory(prefix="pdserve-stub-") as tmp:
        src, vs, out = Path(tmp) / "stub.c", Path(tmp) / "stub.map", Path(tmp) / lib.name
        src.write_text(c)
        vs.write_text(script)
        cmd = ["gcc", "-shared", "-fPIC", "-O0", "-o", str(out), str(src), f"-Wl,-soname,{_soname(lib)}"]
        if nodes:
            cmd.append(f"-Wl,--version-script={vs}")
        subprocess.run(cmd, check=True, capture_output=True)
        shutil.copyfile(out, lib)
    return before - lib.stat().st_size
