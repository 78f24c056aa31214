"""Model latency with each runtime alone in its own process: the cross-check of run.py.

    python benchmarks/isolated.py                       # all five models, batch 1
    python benchmarks/isolated.py --models mobilenet_v2 --batch 8 --runs 20

run.py times onyxrt and onnxruntime side by side in one process (the comparison the
project reports), where each runtime's idle thread pool can still be spinning while the
other runs. Here every (runtime, model) pair gets a fresh Python process that builds the
model, creates one session, warms it up and times ``--runs`` runs: no other runtime's
threads, no other model's memory. The table shows both medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reporting import geomean, positive  # noqa: E402
from run import BUILDERS, add_models_argument, create_session, make_feeds  # noqa: E402

WARMUP_RUNS = 3


def child(spec: str) -> None:
    """Child entry (``--_child runtime,model,batch,runs``): print the median run in ms."""
    runtime, name, batch, runs = spec.split(",")
    model = BUILDERS[name]()
    feeds = make_feeds(model, int(batch))
    session = create_session(runtime, model.SerializeToString())
    for _ in range(WARMUP_RUNS):
        session.run(None, feeds)
    times = []
    for _ in range(int(runs)):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"median_ms": statistics.median(times) * 1e3}))


def measure(runtime: str, name: str, batch: int, runs: int) -> float:
    """The median (ms) reported by a fresh child process."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--_child", f"{runtime},{name},{batch},{runs}"],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {runtime},{name} failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["median_ms"])


def main() -> None:
    """Print one Markdown table: per model, each runtime's isolated median and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_models_argument(parser)
    parser.add_argument("--batch", type=positive, default=1)
    parser.add_argument("--runs", type=positive, default=15, help="timed runs per process")
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        child(args._child)
        return
    print(f"batch {args.batch}: each runtime alone in a fresh process, median of {args.runs} runs")
    print("| model | onyxrt ms | ort ms | ratio |\n| --- | --- | --- | --- |")
    ratios = []
    for name in args.models:
        ours = measure("onyxrt", name, args.batch, args.runs)
        theirs = measure("ort", name, args.batch, args.runs)
        ratios.append(ours / theirs)
        print(f"| {name} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |", flush=True)
    print(f"\ngeometric mean ratio onyxrt/onnxruntime: {geomean(ratios):.2f}; max {max(ratios):.2f}")


if __name__ == "__main__":
    main()
