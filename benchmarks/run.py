"""Model latency side by side: onyxrt, onnxruntime and onnx.reference in one process.

    python benchmarks/run.py                                  # all five, batch 1
    python benchmarks/run.py --models resnet50,bert --batch 8 --runs 10
    nox -s bench -- --models mobilenet_v2

For each model (built with ``onyxrt.testing.models`` at real sizes, random weights): the
median latency of onyxrt and onnxruntime (interleaved blocks, this machine is noisy), their
ratio, one ``onnx.reference`` run (skipped with --no-reference), session creation times,
and the max relative difference of the outputs. The geometric mean of the ratios closes
the table.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnx

import onyxrt
from onyxrt.testing import models

BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": lambda: models.resnet(),
    "mobilenet_v2": lambda: models.mobilenet_v2(),
    "bert": lambda: models.bert_encoder(),
    "gpt2": lambda: models.gpt2(),
    "vit": lambda: models.vit(),
}


def _feeds(model: onnx.ModelProto, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in model.graph.input:
        dims = [d.dim_value or batch for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = (np.ones(dims, np.int64) if "mask" in inp.name
                               else rng.integers(0, 1000, size=dims, dtype=np.int64))
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench(name: str, batch: int, runs: int, reference: bool) -> float:
    """Print one row; return the onyxrt/onnxruntime latency ratio."""
    import onnxruntime as ort  # the oracle, side by side

    model = BUILDERS[name]()
    data = model.SerializeToString()
    feeds = _feeds(model, batch)
    create_ours = _timed(lambda: onyxrt.InferenceSession(data))
    ours = onyxrt.InferenceSession(data)
    create_theirs = _timed(lambda: ort.InferenceSession(data, providers=["CPUExecutionProvider"]))
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    a, b = ours.run(None, feeds)[0], theirs.run(None, feeds)[0]  # warm-up and check
    rel = float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))
    t_ours, t_theirs = [], []
    for _ in range(runs):
        t_ours.append(_timed(lambda: ours.run(None, feeds)))
        t_theirs.append(_timed(lambda: theirs.run(None, feeds)))
    m_ours, m_theirs = statistics.median(t_ours), statistics.median(t_theirs)
    ref = ""
    if reference:
        from onnx.reference import ReferenceEvaluator

        try:
            evaluator = ReferenceEvaluator(model)
            ref = f"{_timed(lambda: evaluator.run(None, feeds)) * 1e3:9.0f}"
        except Exception as exc:  # onnx.reference fails on some models (BERT's mask)
            ref = f"fails ({type(exc).__name__})"
    ratio = m_ours / m_theirs
    print(f"{name:<13} {m_ours * 1e3:9.1f} {m_theirs * 1e3:9.1f} {ratio:6.2f} {ref:>12} "
          f"{create_ours * 1e3:9.0f} {create_theirs * 1e3:9.0f} {rel:9.1e}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(BUILDERS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    print(f"batch {args.batch}, median of {args.runs} interleaved runs (ms)")
    print(f"{'model':<13} {'onyxrt':>9} {'ort':>9} {'ratio':>6} {'reference':>12} "
          f"{'create':>9} {'ort crt':>9} {'max rel':>9}")
    ratios = [bench(n, args.batch, args.runs, not args.no_reference) for n in args.models.split(",")]
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean ratio onyxrt/onnxruntime: {geomean:.2f}")


if __name__ == "__main__":
    main()
