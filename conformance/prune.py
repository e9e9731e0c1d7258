"""What a CPU-only machine can never load, found in a conformance venv (stdlib only).

The venvs hold vLLM's and torch's CUDA wheels from PyPI. On this machine (no GPU, no
``libcuda.so.1``) only part of them can ever be mapped:

- vLLM's compiled extensions that link the CUDA runtime or driver (``vllm/_C``,
  ``vllm_flash_attn``, ``_moe_C``, ...) are kernels: those that link ``libcuda.so.1`` fail
  to load ("Failed to import from vllm._C", and vLLM goes on), the others only register
  kernels nothing can launch. ~1.3 GB (0.11), ~0.7 GB (0.33).
- Of the NVIDIA libraries (``site-packages/nvidia``), ``import torch`` needs those its shared
  objects name in ``DT_NEEDED`` (and what those name in turn); the rest (cuDNN's engines,
  cuBLAS' kernels for other GPUs, ...) is ``dlopen``'ed only when a GPU runs something.
  ~1.4 GB (0.11), ~1.3 GB (0.33).

This module reads ``DT_NEEDED`` from the ELF files themselves (no ``readelf``: binutils is
not on every machine and this runs before any venv exists) and says what to remove;
``setup_env.py`` removes it and records names and bytes.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from pathlib import Path

# Linking either means CUDA code: the driver is never here, the runtime finds no device.
_CUDA_LINK = re.compile(r"^libcuda\.so\.\d+$|^libcudart\.so\.\d+$")
_SHARED = re.compile(r"\.so(\.\d+)*$")
_SHT_DYNAMIC, _DT_NEEDED = 6, 1


def needed(path: Path) -> list[str]:
    """The ``DT_NEEDED`` names of a 64-bit little-endian ELF file ([] for anything else)."""
    with open(path, "rb") as f:
        ident = f.read(64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            return []
        shoff, = struct.unpack_from("<Q", ident, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", ident, 0x3A)
        if not shoff or not shnum:
            return []
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        names: list[str] = []
        for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
            if sh_type != _SHT_DYNAMIC:
                continue
            f.seek(offset)
            dynamic = f.read(size)
            strtab = sections[link]
            f.seek(strtab[4])
            strings = f.read(strtab[5])
            for i in range(0, len(dynamic) - 15, entsize or 16):
                tag, val = struct.unpack_from("<qQ", dynamic, i)
                if tag == 0:
                    break
                if tag == _DT_NEEDED:
                    names.append(strings[val:strings.index(b"\0", val)].decode())
        return names


def shared_objects(root: Path) -> list[Path]:
    """Regular files named like shared libraries under ``root`` (wheels hold no symlinks)."""
    return sorted(p for p in root.rglob("*.so*") if _SHARED.search(p.name) and p.is_file() and not p.is_symlink())


def cuda_kernel_modules(site: Path) -> list[Path]:
    """vLLM's extension modules that link the CUDA driver or runtime."""
    return [p for p in shared_objects(site / "vllm") if any(_CUDA_LINK.match(n) for n in needed(p))]


def outside_nvidia(site: Path) -> list[Path]:
    """Every shared object of the venv that is not an NVIDIA library: what loads them."""
    nvidia = site / "nvidia"
    return [p for p in shared_objects(site) if nvidia not in p.parents]


class NvidiaLibs:
    """The NVIDIA libraries the venv's other shared objects need, as wheels arrive one by one.

    ``want`` starts as the names the roots need; ``add`` takes the libraries one wheel
    installed, keeps those wanted (adding what they need) and returns the others. A later
    wheel's library may need one pruned earlier: ``missing`` names such wheels (install
    them again; the names are then kept).
    """

    def __init__(self, roots: Iterable[Path]) -> None:
        self.want: set[str] = set()
        self.present: dict[str, list[Path]] = {}
        self.pruned: dict[str, str] = {}  # file name -> requirement that brought it
        for p in roots:
            self.want.update(needed(p))

    def add(self, libs: Iterable[Path], requirement: str) -> list[Path]:
        for p in libs:
            if p not in self.present.setdefault(p.name, []):
                self.present[p.name].append(p)
            self.pruned.pop(p.name, None)
        todo = [p for n in self.want for p in self.present.get(n, [])]
        while todo:
            for n in needed(todo.pop()):
                if n not in self.want:
                    self.want.add(n)
                    todo.extend(self.present.get(n, []))
        drop = [p for name in sorted(self.present) if name not in self.want for p in self.present[name]]
        for p in drop:
            self.present.pop(p.name, None)
            self.pruned[p.name] = requirement
        return drop

    def missing(self) -> list[str]:
        """Requirements whose pruned library is now wanted."""
        return sorted({req for name, req in self.pruned.items() if name in self.want})
