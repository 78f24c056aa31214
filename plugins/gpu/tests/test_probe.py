"""The GPU probe names every way CuPy can be unusable, with the fix."""

from __future__ import annotations

import pytest

from onyxrt_gpu import cupy_loader
from onyxrt_gpu.cupy_loader import CUDA, HIP, probe_cupy


@pytest.fixture
def no_cupy_module(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "cupy", raising=False)


def _dists(monkeypatch, dists):
    monkeypatch.setattr(cupy_loader, "installed_cupy_distributions", lambda: dict(dists))


def _import_error(monkeypatch, exc):
    def fail():
        raise exc

    monkeypatch.setattr(cupy_loader, "cupy_module", fail)


def test_not_installed(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {})
    err = ModuleNotFoundError("No module named 'cupy'", name="cupy")
    _import_error(monkeypatch, err)
    result = probe_cupy(CUDA, "CUDAExecutionProvider")
    assert not result.usable and result.reason == "cupy is not installed"
    assert result.fix == "pip install cupy-cuda12x"
    assert probe_cupy(HIP, "ROCMExecutionProvider").fix == "pip install cupy-rocm-7-0"


def test_both_builds_installed(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-cuda12x": "14.2.0", "cupy-rocm-7-0": "14.2.0"})
    result = probe_cupy(CUDA, "CUDAExecutionProvider")
    assert not result.usable and "both a CUDA and a ROCm build" in result.reason
    assert result.fix == "keep one: pip uninstall cupy-rocm-7-0"


def test_wrong_build_for_the_provider(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-cuda12x": "14.2.0"})
    result = probe_cupy(HIP, "ROCMExecutionProvider")
    assert not result.usable
    assert "(cupy-cuda12x) is a CUDA build; ROCMExecutionProvider needs the HIP build" in result.reason
    assert result.fix == "pip uninstall cupy-cuda12x && pip install cupy-rocm-7-0"


def test_runtime_library_missing(monkeypatch, no_cupy_module):
    _dists(monkeypatch, {"cupy-rocm-7-0": "14.2.0"})
    _import_error(monkeypatch, ImportError("libamdhip64.so.7: cannot open shared object file"))
    result = probe_cupy(HIP, "ROCMExecutionProvider")
    assert not result.usable
    assert "cannot load the ROCm runtime (libamdhip64): libamdhip64.so.7" in result.reason
