"""The CPU provider's malloc tuning: applied once per process, opt-out by environment."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """
import onyxrt, numpy as np
from onyxrt_cpu import malloc_tuning
before = malloc_tuning.malloc_state()
onyxrt.InferenceSession(onyxrt.testing.models.add_chain(2).SerializeToString())
print(before, "|", malloc_tuning.malloc_state())
"""


def _states(env_value: str | None) -> list[str]:
    import os

    env = dict(os.environ)
    env.pop("ONYXRT_MALLOC_TUNING", None)
    if env_value is not None:
        env["ONYXRT_MALLOC_TUNING"] = env_value
    code = "import onyxrt.testing.models\n" + CODE
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return [part.strip() for part in out.stdout.strip().split("|")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_first_cpu_provider_tunes_malloc_once():
    before, after = _states(None)
    assert before == "not applied"
    assert after.startswith("tuned") or after.startswith("default (")


def test_environment_keeps_glibc_defaults():
    before, after = _states("0")
    assert before == "not applied" and after == "glibc defaults (ONYXRT_MALLOC_TUNING=0)"
