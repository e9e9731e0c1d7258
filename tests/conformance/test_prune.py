"""conformance/prune.py: DT_NEEDED as readelf reads it, and what a conformance venv may lose.

The pruning decisions run on shared objects gcc builds here (a small site-packages with
torch-, vLLM- and NVIDIA-like files), so each case is an ELF file, not a stand-in.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# conformance/ is a folder of scripts (stdlib only, run before any venv exists), not a package;
# `conformance` on sys.path is tests/conformance.
_SPEC = importlib.util.spec_from_file_location("conformance_prune", Path(__file__).parents[2] / "conformance" / "prune.py")
assert _SPEC and _SPEC.loader
prune = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(prune)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build shared objects")


def _lib(path: Path, soname: str | None = None, needs: tuple[Path, ...] = ()) -> Path:
    """A shared object at ``path`` (SONAME ``soname``) that links ``needs`` (one DT_NEEDED each)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / f".{path.name}.c"
    src.write_text(f"int f_{abs(hash(path.name))}(void) {{ return 0; }}\n")
    cmd = ["gcc", "-shared", "-fPIC", "-o", str(path), str(src), "-Wl,--no-as-needed",
           f"-Wl,-soname,{soname or path.name}", *map(str, needs)]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return path


def _readelf_needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.+?)\]", out)


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf as the reference")
def test_needed_matches_readelf_on_the_venvs_extensions() -> None:
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    files = prune.shared_objects(site)[:200]
    assert len(files) > 20, f"too few shared objects under {site} to compare"
    for p in files:
        assert prune.needed(p) == _readelf_needed(p), p
    assert prune.needed(Path(__file__)) == []  # not ELF


def test_cuda_kernels_and_unneeded_nvidia_libs_are_pruned(tmp_path: Path) -> None:
    drv = _lib(tmp_path / "drv" / "libcuda.so.1")  # the driver: on GPU machines only, never in the venv
    site = tmp_path / "site-packages"
    nv = site / "nvidia"
    lt = _lib(nv / "cublas" / "lib" / "libcublasLt.so.12")
    cublas = _lib(nv / "cublas" / "lib" / "libcublas.so.12", needs=(lt,))
    rt = _lib(nv / "cuda_runtime" / "lib" / "libcudart.so.12")
    engines = _lib(nv / "cudnn" / "lib" / "libcudnn_engines_precompiled.so.9")  # dlopen'ed on GPU use only
    nvrtc = _lib(nv / "cuda_nvrtc" / "lib" / "libnvrtc.so.12")
    torch_cuda = _lib(site / "torch" / "lib" / "libtorch_cuda.so", needs=(rt, cublas))
    kernels = _lib(site / "vllm" / "_C.abi3.so", needs=(torch_cuda, drv))
    moe = _lib(site / "vllm" / "_moe_C.abi3.so", needs=(torch_cuda, rt))
    fs_io = _lib(site / "vllm" / "fs_io_C.abi3.so", needs=(torch_cuda, nvrtc))

    assert prune.cuda_kernel_modules(site) == sorted([kernels, moe])
    roots = [p for p in prune.outside_nvidia(site) if p not in (kernels, moe)]
    assert sorted(roots) == sorted([torch_cuda, fs_io])
    libs = prune.NvidiaLibs(roots)
    # One wheel's files at a time, as setup_env installs them.
    assert libs.add([cublas, lt], "nvidia-cublas") == []  # libcublasLt: needed through libcublas
    assert libs.add([engines], "nvidia-cudnn") == [engines]
    assert libs.add([rt], "nvidia-cuda-runtime") == []
    assert libs.add([nvrtc], "nvidia-cuda-nvrtc") == []  # fs_io_C (kept) links it
    assert libs.missing() == []
    assert libs.pruned == {engines.name: "nvidia-cudnn"}


def test_a_library_pruned_before_a_later_wheel_needed_it_is_named(tmp_path: Path) -> None:
    nv = tmp_path / "site-packages" / "nvidia"
    jit = _lib(nv / "nvjitlink" / "lib" / "libnvJitLink.so.12")
    solver = _lib(nv / "cusolver" / "lib" / "libcusolver.so.11", needs=(jit,))
    torch = _lib(tmp_path / "site-packages" / "torch" / "lib" / "libtorch_cuda.so", needs=(solver,))
    libs = prune.NvidiaLibs([torch])
    assert libs.add([jit], "nvidia-nvjitlink") == [jit]  # nothing present needs it yet
    assert libs.add([solver], "nvidia-cusolver") == []
    assert libs.missing() == ["nvidia-nvjitlink"]  # setup_env installs that wheel again
    assert libs.add([jit], "nvidia-nvjitlink") == []
    assert libs.missing() == [] and libs.pruned == {}
