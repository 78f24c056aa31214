"""The onyxrt demo: build a real model, run it, and show where and how fast it ran.

    python -m onyxrt.demo                       # MobileNetV2 (width 0.5, 128x128)
    python -m onyxrt.demo --model bert --runs 5
    python -m onyxrt.demo --providers SimNPUExecutionProvider,CPUExecutionProvider

Prints the providers found (and why any is unusable), the model, the placement of its
nodes, the outputs and the latency.
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
        t0 = time.perf_counter()
        session = ort.InferenceSession(str(path), options, providers=providers)
        create_ms = (time.perf_counter() - t0) * 1e3
    print(f"  session created in {create_ms:.0f} ms with providers {session.get_providers()}\n")

    print("Placement:")
    for line in str(session.placement).splitlines():
        print(f"  {line}")

    feeds = _inputs(session, np.random.default_rng(0))
    outputs = session.run(None, feeds)  # warm-up
    times = []
    for _ in range(max(1, args.runs)):
        t0 = time.perf_counter()
        outputs = session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)

    print("\nOutputs:")
    for arg, value in zip(session.get_outputs(), outputs):
        flat = np.asarray(value, dtype=np.float64).ravel()
        print(f"  {arg.name}: {value.dtype} {list(value.shape)}  mean {flat.mean():+.5f}  "
              f"std {flat.std():.5f}  min {flat.min():+.4f}  max {flat.max():+.4f}")
        if value.ndim == 2 and value.shape[1] > 5:
            top = np.argsort(value[0])[::-1][:5]
            print(f"  top-5 classes of sample 0: {top.tolist()}")
    times.sort()
    p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
    print(f"\nLatency over {len(times)} runs: median {statistics.median(times):.2f} ms, "
          f"p90 {p90:.2f} ms, min {times[0]:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
