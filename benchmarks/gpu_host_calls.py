"""Host calls per batch-1 run of ResNet-50, BERT-base and MobileNetV2 on the CUDA provider,
counted under the simulated CuPy (no GPU needed).

    python benchmarks/gpu_host_calls.py                      # the three models, a markdown table
    python benchmarks/gpu_host_calls.py --json counts.json   # also the counts as JSON
    python benchmarks/gpu_host_calls.py --models resnet50 --by-op 8

Each model comes from :mod:`onyxrt.testing.models` with the shapes the GPU check times
(``benchmarks/gpu_check.py``: ResNet-50 and MobileNetV2 at 224x224, BERT-base at sequence
128; ``--seq`` shortens BERT's sequence), at batch 1. A session with providers
``[CUDA, CPU]`` is created on the simulated device, run once to warm up (the arena fills,
per-shape geometry is cached), then run once more while the simulation counts what that run
asks of CuPy:

* ``launches``: CuPy operations (each math call, view or copy CuPy makes a Python call for;
  a fused function counts once) — the host-side cost a real device pays per call;
* ``allocations``: raw device allocations (``cudaMalloc``; 0 once the arena holds enough);
* ``allocator calls``: requests to the current allocator (the provider's arena), hits included;
* ``h2d``/``d2h``/``d2d``: copies between host and device and between devices;
* ``syncs``: stream, event and device synchronizations;
* ``GEMMs``: matrix products (cuBLAS calls and ``cupy.matmul``).

Each model is counted twice: a plain run, and a replay with ``enable_cuda_graph=1`` (after
a plain run and the run that captures the graph: docs/gpu.md, "CUDA graphs"); ``--modes``
picks one. The simulation models no launch cost and no streams' concurrency, so these are
counts, not times. ``--by-op N`` adds, per model, the N operator types making the most
CuPy calls per run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
MODELS = ("resnet50", "bert", "mobilenet_v2")
#: The counters reported, as (column title, key in the simulation's counters).
COLUMNS = (
    ("launches", "launches"),
    ("allocations", "allocations"),
    ("allocator calls", "allocator_calls"),
    ("h2d", "h2d"),
    ("d2h", "d2h"),
    ("d2d", "d2d"),
    ("syncs", "synchronizations"),
    ("GEMMs", "gemm_calls"),
)


def _build(name: str, seq: int) -> tuple[Any, str]:
    """The model ``name`` at batch 1 and a label saying its shapes."""
    from onyxrt.testing import models

    if name == "resnet50":
        return models.resnet(batch=1), "ResNet-50 (1x3x224x224)"
    if name == "mobilenet_v2":
        return models.mobilenet_v2(batch=1), "MobileNetV2 (1x3x224x224)"
    if name == "bert":
        return models.bert_encoder(batch=1, seq=seq), f"BERT-base (1x{seq})"
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def _feeds(session: Any) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in arg.shape]
        if "int" in arg.type:
            values = (
                np.ones(shape, np.int64)
                if "mask" in arg.name
                else rng.integers(0, 1000, size=shape)
            )
            feeds[arg.name] = values.astype(np.int64)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@contextlib.contextmanager
def _calls_by_op(sim: Any, tally: collections.Counter[str]) -> Iterator[None]:
    """While active, add each GPU kernel's CuPy calls to ``tally`` under its node's op type.

    Wraps ``compute`` wherever a registered kernel class (or a base of one) defines it; a
    kernel calling another compute (FusedConv calls Conv's through ``super()``) is counted
    once, under the outermost call's op type."""
    from onyxrt_gpu.kernels import registry

    depth = threading.local()
    saved: dict[type, Callable[..., Any]] = {}

    def wrap(compute: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(compute)
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            level = getattr(depth, "n", 0)
            depth.n = level + 1
            before = sim.launches
            try:
                return compute(self, *args, **kwargs)
            finally:
                depth.n = level
                if level == 0:
                    info = getattr(self, "info", None)
                    tally[getattr(info, "op_type", type(self).__name__)] += sim.launches - before

        return counted

    for kdef in registry.definitions():
        if not isinstance(kdef.factory, type):
            continue
        for cls in kdef.factory.__mro__:
            if "compute" in vars(cls) and cls not in saved:
                saved[cls] = vars(cls)["compute"]
                cls.compute = wrap(saved[cls])  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for cls, compute in saved.items():
            cls.compute = compute  # type: ignore[attr-defined]


#: The runs counted: plain, and graph replay (enable_cuda_graph=1).
MODES = ("plain", "graph")


def measure(name: str, seq: int, by_op: int, mode: str = "plain") -> dict[str, Any]:
    """Counts of one warm batch-1 run of ``name`` on the simulated CUDA provider (a
    replay of its CUDA graph with ``mode="graph"``)."""
    import onyxrt as ort
    from onyxrt.discovery import reset_catalog
    from onyxrt_gpu.testing import simulated_cupy

    model, label = _build(name, seq)
    with simulated_cupy.install(hip=False) as sim:
        reset_catalog()  # the CUDA provider's probe must see the simulated device
        try:
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cuda = (CUDA, {"enable_cuda_graph": "1"}) if mode == "graph" else CUDA
                session = ort.InferenceSession(model.SerializeToString(), providers=[cuda, CPU])
            created = time.perf_counter() - start
            placed = session.placement.nodes_by_provider()
            feeds = _feeds(session)
            # warm-up: arena filled, geometry cached (with a graph: then captured)
            for _ in range(2 if mode == "graph" else 1):
                session.run(None, feeds)
            tally: collections.Counter[str] = collections.Counter()
            sim.reset_counters()
            start = time.perf_counter()
            with _calls_by_op(sim, tally) if by_op else contextlib.nullcontext():
                session.run(None, feeds)
            ran = time.perf_counter() - start
            counts = sim.counters()
            counts["gemm_calls"] = len(sim.gemm_calls)
        finally:
            reset_catalog()
    row: dict[str, Any] = {
        "model": name,
        "label": label,
        "mode": mode,
        "nodes_on_gpu": len(placed.get(CUDA, [])),
        "nodes_elsewhere": sum(len(v) for k, v in placed.items() if k != CUDA),
        **{key: int(counts[key]) for _, key in COLUMNS},
        "create_s": round(created, 2),
        "run_s_in_simulation": round(ran, 2),
    }
    if by_op:
        row["launches_by_op"] = dict(tally.most_common(by_op))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table (one line per model)."""
    head = ["model", "run", "GPU nodes", *(title for title, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        nodes = str(r["nodes_on_gpu"]) + (
            f" (+{r['nodes_elsewhere']} CPU)" if r["nodes_elsewhere"] else ""
        )
        run = "CUDA graph replay" if r["mode"] == "graph" else "plain"
        cells = [r["label"], run, nodes, *(str(r[key]) for _, key in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--seq", type=int, default=128, help="BERT's sequence length (default 128)")
    parser.add_argument(
        "--by-op",
        type=int,
        default=0,
        metavar="N",
        help="also list the N op types making the most CuPy calls per run",
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the counts as JSON")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        for mode in args.modes:
            row = measure(name, args.seq, args.by_op, mode)
            rows.append(row)
            print(
                f"{row['label']} ({mode}): created in {row['create_s']} s, one run in "
                f"{row['run_s_in_simulation']} s (simulated)",
                file=sys.stderr,
            )
    print(
        "Per batch-1 run on CUDAExecutionProvider under the simulated CuPy, after warm-up runs (and the capture):\n"
    )
    print(table(rows))
    if args.by_op:
        for r in rows:
            ops = ", ".join(f"{op} {n}" for op, n in r["launches_by_op"].items())
            print(f"\n{r['label']} ({r['mode']}), CuPy calls by op type: {ops}")
    if args.json:
        args.json.write_text(json.dumps({"batch": 1, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
