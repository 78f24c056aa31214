"""Session creation: onyxrt against onnxruntime, many interleaved creations per model.

    python benchmarks/creation.py                           # all five models, 9 each
    python benchmarks/creation.py --models mobilenet_v2 --repeats 25

``run.py`` times 5 creations of each runtime beside its latency runs; on a shared host
single creations vary up to 2x, so this script times more of them, alternating the two
runtimes so that both meet the same load, after two untimed creations each (imports,
first-use caches). Per model: the medians, their ratio, and the fastest of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting import format_table, positive  # noqa: E402
from run import (  # noqa: E402
    BUILDERS,
    RUNTIMES,
    add_models_argument,
    create_session,
    machine_description,
)


def creation_times(data: bytes, repeats: int) -> dict[str, list[float]]:
    """Seconds per creation of each runtime, ``repeats`` each, interleaved."""
    for _ in range(2):
        for runtime in RUNTIMES:
            create_session(runtime, data)
    times: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    for _ in range(repeats):
        for runtime in RUNTIMES:
            t0 = time.perf_counter()
            session = create_session(runtime, data)
            times[runtime].append(time.perf_counter() - t0)
            del session
    return times


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_models_argument(parser)
    parser.add_argument("--repeats", type=positive, default=9, help="timed creations per runtime")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    print(", ".join(f"{k}: {v}" for k, v in machine_description().items()))
    rows = []
    for name in args.models:
        times = creation_times(BUILDERS[name]().SerializeToString(), args.repeats)
        ours, theirs = (statistics.median(times[r]) * 1e3 for r in RUNTIMES)
        rows.append([name, f"{ours:.1f}", f"{theirs:.1f}", f"{ours / theirs:.2f}",
                     f"{min(times['onyxrt']) * 1e3:.1f}", f"{min(times['onnxruntime']) * 1e3:.1f}"])
    print(f"\nsession creation, medians of {args.repeats} interleaved creations each")
    print(format_table(["model", "onyxrt ms", "ort ms", "ratio", "onyxrt min ms", "ort min ms"],
                       rows, args.markdown))


if __name__ == "__main__":
    main()
