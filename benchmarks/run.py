"""Model benchmarks: onyxrt side by side with onnxruntime (and onnx.reference).

    python benchmarks/run.py                                  # all five models, batch 1
    python benchmarks/run.py --models resnet50,bert --batch 1,8 --runs 10
    python benchmarks/run.py --no-reference --no-memory      # latency only, quicker
    python benchmarks/run.py --markdown --json bench.json    # for docs/performance.md
    python benchmarks/run.py --models vit --profile vit      # plus onyxrt's per-op breakdown
    nox -s bench -- --models mobilenet_v2

Models come from ``onyxrt.testing.models`` at their full sizes with random weights. One
table per batch size; per model:

* latency: the medians over ``--runs`` alternating blocks of onyxrt and onnxruntime runs
  (each block 0.25 s of untimed runs, then two timed ones, so neither runtime pays for the
  other's still-spinning threads; this machine is noisy) and their ratio;
* ``onnx.reference``: the median of ``--reference-runs`` runs and how many times faster
  onyxrt is, or the exception type when it cannot run the model;
* session creation: the median of 5 for each runtime, interleaved;
* the max relative difference of the outputs, onyxrt vs onnxruntime;
* peak memory (unless ``--no-memory``): a child process per runtime, model and batch builds
  the model, creates the session and runs it a few times. "MiB" is the growth of the peak
  resident set from just before the session is created (the kernel's peak mark is reset
  there where Linux allows it, so the model builder's own peak is left out); "peak MiB" is
  the process's absolute peak from that point on.

Under each table: the geometric mean and the max of the onyxrt/onnxruntime latency ratio.
``--profile MODEL`` then runs onyxrt with profiling on that model (first batch size) and
prints the time per op type.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from reporting import format_table, geomean, positive

import onyxrt
from onyxrt.testing import models

BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": lambda: models.resnet(),
    "mobilenet_v2": lambda: models.mobilenet_v2(),
    "bert": lambda: models.bert_encoder(),
    "gpt2": lambda: models.gpt2(),
    "vit": lambda: models.vit(),
}
RUNTIMES = ("onyxrt", "onnxruntime")
CREATE_REPEATS = 5  # session creations timed per runtime (interleaved)
MEMORY_RUNS = 3  # runs in each memory child


# --------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (the platform's processor string elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _numpy_blas() -> str:
    """The BLAS numpy was built with, from ``numpy.show_config(mode="dicts")``."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (TypeError, KeyError):  # numpy < 2 has no mode="dicts"
        return "unknown"
    return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def machine_description() -> dict[str, str]:
    """CPU, core count, the versions the figures depend on and any thread-count variables."""
    machine = {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": _numpy_blas(),
        "onnxruntime": ort.__version__,
        "onyxrt": onyxrt.__version__,
    }
    return machine | {v: os.environ[v] for v in THREAD_VARIABLES if v in os.environ}


# --------------------------------------------------------------------------- models


class FixedBatchError(ValueError):
    """The model declares a fixed batch size other than the one asked for."""


def make_feeds(model: onnx.ModelProto, batch: int) -> dict[str, np.ndarray]:
    """Random inputs for ``model``: symbolic dims become ``batch``, fixed dims are kept.

    Raises :class:`FixedBatchError` when an input's leading dim is fixed to another size.
    """
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in model.graph.input:
        tensor_type = inp.type.tensor_type
        dims = [d.dim_value or batch for d in tensor_type.shape.dim]
        if dims and dims[0] != batch:
            raise FixedBatchError(f"input {inp.name!r} has a fixed batch of {dims[0]}")
        if tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = (np.ones(dims, np.int64) if "mask" in inp.name
                               else rng.integers(0, 1000, size=dims, dtype=np.int64))
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def create_session(runtime: str, data: bytes) -> Any:
    """An inference session of ``runtime`` ("onyxrt" or "onnxruntime") on CPU."""
    if runtime == "onyxrt":
        return onyxrt.InferenceSession(data)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def max_rel_diff(ours: Sequence[np.ndarray], theirs: Sequence[np.ndarray]) -> float:
    """Max over the outputs of max|ours - theirs| / max|theirs|."""
    worst = 0.0
    for a, b in zip(ours, theirs):
        b64 = np.asarray(b, np.float64)
        diff = np.max(np.abs(np.asarray(a, np.float64) - b64), initial=0.0)
        worst = max(worst, float(diff / max(np.max(np.abs(b64), initial=0.0), 1e-30)))
    return worst


# --------------------------------------------------------------------------- memory


@dataclass
class Memory:
    """Peak resident memory of one runtime on one model (MiB)."""

    delta_mib: float  # peak growth from just before the session was created
    peak_mib: float  # absolute peak of the process from that point on


def _peak_rss_kib() -> int:
    """This process's peak resident set (KiB): VmHWM on Linux, else ``ru_maxrss``."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS


def _reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS mark to the current RSS where allowed; return it (KiB).

    ``ru_maxrss`` cannot be reset, and after ``exec`` it starts at the parent's RSS, so a
    child of this (large) process would report the parent's size: hence VmHWM.
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        pass
    return _peak_rss_kib()


def child_memory(spec: str) -> None:
    """Child process entry (``--_child-memory runtime,model,batch``): print Memory as JSON."""
    runtime, name, batch = spec.split(",")
    model = BUILDERS[name]()
    data = model.SerializeToString()
    feeds = make_feeds(model, int(batch))
    del model
    gc.collect()
    before = _reset_peak_rss()
    session = create_session(runtime, data)
    for _ in range(MEMORY_RUNS):
        session.run(None, feeds)
    peak = _peak_rss_kib()
    print(json.dumps(asdict(Memory((peak - before) / 1024, peak / 1024))))


# Memory children per runtime and model; the smallest growth is kept. This machine
# reclaims idle pages in the background (DAMON), which can shrink a child's resident set
# just before the session is created and then bill the faults that bring it back as
# growth (seen once: ViT 300 -> 621 MiB with the same absolute peak).
MEMORY_CHILDREN = 2


def measure_memory(runtime: str, name: str, batch: int) -> Memory:
    """Run :func:`child_memory` in fresh Python processes and keep the smallest report."""
    reports = []
    for _ in range(MEMORY_CHILDREN):
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--_child-memory",
             f"{runtime},{name},{batch}"],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"memory child {runtime},{name},{batch} failed:\n{proc.stderr[-2000:]}")
        reports.append(Memory(**json.loads(proc.stdout.strip().splitlines()[-1])))
    return min(reports, key=lambda m: m.delta_mib)


# --------------------------------------------------------------------------- latency


@dataclass
class Row:
    """All figures for one model at one batch size (times in ms)."""

    model: str
    batch: int
    onyxrt_ms: float
    ort_ms: float
    create_ms: float
    ort_create_ms: float
    max_rel_diff: float
    reference_ms: float | None = None
    reference_error: str | None = None
    memory: dict[str, Memory] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """onyxrt latency over onnxruntime latency."""
        return self.onyxrt_ms / self.ort_ms


def _create_both(data: bytes) -> tuple[Any, Any, float, float]:
    """Both sessions, and the median creation time of each (interleaved, seconds)."""
    times: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    sessions: dict[str, Any] = {}
    for _ in range(CREATE_REPEATS):
        for runtime in RUNTIMES:
            sessions.pop(runtime, None)
            t0 = time.perf_counter()
            sessions[runtime] = create_session(runtime, data)
            times[runtime].append(time.perf_counter() - t0)
    return (sessions["onyxrt"], sessions["onnxruntime"],
            statistics.median(times["onyxrt"]), statistics.median(times["onnxruntime"]))


def measure_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                      runs: int) -> tuple[float | None, str | None]:
    """Median ``onnx.reference`` run time (s), or None and the exception type's name."""
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(model)
        return statistics.median(_timed(lambda: evaluator.run(None, feeds))
                                 for _ in range(runs)), None
    except Exception as exc:  # onnx.reference fails on some models (BERT's mask)
        return None, type(exc).__name__


# Timed runs per block in time_interleaved (the block's first run is not timed).
BLOCK_RUNS = 2
# Untimed runs open each block for at least this long (s): long enough for the other
# runtime's idle threads to stop spinning (OpenBLAS's spin for about 0.1 s, onnxruntime's
# intra-op pool for a while too), so that neither is timed while the other's threads still
# occupy a core. Busy, not a sleep: after an idle pause this machine runs the next runs up
# to 40% slower (MobileNetV2: 9.6 ms steady, 13.3 ms after 0.3 s idle), which would bill
# whichever runtime suffers more from it.
WARMUP_S = 0.25


def time_interleaved(data: bytes, feeds: dict[str, np.ndarray],
                     runs: int) -> tuple[float, float, float, float, float]:
    """Median run and creation times (s) of onyxrt and onnxruntime, and the max relative
    difference of their outputs (the first run of each, which is also the warm-up)."""
    ours, theirs, create_ours, create_theirs = _create_both(data)
    rel = max_rel_diff(ours.run(None, feeds), theirs.run(None, feeds))
    t_ours, t_theirs = [], []
    # Alternating blocks, each opened by WARMUP_S of untimed runs: after a run both
    # runtimes' thread pools keep spinning for a while (onnxruntime's intra-op threads,
    # OpenBLAS's), which would bill one runtime for the other's idle threads.
    for _ in range(runs):
        for session, times in ((ours, t_ours), (theirs, t_theirs)):
            start = time.perf_counter()
            session.run(None, feeds)
            while time.perf_counter() - start < WARMUP_S:
                session.run(None, feeds)
            times.extend(_timed(lambda s=session: s.run(None, feeds)) for _ in range(BLOCK_RUNS))
    return (statistics.median(t_ours), statistics.median(t_theirs), create_ours, create_theirs,
            rel)


def measure(name: str, batch: int, runs: int, reference_runs: int) -> Row:
    """Latency, creation time, accuracy and (if asked) reference time of one model."""
    model = BUILDERS[name]()
    feeds = make_feeds(model, batch)
    ours, theirs, create_ours, create_theirs, rel = time_interleaved(
        model.SerializeToString(), feeds, runs)
    row = Row(name, batch, onyxrt_ms=ours * 1e3, ort_ms=theirs * 1e3,
              create_ms=create_ours * 1e3, ort_create_ms=create_theirs * 1e3, max_rel_diff=rel)
    if reference_runs:
        ref_s, row.reference_error = measure_reference(model, feeds, reference_runs)
        row.reference_ms = None if ref_s is None else ref_s * 1e3
    return row


# --------------------------------------------------------------------------- output


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "n/a"


def _cells(row: Row, reference: bool, memory: bool) -> list[str]:
    """The table cells of one row."""
    cells = [row.model, f"{row.onyxrt_ms:.1f}", f"{row.ort_ms:.1f}", f"{row.ratio:.2f}"]
    if reference:
        if row.reference_ms is None:
            cells += [f"fails ({row.reference_error})", ""]
        else:
            cells += [f"{row.reference_ms:.0f}", f"{row.reference_ms / row.onyxrt_ms:.1f}x faster"]
    cells += [f"{row.create_ms:.0f}", f"{row.ort_create_ms:.0f}", f"{row.max_rel_diff:.1e}"]
    if memory:
        ours, theirs = row.memory["onyxrt"], row.memory["onnxruntime"]
        cells += [f"{ours.delta_mib:.0f}", f"{theirs.delta_mib:.0f}",
                  _ratio(ours.delta_mib, theirs.delta_mib),
                  f"{ours.peak_mib:.0f}", f"{theirs.peak_mib:.0f}"]
    return cells


def _headers(reference: bool, memory: bool) -> list[str]:
    headers = ["model", "onyxrt ms", "ort ms", "ratio"]
    if reference:
        headers += ["reference ms", "onyxrt vs reference"]
    headers += ["onyxrt create ms", "ort create ms", "max rel diff"]
    if memory:
        headers += ["onyxrt MiB", "ort MiB", "MiB ratio", "onyxrt peak MiB", "ort peak MiB"]
    return headers


def summarize(rows: list[Row]) -> dict[str, Any]:
    """Geometric mean and max of the latency ratios."""
    worst = max(rows, key=lambda r: r.ratio)
    return {
        "geomean_ratio": geomean(r.ratio for r in rows),
        "max_ratio": worst.ratio,
        "max_ratio_model": worst.model,
    }


# --------------------------------------------------------------------------- profile


def profile(name: str, batch: int, runs: int) -> dict[str, Any]:
    """onyxrt's time per op type on one model (ms per run), warm-up run left out."""
    model = BUILDERS[name]()
    feeds = make_feeds(model, batch)
    options = onyxrt.SessionOptions()
    options.enable_profiling = True
    session = onyxrt.InferenceSession(model.SerializeToString(), options)
    session.run(None, feeds)
    warm = session.profile_summary()
    for _ in range(runs):
        session.run(None, feeds)
    total = session.profile_summary()

    def per_run_ms(after: float, before: float) -> float:
        return (after - before) / runs / 1e3

    ops = {op: per_run_ms(us, warm.per_op_type.get(op, 0.0))
           for op, us in total.top_ops(len(total.per_op_type))}
    return {
        "model": name, "batch": batch, "runs": runs,
        "run_ms": per_run_ms(total.run_us, warm.run_us),
        "per_op_type_ms": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
        "copy_ms": per_run_ms(total.copy_us, warm.copy_us),
    }


def format_profile(prof: dict[str, Any], markdown: bool) -> str:
    """The per-op-type breakdown as a table, then copies (if any) and time outside kernels."""
    run_ms = prof["run_ms"]
    kernels = sum(prof["per_op_type_ms"].values())
    entries = list(prof["per_op_type_ms"].items())
    if prof["copy_ms"]:
        entries.append(("(copies between devices)", prof["copy_ms"]))
    entries.append(("(outside kernels)", run_ms - kernels - prof["copy_ms"]))
    rows = [[op, f"{ms:.2f}", f"{100 * ms / run_ms:.1f}"] for op, ms in entries]
    title = (f"onyxrt profile: {prof['model']}, batch {prof['batch']}, {prof['runs']} runs, "
             f"{run_ms:.1f} ms per run")
    return title + "\n" + format_table(["op type", "ms per run", "% of run"], rows, markdown)


# --------------------------------------------------------------------------- main


def model_list(text: str) -> list[str]:
    """Parse ``--models resnet50,bert``: names from :data:`BUILDERS`."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = sorted(set(names) - set(BUILDERS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown models {', '.join(unknown)}; choose from {', '.join(BUILDERS)}"
        )
    return names


def add_models_argument(parser: argparse.ArgumentParser) -> None:
    """``--models``, as every benchmark script here takes it (default: all five)."""
    parser.add_argument("--models", type=model_list, default=list(BUILDERS),
                        help=f"comma-separated, from {', '.join(BUILDERS)} (default: all)")


def _batch_list(text: str) -> list[int]:
    """Parse ``--batch 1,8``."""
    return [positive(b) for b in text.split(",")]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_models_argument(parser)
    parser.add_argument("--batch", type=_batch_list, default=[1],
                        help="batch sizes, comma-separated: one table each (default: 1)")
    parser.add_argument("--runs", type=positive, default=10, help="timed runs per runtime")
    parser.add_argument("--reference-runs", type=positive, default=1,
                        help="onnx.reference runs per model (median)")
    parser.add_argument("--no-reference", action="store_true", help="skip onnx.reference")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the peak memory measurements (child processes, slow)")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", metavar="PATH", help="also write all figures as JSON")
    parser.add_argument("--profile", metavar="MODEL", choices=list(BUILDERS),
                        help="then profile onyxrt on MODEL (first batch size): time per op type")
    parser.add_argument("--profile-runs", type=positive, default=5, help="runs profiled")
    parser.add_argument("--_child-memory", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run_table(args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """Measure every model at one batch size, print the table, return its figures."""
    reference, memory = not args.no_reference, not args.no_memory
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    for name in args.models:
        try:
            row = measure(name, batch, args.runs, args.reference_runs if reference else 0)
        except FixedBatchError as exc:
            skipped[name] = f"batch {batch} not possible: {exc}"
            continue
        if memory:
            row.memory = {r: measure_memory(r, name, batch) for r in RUNTIMES}
        rows.append(row)
    print(f"\nbatch {batch}: medians over {args.runs} alternating blocks of {BLOCK_RUNS} timed runs")
    print(format_table(_headers(reference, memory),
                       [_cells(r, reference, memory) for r in rows], args.markdown))
    result: dict[str, Any] = {"batch": batch, "rows": [asdict(r) | {"ratio": r.ratio} for r in rows],
                              "skipped": skipped}
    if rows:
        result |= summarize(rows)
        print(f"\ngeometric mean ratio onyxrt/onnxruntime: {result['geomean_ratio']:.2f}; "
              f"max {result['max_ratio']:.2f} ({result['max_ratio_model']})")
    for name, reason in skipped.items():
        print(f"{name}: {reason}")
    return result


def main(argv: Sequence[str] | None = None) -> None:
    """Print the machine, one table per batch size and the optional profile."""
    args = parse_args(argv)
    if args._child_memory:
        child_memory(args._child_memory)
        return
    machine = machine_description()
    print(", ".join(f"{k}: {v}" for k, v in machine.items()))
    report: dict[str, Any] = {
        "machine": machine,
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "_child_memory")},
        "tables": [run_table(args, batch) for batch in args.batch],
    }
    if args.profile:
        report["profile"] = profile(args.profile, args.batch[0], args.profile_runs)
        print("\n" + format_profile(report["profile"], args.markdown))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
