"""conformance/cuda_stubs.py on libraries gcc builds here: a stand-in loads where the real one
did (SONAME, version nodes, data symbols), aborts naming the symbol when called, and does not
export the C++ symbols a real library may carry."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("conformance_cuda_stubs", Path(__file__).parents[2] / "conformance" / "cuda_stubs.py")
assert _SPEC and _SPEC.loader
cuda_stubs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cuda_stubs)

pytestmark = pytest.mark.skipif(not cuda_stubs.available(), reason="needs gcc and nm")

REAL = """
int cublasCreate_v2(void **h) { *h = 0; return 0; }
int cublasLtTable[4] = {1, 2, 3, 4};
void copy_of_vector_push_back(void) __asm__("_ZNSt6vectorIhSaIhEE9push_backERKh");
void copy_of_vector_push_back(void) {}
"""
USER = """
extern int cublasCreate_v2(void **h);
extern int cublasLtTable[4];
int *table(void) { return cublasLtTable; }  /* a data reference: resolved when the library is mapped */
int create(void) { void *h; return cublasCreate_v2(&h); }
"""


def _build(tmp_path: Path) -> tuple[Path, Path]:
    lib = tmp_path / "libcublas.so.12"
    (tmp_path / "real.c").write_text(REAL)
    (tmp_path / "real.map").write_text("libcublas.so.12 { global: cublasCreate_v2; cublasLtTable; "
                                       "_ZNSt6vectorIhSaIhEE9push_backERKh; };\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "real.c"), "-Wl,-soname,libcublas.so.12",
                    f"-Wl,--version-script={tmp_path / 'real.map'}"], check=True, capture_output=True)
    user = tmp_path / "libuser.so"
    (tmp_path / "user.c").write_text(USER)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(user), str(tmp_path / "user.c"), str(lib),
                    "-Wl,-rpath,$ORIGIN"], check=True, capture_output=True)
    return lib, user


def _call(user: Path, fn: str) -> subprocess.CompletedProcess[str]:
    code = f"import ctypes; print(ctypes.CDLL({str(user)!r}).{fn}())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def _exports(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", "--with-symbol-versions", str(lib)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[1] != "A"}


def test_a_stand_in_loads_like_the_library_and_aborts_when_called(tmp_path: Path) -> None:
    lib, user = _build(tmp_path)
    assert _call(user, "create").stdout.strip() == "0"  # the real library
    real_size = lib.stat().st_size
    saved = cuda_stubs.stub(lib)
    assert saved == real_size - lib.stat().st_size
    assert _exports(lib) == {"cublasCreate_v2@@libcublas.so.12", "cublasLtTable@@libcublas.so.12"}
    assert _call(user, "table").returncode == 0  # mapped: SONAME, version node and data symbol found
    called = _call(user, "create")
    assert called.returncode != 0
    assert "cublasCreate_v2 called in a stand-in for libcublas.so.12" in called.stderr


def test_only_gpu_math_and_communication_libraries_are_stubbed() -> None:
    stubbed = ["libcublas.so.12", "libcublasLt.so.13", "libnccl.so.2", "libcusparseLt.so.0", "libnvrtc.so.13"]
    kept = ["libcudart.so.12", "libcudnn.so.9", "libcupti.so.12", "libcufile.so.0", "libnvrtc-builtins.so.13.0",
            "libcudnn_engines_precompiled.so.9", "libnvshmem_host.so.3"]
    assert [n for n in stubbed if cuda_stubs.STUBBED.match(n)] == stubbed
    assert [n for n in kept if cuda_stubs.STUBBED.match(n)] == []

