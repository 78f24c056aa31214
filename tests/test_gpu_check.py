"""benchmarks/gpu_check.py without a GPU (CI, this machine): it says why, from the CUDA
provider's own probe, and exits with status 2 before running anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


def test_without_a_usable_gpu_it_says_why_and_exits_2():
    from onyxrt.discovery import catalog

    if "CUDAExecutionProvider" in catalog().available():  # pragma: no cover - a GPU machine
        import pytest

        pytest.skip("a usable CUDA device is present: the check would run")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "gpu_check: no usable GPU here" in out.stderr
    assert out.stdout == ""
