"""Per-node dispatch overhead: a chain of 500 tiny Adds, onyxrt vs onnxruntime.

Each Add works on a 1-element tensor, so the run time is almost entirely the runtime's
own per-node work. Both runtimes run in this process, interleaved, and the medians are
compared (this machine is shared and noisy).

    python benchmarks/dispatch_overhead.py [--nodes 500] [--repeats 15] [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import onyxrt
from onyxrt.testing.models import add_chain


def _time_runs(run, feeds, runs: int) -> float:
    t0 = time.perf_counter()
    for _ in range(runs):
        run(None, feeds)
    return (time.perf_counter() - t0) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=15, help="timing blocks per runtime")
    parser.add_argument("--runs", type=int, default=200, help="runs per timing block")
    args = parser.parse_args()

    import onnxruntime as ort  # the oracle we compare against

    model = add_chain(args.nodes)
    data = model.SerializeToString()
    name = model.graph.input[0].name
    feeds = {name: np.ones([d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim], np.float32)}
    ours = onyxrt.InferenceSession(data)
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ours.run(None, feeds)[0], theirs.run(None, feeds)[0], rtol=1e-6)
    for _ in range(20):  # warm-up
        ours.run(None, feeds)
        theirs.run(None, feeds)
    t_ours, t_theirs = [], []
    for _ in range(args.repeats):
        t_ours.append(_time_runs(ours.run, feeds, args.runs))
        t_theirs.append(_time_runs(theirs.run, feeds, args.runs))
    m_ours, m_theirs = statistics.median(t_ours), statistics.median(t_theirs)
    print(f"{args.nodes}-node Add chain, median of {args.repeats} blocks x {args.runs} runs")
    print(f"  onyxrt:      {m_ours * 1e6:9.1f} us/run  {m_ours / args.nodes * 1e6:6.2f} us/node")
    print(f"  onnxruntime: {m_theirs * 1e6:9.1f} us/run  {m_theirs / args.nodes * 1e6:6.2f} us/node")
    print(f"  ratio onyxrt/onnxruntime: {m_ours / m_theirs:.2f}")


if __name__ == "__main__":
    main()
