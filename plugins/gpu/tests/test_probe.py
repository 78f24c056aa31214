"""The GPU probe names every way CuPy can be unusable, with the fix."""

from __future__ import annotations

import sys

import pytest

from onyxrt_gpu import cupy_loader
from onyxrt_gpu.cupy_loader import CUDA, HIP, probe_cupy
from onyxrt_gpu.testing.simulated_cupy import install

CUDA_EP, ROCM_EP = "CUDAExecutionProvider", "ROCMExecutionProvider"
EITHER_EXTRA = "pip install 'onyxrt-cuda[cuda12]' (or 'onyxrt-cuda[cuda13]' with a CUDA 13 driver)"


@pytest.fixture(autouse=True)
def no_driver_library(monkeypatch):
    """Without CuPy the probe asks libcuda for the driver's CUDA version: none here, so the
    answers do not depend on the machine running the tests."""
    monkeypatch.setattr(cupy_loader, "_libcuda_driver_version", lambda: None)


@pytest.fixture
def no_cupy_module(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)


def _dists(monkeypatch, dists):
    monkeypatch.setattr(cupy_loader, "installed_cupy_distributions", lambda: dict(dists))


def _driver(monkeypatch, version):
    monkeypatch.setattr(cupy_loader, "_libcuda_driver_version", lambda: version)


def _import_error(monkeypatch, exc):
    def fail():
        raise exc

    monkeypatch.setattr(cupy_loader, "cupy_module", fail)


def _installed_as(monkeypatch, sim, dists):
    """The simulated CuPy, seen by the probe as a real install of ``dists``."""
    monkeypatch.setattr(sim.cupy, "__onyxrt_simulated__", False)
    _dists(monkeypatch, dists)


# -- not installed, several builds, the wrong build ---------------------------------------


def test_not_installed_advises_the_extra_for_the_driver(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {})
    _import_error(monkeypatch, ModuleNotFoundError("No module named 'cupy'", name="cupy"))
    result = probe_cupy(CUDA, CUDA_EP)
    assert not result.usable and result.reason == "cupy is not installed"
    assert result.fix == EITHER_EXTRA
    _driver(monkeypatch, 13000)
    assert probe_cupy(CUDA, CUDA_EP).fix == "pip install 'onyxrt-cuda[cuda13]'"
    _driver(monkeypatch, 12080)
    assert probe_cupy(CUDA, CUDA_EP).fix == "pip install 'onyxrt-cuda[cuda12]'"
    assert probe_cupy(HIP, ROCM_EP).fix == "pip install cupy-rocm-7-0"


def test_both_builds_installed_removes_every_one_then_reinstalls(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-cuda12x": "14.2.0", "cupy-rocm-7-0": "14.2.0"})
    result = probe_cupy(CUDA, CUDA_EP)
    assert not result.usable and "both a CUDA and a ROCm build" in result.reason
    assert "(cupy-cuda12x, cupy-rocm-7-0)" in result.reason
    assert result.fix == "pip uninstall -y cupy-cuda12x cupy-rocm-7-0 && pip install 'onyxrt-cuda[cuda12]'"
    assert probe_cupy(HIP, ROCM_EP).fix == (
        "pip uninstall -y cupy-cuda12x cupy-rocm-7-0 && pip install cupy-rocm-7-0")


def test_both_builds_keep_the_installed_cuda_major(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-cuda13x": "14.2.0", "cupy-rocm-7-0": "14.2.0"})
    assert probe_cupy(CUDA, CUDA_EP).fix == (
        "pip uninstall -y cupy-cuda13x cupy-rocm-7-0 && pip install 'onyxrt-cuda[cuda13]'")


def test_two_cuda_builds_installed(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-cuda12x": "14.2.0", "cupy-cuda13x": "14.2.0"})
    result = probe_cupy(CUDA, CUDA_EP)
    assert not result.usable
    assert result.reason.startswith("more than one CuPy build is installed (cupy-cuda12x, cupy-cuda13x)")
    assert result.fix == f"pip uninstall -y cupy-cuda12x cupy-cuda13x && {EITHER_EXTRA}"
    _driver(monkeypatch, 13010)
    assert probe_cupy(CUDA, CUDA_EP).fix == (
        "pip uninstall -y cupy-cuda12x cupy-cuda13x && pip install 'onyxrt-cuda[cuda13]'")


@pytest.mark.parametrize("wheel", ["cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x"])
def test_wrong_build_for_the_provider(monkeypatch, no_cupy_module, wheel):
    _dists(monkeypatch, {wheel: "14.2.0"})
    result = probe_cupy(HIP, ROCM_EP)
    assert not result.usable
    assert f"({wheel}) is a CUDA build; ROCMExecutionProvider needs the HIP build" in result.reason
    assert result.fix == f"pip uninstall -y {wheel} && pip install cupy-rocm-7-0"


def test_rocm_build_under_cuda(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-rocm-7-0": "14.2.0"})
    _driver(monkeypatch, 13000)
    result = probe_cupy(CUDA, CUDA_EP)
    assert "(cupy-rocm-7-0) is a ROCm (HIP) build; CUDAExecutionProvider needs the CUDA build" in result.reason
    assert result.fix == "pip uninstall -y cupy-rocm-7-0 && pip install 'onyxrt-cuda[cuda13]'"


# -- imports, but a runtime library is missing ---------------------------------------------


def test_runtime_library_missing(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-rocm-7-0": "14.2.0"})
    _import_error(monkeypatch, ImportError("libamdhip64.so.7: cannot open shared object file"))
    result = probe_cupy(HIP, ROCM_EP)
    assert not result.usable
    assert "cannot load the ROCm runtime (libamdhip64): libamdhip64.so.7" in result.reason


def test_runtime_error_as_real_cupy_words_it(monkeypatch, no_cupy_module):
    """CuPy's ImportError starts with a blank line and a rule; the real error is kept."""
    _dists(monkeypatch, {"cupy-rocm-7-0": "14.2.0"})
    _import_error(monkeypatch, ImportError(
        "\n================================================================\n"
        "Failed to import CuPy.\n\nOriginal error:\n"
        "  ImportError: libamdhip64.so.7: cannot open shared object file: No such file or directory\n"
        "================================================================\n"))
    result = probe_cupy(HIP, ROCM_EP)
    assert result.reason == (
        "cupy is installed but cannot load the ROCm runtime (libamdhip64): ImportError: "
        "libamdhip64.so.7: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("message", ["", "\n", "\n====\n"])
def test_reason_never_ends_with_an_empty_message(monkeypatch, no_cupy_module, message):
    _dists(monkeypatch, {"cupy-rocm-7-0": "14.2.0"})
    _import_error(monkeypatch, ImportError(message))
    reason = probe_cupy(HIP, ROCM_EP).reason
    assert reason.endswith("(libamdhip64): ImportError"), reason


def test_cuda_runtime_missing_advises_the_extra(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-cuda12x": "14.2.0"})
    _import_error(monkeypatch, ImportError("libcudart.so.12: cannot open shared object file"))
    result = probe_cupy(CUDA, CUDA_EP)
    assert result.reason == "cupy is installed but cannot load the CUDA runtime: libcudart.so.12: " \
                            "cannot open shared object file"
    assert result.fix == "install the CUDA libraries from pip: pip install 'onyxrt-cuda[cuda12]'"


# -- versions --------------------------------------------------------------------------------


@pytest.mark.parametrize("hip, wheel, fix", [
    (False, "cupy-cuda12x", "upgrade CuPy: pip install 'onyxrt-cuda[cuda12]'"),
    (False, "cupy-cuda11x", "upgrade CuPy: pip uninstall -y cupy-cuda11x && pip install 'onyxrt-cuda[cuda12]'"),
    (True, "cupy-rocm-7-0", "upgrade CuPy: pip install -U cupy-rocm-7-0"),
])
def test_cupy_older_than_14(monkeypatch, hip, wheel, fix):
    with install(hip=hip) as sim:  # the driver says CUDA 12.8
        _installed_as(monkeypatch, sim, {wheel: "13.6.0"})
        monkeypatch.setattr(sim.cupy, "__version__", "13.6.0")
        result = probe_cupy(HIP if hip else CUDA, ROCM_EP if hip else CUDA_EP)
    assert not result.usable
    assert result.reason == "cupy 13.6.0 is installed; onyxrt needs CuPy 14 or newer"
    assert result.fix == fix


def test_driver_older_than_the_cuda_build(monkeypatch):
    with install(device_count=0, driver_version=12080) as sim:
        _installed_as(monkeypatch, sim, {"cupy-cuda13x": "14.2.0"})
        result = probe_cupy(CUDA, CUDA_EP)
    assert not result.usable and "no usable device" in result.reason
    assert result.fix == ("the driver supports CUDA 12, the installed CuPy needs CUDA 13: update the "
                          "driver, or pip uninstall -y cupy-cuda13x && pip install 'onyxrt-cuda[cuda12]'")


# -- a device, but kernels or matmuls cannot run ---------------------------------------------


@pytest.mark.parametrize("hip", [False, True])
def test_usable_after_running_the_test_kernels(hip):
    with install(hip=hip) as sim:
        before = sim.bytes_in_use(0)
        result = probe_cupy(HIP if hip else CUDA, ROCM_EP if hip else CUDA_EP)
        assert result.usable, result
        assert sim.launches >= 3  # the elementwise kernel (two ops) and the matmul
        assert (sim.h2d, sim.d2h) == (3, 2)
        assert sim.bytes_in_use(0) == before  # raw memory, returned: nothing left cached
    compiler, blas = ("hiprtc", "hipBLAS") if hip else ("NVRTC", "cuBLAS")
    assert result.details["test kernels"] == f"elementwise ({compiler}) and matmul ({blas}) ran on device 0"


def test_no_nvrtc_is_not_usable():
    with install(missing_libraries=("compiler",)):
        result = probe_cupy(CUDA, CUDA_EP)
    assert not result.usable
    assert result.reason == (
        'cupy is installed but cannot compile and run a kernel (NVRTC): Failure finding '
        '"libnvrtc.so.13 or libnvrtc.so.12": No such file: libnvrtc.so.13 or libnvrtc.so.12')
    assert result.fix == "install the CUDA libraries from pip: pip install 'onyxrt-cuda[cuda12]'"


def test_no_cublas_is_not_usable():
    with install(missing_libraries=("blas",)):
        result = probe_cupy(CUDA, CUDA_EP)
    assert not result.usable
    assert result.reason == ("cupy is installed but cannot multiply matrices (cuBLAS): libcublas.so.12: "
                             "cannot open shared object file: No such file or directory")
    assert result.fix == "install the CUDA libraries from pip: pip install 'onyxrt-cuda[cuda12]'"


def test_missing_libraries_fix_follows_the_driver():
    with install(missing_libraries=("compiler", "blas"), driver_version=13000):
        result = probe_cupy(CUDA, CUDA_EP)
    assert "(NVRTC)" in result.reason
    assert result.fix == "install the CUDA libraries from pip: pip install 'onyxrt-cuda[cuda13]'"


def test_missing_libraries_fix_keeps_the_installed_build(monkeypatch):
    """cupy-cuda12x under a CUDA 13 driver: the extra stays [cuda12] (a [cuda13] would add
    a second CuPy build)."""
    with install(missing_libraries=("compiler",), driver_version=13000) as sim:
        _installed_as(monkeypatch, sim, {"cupy-cuda12x": "14.2.0"})
        result = probe_cupy(CUDA, CUDA_EP)
    assert result.fix == "install the CUDA libraries from pip: pip install 'onyxrt-cuda[cuda12]'"


@pytest.mark.parametrize("missing, words", [
    ("compiler", "cannot compile and run a kernel (hiprtc): libhiprtc.so.7"),
    ("blas", "cannot multiply matrices (hipBLAS): libhipblas.so.3"),
])
def test_rocm_libraries_missing(missing, words):
    with install(hip=True, missing_libraries=(missing,)):
        result = probe_cupy(HIP, ROCM_EP)
    assert not result.usable and words in result.reason
    assert "hiprtc and hipBLAS" in result.fix and "cupy-rocm-7-0" in result.fix


def test_wrong_values_are_not_usable(monkeypatch):
    with install() as sim:
        real_matmul = sim.cupy.matmul
        monkeypatch.setattr(sim.cupy, "matmul", lambda a, b: real_matmul(a, b) + 1)
        result = probe_cupy(CUDA, CUDA_EP)
    assert not result.usable
    assert result.reason == ("cupy ran a test matmul on device 0 but got wrong values "
                             "([[20.0, 23.0], [44.0, 51.0]], expected [[19.0, 22.0], [43.0, 50.0]])")
    assert "driver" in result.fix
