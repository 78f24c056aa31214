"""Per-layer Conv latency of ResNet-50 and MobileNetV2, onyxrt vs onnxruntime.

    python benchmarks/conv_layers.py                               # both models, batch 1
    python benchmarks/conv_layers.py --batch 8 --runs 10
    python benchmarks/conv_layers.py --models mobilenet_v2 --runs 50

Every Conv node of the model (built with ``onyxrt.testing.models`` at 224x224) is reduced
to its geometry (input shape, weight shape, strides, pads, group); each distinct geometry
becomes a one-node Conv model with random weights, run by both runtimes in this process in
interleaved blocks (this machine is shared and noisy). Per geometry the table shows how
many Conv nodes of the model have it, the median latency of each runtime and their ratio;
the totals weight each geometry by its count, i.e. the model's whole Conv time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

import onyxrt
from onyxrt.testing import models

BUILDERS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "resnet50": lambda batch: models.resnet(batch=batch),
    "mobilenet_v2": lambda batch: models.mobilenet_v2(batch=batch),
}


@dataclass(frozen=True)
class ConvShape:
    """The geometry of one Conv node: all that its latency depends on."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    group: int

    def label(self) -> str:
        n, c, h, wd = self.x
        m, _, kh, kw = self.w
        kind = (
            "dw"
            if self.group > 1 and self.group == c
            else f"g{self.group}"
            if self.group > 1
            else ""
        )
        return f"{kh}x{kw}/s{self.strides[0]} {kind:3} {c:>4}->{m:<4} @{h}x{wd}"


def conv_shapes(model: onnx.ModelProto) -> dict[ConvShape, int]:
    """Each distinct Conv geometry of ``model`` → how many of its nodes have it."""
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {
        vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        for vi in [*inferred.graph.input, *inferred.graph.value_info]
    }
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    counts: dict[ConvShape, int] = {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        w = weights[node.input[1]]
        nsp = len(w) - 2
        shape = ConvShape(
            x=dims[node.input[0]],
            w=w,
            strides=tuple(attrs.get("strides", [1] * nsp)),
            pads=tuple(attrs.get("pads", [0] * 2 * nsp)),
            group=int(attrs.get("group", 1)),
        )
        counts[shape] = counts.get(shape, 0) + 1
    return counts


def conv_model(shape: ConvShape) -> onnx.ModelProto:
    """A one-node Conv model of ``shape`` with random (fixed-seed) weights."""
    rng = np.random.default_rng(0)
    fan_in = int(np.prod(shape.w[1:]))
    w = (rng.standard_normal(shape.w) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    node = helper.make_node(
        "Conv",
        ["x", "w"],
        ["y"],
        kernel_shape=list(shape.w[2:]),
        strides=list(shape.strides),
        pads=list(shape.pads),
        group=shape.group,
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape.x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _block(run: Callable[[], object], runs: int) -> float:
    t0 = time.perf_counter()
    for _ in range(runs):
        run()
    return (time.perf_counter() - t0) / runs


def bench_shape(shape: ConvShape, runs: int, repeats: int) -> tuple[float, float]:
    """Median seconds per run of (onyxrt, onnxruntime) on one Conv geometry."""
    import onnxruntime as ort  # the oracle we compare against

    data = conv_model(shape).SerializeToString()
    feeds = {"x": np.random.default_rng(1).standard_normal(shape.x).astype(np.float32)}
    ours = onyxrt.InferenceSession(data)
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        ours.run(None, feeds)[0], theirs.run(None, feeds)[0], rtol=1e-3, atol=1e-3
    )
    for _ in range(3):  # warm-up: caches, thread pools, first-run allocations
        ours.run(None, feeds)
        theirs.run(None, feeds)
    t_ours, t_theirs = [], []
    for _ in range(repeats):
        t_ours.append(_block(lambda: ours.run(None, feeds), runs))
        t_theirs.append(_block(lambda: theirs.run(None, feeds), runs))
    return statistics.median(t_ours), statistics.median(t_theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=10, help="runs per timing block")
    parser.add_argument("--repeats", type=int, default=7, help="timing blocks per runtime")
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    args = parser.parse_args()

    for name in args.models.split(","):
        counts = conv_shapes(BUILDERS[name](args.batch))
        print(
            f"{name}, batch {args.batch}: {sum(counts.values())} Conv nodes, "
            f"{len(counts)} shapes; median of {args.repeats} blocks x {args.runs} runs"
        )
        print(f"  {'shape':34} {'count':>5} {'onyxrt ms':>10} {'ort ms':>9} {'ratio':>6}")
        total_ours = total_theirs = 0.0
        for shape, count in counts.items():
            ours, theirs = bench_shape(shape, args.runs, args.repeats)
            total_ours += count * ours
            total_theirs += count * theirs
            print(
                f"  {shape.label():34} {count:5d} {ours * 1e3:10.3f} {theirs * 1e3:9.3f} "
                f"{ours / theirs:6.2f}"
            )
        print(
            f"  {'total (weighted by count)':34} {'':5} {total_ours * 1e3:10.2f} "
            f"{total_theirs * 1e3:9.2f} {total_ours / total_theirs:6.2f}\n"
        )


if __name__ == "__main__":
    main()
