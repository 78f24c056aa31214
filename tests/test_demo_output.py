"""The demo (``python -m onyxrt.demo``, the README's first command): its timing block puts
the simulated device time, the host wall time of the simulation and the CPU provider
alone side by side, each labelled and explained, so the simulation's slowness is not read
as onyxrt's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from onyxrt import demo
from onyxrt.discovery import catalog

SIMNPU = "SimNPUExecutionProvider"
CPU = "CPUExecutionProvider"

needs_simnpu = pytest.mark.skipif(
    SIMNPU not in catalog().available(), reason="onyxrt-simnpu is not installed or not usable"
)


def run_demo(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert demo.main(["--runs", "2", *args]) == 0
    return capsys.readouterr().out


def timing_block(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Timing per run"))
    return lines[start:]


def figure(block: list[str], label: str) -> tuple[str, str]:
    """The figure's line (after the label) and the sentence under it."""
    at = next(i for i, line in enumerate(block) if line.strip().startswith(label))
    return block[at].strip()[len(label):].strip(), block[at + 1].strip()


MS = re.compile(r"^(\d+\.\d\d) ms")


@needs_simnpu
def test_demo_shows_device_time_host_time_and_cpu_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = run_demo(capsys)
    # The rest of the demo is still there.
    assert "Providers found:" in out and "Placement:" in out and "Outputs:" in out
    assert "fused group SimNPUExecutionProvider_mobilenet_v2_0" in out

    block = timing_block(out)
    assert block[0] == "Timing per run (median of 2 runs, after one warm-up):"
    values = {}
    for label, words in [
        ("simulated NPU device time", "cost model"),
        ("host wall time", "simulating the NPU, not a device"),
        ("CPU provider alone", 'providers=["CPUExecutionProvider"]'),
    ]:
        value, meaning = figure(block, label)
        match = MS.match(value)
        assert match, f"{label}: no figure in {value!r}"
        values[label] = float(match.group(1))
        assert words in meaning, (label, meaning)
    assert values["simulated NPU device time"] > 0
    # The cost model's estimate is far below the numpy simulation's wall time.
    assert values["simulated NPU device time"] < values["host wall time"]
    # Profiling is on for the device time, but no trace file is left behind.
    assert not list(tmp_path.iterdir())


def test_demo_on_the_cpu_alone_says_there_is_no_device_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run_demo(capsys, "--model", "tiny_cnn", "--providers", CPU)
    block = timing_block(out)
    value, meaning = figure(block, "simulated NPU device time")
    assert value == "n/a" and "no provider in this session simulates a device" in meaning
    host, _ = figure(block, "host wall time")
    cpu, meaning = figure(block, "CPU provider alone")
    assert MS.match(host) and cpu == MS.match(host).group(0)  # one session, one figure
    assert "every node already runs on the CPU provider" in meaning
