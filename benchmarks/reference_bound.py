"""How much faster than ``onnx.reference`` any runtime can be on this machine, per model.

    python benchmarks/reference_bound.py                     # all five models, batch 1
    python benchmarks/reference_bound.py --models gpt2,vit --reference-runs 3

``onnx.reference`` runs MatMul, Gemm and (through im2col) Conv on numpy, that is on the
same BLAS as everyone else; what it loses is everything around them. So a model whose
time is mostly large GEMMs has a floor no runtime can go under: its multiply-add count
divided by this machine's best float32 GEMM rate. Per model this prints

* GFLOP: 2 x the multiply-adds of its MatMul, Gemm and Conv nodes (shapes from onnx's
  shape inference at the given batch; the other operators' arithmetic is left out, which
  only makes the floor lower);
* the GEMM floor (ms) = GFLOP / the rate numpy's matmul reaches on large square products;
* ``onnx.reference``'s median time, and the largest speedup over it the floor allows;
* onnxruntime's and onyxrt's medians (alternating blocks, as ``run.py`` times them) and
  their speedups over the reference.

A speedup target above "max possible" cannot be met by any runtime on this machine.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting import format_table, positive  # noqa: E402
from run import (  # noqa: E402
    BUILDERS,
    add_models_argument,
    machine_description,
    make_feeds,
    time_interleaved,
)


def _static_dims(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy of ``model`` whose symbolic input dims are ``batch``, shapes inferred."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for inp in fixed.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.dim_value = batch
    return onnx.shape_inference.infer_shapes(fixed, data_prop=True)


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    graph = model.graph
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)
    for t in graph.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def gemm_flops(model: onnx.ModelProto, batch: int) -> float:
    """2 x the multiply-adds of the model's MatMul, Gemm and Conv nodes at ``batch``.

    Raises ValueError naming a node whose shapes shape inference left unknown."""
    inferred = _static_dims(model, batch)
    shapes = _shapes(inferred)
    total = 0.0
    for node in inferred.graph.node:
        if node.op_type not in ("MatMul", "Gemm", "Conv"):
            continue
        try:
            a, b, y = shapes[node.input[0]], shapes[node.input[1]], shapes[node.output[0]]
        except KeyError:
            raise ValueError(f"node {node.name!r} ({node.op_type}): shapes unknown") from None
        if node.op_type == "Conv":
            # every output element: (C / group) x kernel-area multiply-adds, C / group = W's dim 1
            total += 2.0 * math.prod(y) * math.prod(b[1:])
        else:
            trans_a = any(at.name == "transA" and at.i for at in node.attribute)
            k = a[-2] if trans_a else a[-1]
            total += 2.0 * math.prod(y) * k
    return total


def gemm_rate(size: int = 2048, repeats: int = 10) -> float:
    """The best float32 rate (FLOP/s) of numpy's matmul on ``size``-square products."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    np.matmul(a, b)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best


def _median_s(fn: Callable[[], object], runs: int) -> float:
    """The median time (s) of ``runs`` calls of ``fn`` after one untimed call."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass
class Measured:
    """One model's arithmetic and times (s); ``reference_s`` None when it failed."""

    name: str
    flops: float
    reference_s: float | None
    reference_error: str
    ort_s: float
    onyxrt_s: float


def measure(name: str, batch: int, runs: int, reference_runs: int) -> Measured:
    """Arithmetic and times of one model."""
    from onnx.reference import ReferenceEvaluator

    model = BUILDERS[name]()
    flops = gemm_flops(model, batch)
    feeds = make_feeds(model, batch)
    # alternating blocks, as run.py times them (neither runtime timed while the other's
    # threads still spin)
    t_ours, t_ort, *_ = time_interleaved(model.SerializeToString(), feeds, runs)
    try:
        evaluator = ReferenceEvaluator(model)
        return Measured(name, flops, _median_s(lambda: evaluator.run(None, feeds), reference_runs),
                        "", t_ort, t_ours)
    except Exception as exc:  # the reference fails on some models
        return Measured(name, flops, None, type(exc).__name__, t_ort, t_ours)


def format_row(m: Measured, rate: float) -> list[str]:
    """The table row of one model at GEMM ``rate`` (FLOP/s)."""
    floor_s = m.flops / rate
    ref = m.reference_s
    return [
        m.name, f"{m.flops / 1e9:.1f}", f"{floor_s * 1e3:.0f}",
        f"{ref * 1e3:.0f}" if ref else m.reference_error,
        f"{ref / floor_s:.1f}x" if ref else "-",
        f"{m.ort_s * 1e3:.0f}", f"{ref / m.ort_s:.1f}x" if ref else "-",
        f"{m.onyxrt_s * 1e3:.0f}", f"{ref / m.onyxrt_s:.1f}x" if ref else "-",
    ]


HEADERS = ["model", "GFLOP", "GEMM floor ms", "reference ms", "max possible",
           "ort ms", "ort speedup", "onyxrt ms", "onyxrt speedup"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_models_argument(parser)
    parser.add_argument("--batch", type=positive, default=1)
    parser.add_argument("--runs", type=positive, default=5, help="alternating blocks of timed runs")
    parser.add_argument("--reference-runs", type=positive, default=3)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    # The best of two measurements (this machine is shared: a busy moment must not lower
    # the rate, which would raise every "max possible"); the second after the models.
    rate = gemm_rate()
    results = [measure(n, args.batch, args.runs, args.reference_runs) for n in args.models]
    rate = max(rate, gemm_rate())
    print(", ".join(f"{k}: {v}" for k, v in machine_description().items()))
    print(f"\nbest float32 GEMM rate (numpy matmul, 2048^3): {rate / 1e9:.0f} GFLOP/s; batch {args.batch}")
    rows = [format_row(r, rate) for r in results]
    print(format_table(HEADERS, rows, args.markdown))


if __name__ == "__main__":
    main()
