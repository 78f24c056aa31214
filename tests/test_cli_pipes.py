"""``onyxrt`` writing into a pipe whose reader goes away early (``onyxrt doctor | head -1``):
every command ends quietly, like a Unix tool ended by SIGPIPE, with exit code 141."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onyxrt.cli import EXIT_BROKEN_PIPE

TESTS_DIR = Path(__file__).parent

#: A plugin whose probe takes a second: ``doctor`` has printed its first line and is still
#: probing when the reader closes the pipe, so the next line meets the closed pipe.
SLOW_PROBE_PLUGIN = """
import time

from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.protocol import ProbeResult
from toy_provider import ToyDeviceExecutionProvider


class SlowProbeProvider(ToyDeviceExecutionProvider):
    name = "SlowProbeExecutionProvider"

    @classmethod
    def probe(cls):
        time.sleep(1.0)
        return ProbeResult(True)


@hookimpl
def onyxrt_providers():
    return [ProviderSpec("SlowProbeExecutionProvider", lambda: SlowProbeProvider, priority=80,
                         device_types=("npu",))]
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONYXRT_CLI_TRACEBACK", "ONYXRT_PROGRESS")}
    env.update(extra)
    return env


@pytest.mark.parametrize("args", [
    ["providers"], ["providers", "--format", "json"], ["doctor"], ["--help"], ["--version"],
    ["doctor", "--help"],
])
def test_stdout_closed_before_anything_is_written_ends_quietly(args: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "onyxrt", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the interpreter has even started: every write fails
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == EXIT_BROKEN_PIPE
    assert stderr == ""


def test_doctor_reader_closing_after_one_line_ends_quietly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "onyxrt_slowprobe-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onyxrt-slowprobe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[onyxrt.providers]\nslowprobe = slowprobe_plugin\n")
    (site / "slowprobe_plugin.py").write_text(textwrap.dedent(SLOW_PROBE_PLUGIN))
    pythonpath = os.pathsep.join([str(site), str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    # Unbuffered, so the first line is in the pipe before the slow probe runs.
    proc = subprocess.Popen([sys.executable, "-u", "-m", "onyxrt", "doctor"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env(PYTHONPATH=pythonpath))
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline().decode()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == EXIT_BROKEN_PIPE
    assert first.startswith("onyxrt ")
    assert stderr == ""


@pytest.mark.skipif(shutil.which("sh") is None or shutil.which("head") is None,
                    reason="needs sh and head")
def test_shell_pipeline_into_head_shows_no_error() -> None:
    command = f"'{sys.executable}' -m onyxrt doctor | head -1"
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300,
                          env=_env())
    assert proc.returncode == 0  # head's
    assert proc.stdout.startswith("onyxrt ") and proc.stdout.count("\n") == 1
    assert proc.stderr == ""
