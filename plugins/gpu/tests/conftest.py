"""Fixtures for the GPU tests: a simulated CuPy installed for one test, and a way to ask
the real CuPy package (in a subprocess) about its API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from onyxrt_gpu.testing.provider_tests import simulated_gpu
from onyxrt_gpu.testing.simulated_cupy import SimulatedCupy, simulated


@pytest.fixture
def sim_cupy() -> Iterator[SimulatedCupy]:
    """A simulated CUDA build of CuPy with one 8 GiB device, installed for the test."""
    yield from simulated()


@pytest.fixture
def sim_hip() -> Iterator[SimulatedCupy]:
    """A simulated ROCm (HIP) build of CuPy with one device, installed for the test."""
    yield from simulated(hip=True)


@pytest.fixture
def cuda_sim() -> Iterator[SimulatedCupy]:
    """The simulated CUDA build with a fresh provider catalog before and after, so that
    sessions in the test get CUDAExecutionProvider on the simulated device."""
    yield from simulated_gpu(hip=False)


@pytest.fixture(scope="session")
def real_cupy() -> Callable[[str, Any], Any]:
    """Run a script under an interpreter that has the real CuPy: ``probe(script, payload)``
    feeds ``payload`` as JSON on stdin and returns the JSON the script prints last.

    The interpreter is this one (CI installs cupy-cuda12x next to the tests: it imports
    without a GPU) or the one named by ``ONYXRT_REAL_CUPY_PYTHON``; the test is skipped
    when real CuPy is not installed there.
    """
    python = os.environ.get("ONYXRT_REAL_CUPY_PYTHON") or sys.executable
    check = subprocess.run(
        [python, "-c", "import importlib.util, sys\n"
         "if not importlib.util.find_spec('cupy'): sys.exit(3)\n"
         "import cupy"],
        capture_output=True, text=True, timeout=120,
    )
    if check.returncode == 3:
        pytest.skip(
            f"real CuPy is not installed for {python} (pip install cupy-cuda12x, or set "
            "ONYXRT_REAL_CUPY_PYTHON to an interpreter that has it)"
        )
    if check.returncode != 0:  # e.g. the HIP build without the ROCm runtime libraries
        errors = [line.strip() for line in check.stderr.splitlines() if "Error" in line]
        last = errors[-1] if errors else "?"
        pytest.skip(f"real CuPy is installed for {python} but cannot be imported: {last}")

    def probe(script: str, payload: Any) -> Any:
        proc = subprocess.run(
            [python, "-c", script], input=json.dumps(payload), capture_output=True, text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"the real-CuPy probe failed:\n{proc.stderr[-3000:]}"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return probe
