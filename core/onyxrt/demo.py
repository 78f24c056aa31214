"""The onyxrt demo: build a real model, run it, and show where and how fast it ran.

    python -m onyxrt.demo                       # MobileNetV2 (width 0.5, 128x128)
    python -m onyxrt.demo --model bert --runs 5
    python -m onyxrt.demo --providers SimNPUExecutionProvider,CPUExecutionProvider

Prints the providers found (and why any is unusable), the model, the placement of its
nodes, the outputs and the timing: the simulated device time the NPU's cost model
estimates, the host wall time of running the simulation, and the same model on the CPU
provider alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .records import record

__all__ = ["main"]


def _models() -> dict[str, tuple[str, Callable[[], onnx.ModelProto]]]:
    from .testing import models

    return {
        "mobilenet_v2": ("MobileNetV2, width 0.5, 128x128 input",
                         lambda: models.mobilenet_v2(width_mult=0.5, image=128, num_classes=1000)),
        "resnet": ("ResNet bottleneck stack (ResNet-26 style, width 32, 128x128)",
                   lambda: models.resnet(depth_blocks=(2, 2, 2, 2), width=32, image=128)),
        "bert": ("BERT encoder, 2 layers, hidden 256, sequence 64",
                 lambda: models.bert_encoder(layers=2, hidden=256, heads=4, intermediate=1024,
                                             seq=64, vocab=1000)),
        "gpt2": ("GPT-2, 2 blocks, hidden 256, sequence 64",
                 lambda: models.gpt2(layers=2, hidden=256, heads=4, seq=64, vocab=1000)),
        "tiny_cnn": ("a small MNIST-sized CNN", lambda: models.tiny_cnn()),
    }


def _inputs(session: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in (arg.shape or [])]
        if arg.type == "tensor(int64)":
            if "mask" in arg.name:
                feeds[arg.name] = np.ones(shape, np.int64)
            else:
                feeds[arg.name] = rng.integers(0, 1000, size=shape, dtype=np.int64)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _print_providers() -> None:
    from .discovery import catalog

    cat = catalog()
    print("Providers found:")
    for name in cat.names():
        status = cat.status(name)
        line = f"  {name:<28} {status.package} {status.package_version:<8} {status.state}"
        if not status.usable:
            line += f": {status.reason}"
        print(line)
    for failure in cat.failures:
        print(f"  (plugin failed) {failure}")


@record(frozen=True)
class Latency:
    """Wall-clock times of timed runs, in milliseconds."""

    times_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median time, in milliseconds."""
        return statistics.median(self.times_ms)

    def spread(self) -> str:
        """``"(p90 46.76 ms, min 32.04 ms)"``."""
        ordered = sorted(self.times_ms)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return f"(p90 {p90:.2f} ms, min {ordered[0]:.2f} ms)"


def _time_runs(session: Any, feeds: dict[str, np.ndarray], runs: int) -> tuple[list[Any], Latency]:
    """One warm-up run, then ``runs`` timed ones; the last outputs and the times."""
    outputs = session.run(None, feeds)
    times = []
    for _ in range(max(1, runs)):
        t0 = time.perf_counter()
        outputs = session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return outputs, Latency(tuple(times))


def _device_ms_per_run(session: Any) -> float | None:
    """Simulated device time per run from the profile (None when no provider reports it).

    Every run of a fixed-shape model costs the cost model the same, so the total over the
    profiled runs (warm-up included) divided by their number is the time of one run.
    """
    summary = session.profile_summary()
    if not summary.device_us or not summary.runs:
        return None
    return summary.device_us / summary.runs / 1e3


def _print_timing(device_ms: float | None, host: Latency, cpu: Latency | None) -> None:
    """The three figures side by side, each with a sentence saying what it means."""

    def figure(label: str, ms: float | None, rest: str, meaning: str) -> None:
        value = f"{ms:8.2f} ms" if ms is not None else "     n/a   "
        print(f"  {label:<26}{value}  {rest}".rstrip())
        print(f"      {meaning}")

    print(f"\nTiming per run (median of {len(host.times_ms)} runs, after one warm-up):")
    if device_ms is not None:
        figure("simulated NPU device time", device_ms, "",
               "the NPU cost model's estimate for its hardware (copies not counted)")
        figure("host wall time", host.median, host.spread(),
               "what session.run took here: numpy simulating the NPU, not a device's speed")
    else:
        figure("simulated NPU device time", None, "",
               "no provider in this session simulates a device (SimNPUExecutionProvider does)")
        figure("host wall time", host.median, host.spread(), "what session.run took here")
    if cpu is not None:
        figure("CPU provider alone", cpu.median, cpu.spread(),
               'the same model, second session with providers=["CPUExecutionProvider"]')
    else:
        figure("CPU provider alone", host.median, "",
               "the session above: every node already runs on the CPU provider")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    import onyxrt as ort

    models = _models()
    parser = argparse.ArgumentParser(prog="python -m onyxrt.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(models), default="mobilenet_v2")
    parser.add_argument("--runs", type=int, default=20, help="timed runs after one warm-up")
    parser.add_argument("--providers", default="", help="comma-separated priority list (default: all usable)")
    args = parser.parse_args(argv)

    print(f"onyxrt {ort.__version__} (onnx {onnx.__version__}, numpy {np.__version__})\n")
    _print_providers()

    description, build = models[args.model]
    t0 = time.perf_counter()
    model = build()
    build_s = time.perf_counter() - t0
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.model}.onnx"
        onnx.save_model(model, path)
        print(f"\nModel: {description}")
        print(f"  {len(model.graph.node)} nodes, {params / 1e6:.2f} M parameters, "
              f"{path.stat().st_size / 1e6:.1f} MB on disk (built in {build_s:.2f} s)")

        providers = [p for p in args.providers.split(",") if p] or ort.get_available_providers()
        options = ort.SessionOptions()
        # The models' batch dim is symbolic; fixing it gives every node static shapes,
        # which compile-style providers such as an NPU require.
        options.add_free_dimension_override_by_name("batch", 1)
        # The simulated NPU reports its cost model's device time only in the profile
        # (profile_summary). Profiling adds microseconds per step to the host time, and no
        # trace file is written: that takes end_profiling(), which the demo never calls.
        options.enable_profiling = True
        t0 = time.perf_counter()
        session = ort.InferenceSession(str(path), options, providers=providers)
        create_ms = (time.perf_counter() - t0) * 1e3
    print(f"  session created in {create_ms:.0f} ms with providers {session.get_providers()}\n")

    print("Placement:")
    for line in str(session.placement).splitlines():
        print(f"  {line}")

    feeds = _inputs(session, np.random.default_rng(0))
    outputs, host = _time_runs(session, feeds, args.runs)
    device_ms = _device_ms_per_run(session)

    print("\nOutputs:")
    for arg, value in zip(session.get_outputs(), outputs):
        flat = np.asarray(value, dtype=np.float64).ravel()
        print(f"  {arg.name}: {value.dtype} {list(value.shape)}  mean {flat.mean():+.5f}  "
              f"std {flat.std():.5f}  min {flat.min():+.4f}  max {flat.max():+.4f}")
        if value.ndim == 2 and value.shape[1] > 5:
            top = np.argsort(value[0])[::-1][:5]
            print(f"  top-5 classes of sample 0: {top.tolist()}")

    cpu: Latency | None = None
    if set(session.placement.providers_used) != {"CPUExecutionProvider"}:
        cpu_options = ort.SessionOptions()
        cpu_options.add_free_dimension_override_by_name("batch", 1)
        cpu_session = ort.InferenceSession(model.SerializeToString(), cpu_options,
                                           providers=["CPUExecutionProvider"])
        _, cpu = _time_runs(cpu_session, feeds, args.runs)
    _print_timing(device_ms, host, cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
