"""Model families against onnxruntime, each runtime in its own fresh process.

    python benchmarks/families.py                                    # every family
    python benchmarks/families.py --families recurrent,tiny --runs 20 --repeats 3
    python benchmarks/families.py --families exports,quantized --exports /tmp/exports
    python benchmarks/families.py --models bert,bert_int8_dynamic --runs 5 --repeats 1
    python benchmarks/families.py --markdown --json families.json   # for docs/performance.md
    nox -s bench_models -- --families exports --runs 10              # exports made with torch first

Families (``--families``, comma-separated; default all):

* ``exports`` (a): the real torch exports in ``--exports DIR`` (default ``exports/``, else
  ``/tmp/exports``; made by benchmarks/real_exports.py): resnet50, mobilenet_v2, bert, gpt2,
  vit at batch 1 (text models seq 128, int64 ids in [0, 1000), mask ones).
* ``quantized`` (b): made from (a) with onnxruntime's quantization tools and cached in
  ``DIR/quantized/``: dynamic int8 (``quantize_dynamic``, QInt8 weights) of bert, gpt2,
  vit and mobilenet_v2 (and of mobilenet_v2 with QUInt8 weights: a CNN's convolutions
  become ConvInteger); static QDQ int8 (``quantize_static`` after ``quant_pre_process``, 4 random calibration
  batches) of resnet50 and mobilenet_v2; 4-bit weights (``MatMulNBitsQuantizer``, block 32,
  symmetric) of bert and gpt2. A model a tool cannot make is reported as "could not be
  produced" and the others go on (GPT-2's export spells its linear layers as Gemm, which
  MatMulNBitsQuantizer does not take, so its 4-bit model is reported so).
* ``recurrent`` (c) and ``tiny`` (d): built by benchmarks/family_models.py (onnx.helper as
  torch exports write them; skl2onnx defaults for the scikit-learn models, i.e. with ZipMap)
  into a temporary folder.
* ``sklearn`` (e): scikit-learn estimators fitted on a 20-feature set and converted by
  skl2onnx with its defaults (benchmarks/family_models.py ``SKLEARN``): nearest neighbours
  (a Scan computing distances), SVC with probabilities, SVR, PolynomialFeatures + Ridge
  (~460 tiny nodes), IsolationForest (~1360 nodes), GaussianNB, MLPClassifier,
  GradientBoostingRegressor, PCA + KMeans — what a converter writes, not a builder.

Every measurement is a fresh Python process running one runtime on one model; runtimes
alternate (onnxruntime, onyxrt, onnxruntime, onyxrt, ... ``--repeats`` times each). The
children run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from the environment. A
child takes t0 before ``import onnxruntime``/``import onyxrt`` (numpy is imported by the
runtime, so it is counted too; onyxrt's modules are byte-compiled first, as a pip install
leaves them), creates the session from the file path (CPU provider,
default options): creation = import + creation; first run = the first ``run``; then
``WARMUP_RUNS`` untimed runs and ``--runs`` timed ones: their median. Feeds come from the
session's inputs, deterministically (numpy ``default_rng(0)``): free dims batch=1, seq=128,
others 1; int64 ids in [0, 1000), masks ones; floats standard normal.

The parent keeps, per model and runtime, the median over the repeats of each figure, and
prints one table per family: latency, first run and creation for both runtimes with the
onyxrt/onnxruntime ratios, and the max abs difference of onyxrt's outputs from
onnxruntime's (first run of the first repeat; in brackets, over the max |onnxruntime
output|), so a fast wrong result shows. ZipMap outputs are compared as [rows, classes].
Under each table: geometric mean and max of each ratio, and the import time alone (it is
part of creation; ``import_ms`` in the JSON); under ``quantized``: whether each quantized
model is faster on onyxrt than its float32 export (when ``exports`` was measured too).
Quantized models differ between any two int8 implementations by a few quantization steps
(onnxruntime with and without its graph optimizations does too): judge those diffs against
that, not against float tolerances.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from reporting import format_table, geomean, positive  # noqa: E402

FAMILIES = ("exports", "quantized", "recurrent", "tiny", "sklearn")
EXPORTS = ("resnet50", "mobilenet_v2", "bert", "gpt2", "vit")
RUNTIMES = ("ort", "onyxrt")  # the order of each repeat
WARMUP_RUNS = 3
DROPPED_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
FREE_DIMS = {"batch": 1, "seq": 128}


# --------------------------------------------------------------------------- child


def _dim(d: Any) -> int:
    if isinstance(d, int) and d > 0:
        return d
    text = str(d or "").lower()
    for key, value in FREE_DIMS.items():
        if key in text:
            return value
    return 1


def make_feeds(inputs: list[Any]) -> dict[str, Any]:
    """Deterministic feeds for a session's ``get_inputs()``."""
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for inp in inputs:
        dims = [_dim(d) for d in inp.shape]
        kind = inp.type
        if "int64" in kind or "int32" in kind:
            dtype = np.int64 if "int64" in kind else np.int32
            feeds[inp.name] = (np.ones(dims, dtype) if "mask" in inp.name
                               else rng.integers(0, 1000, size=dims).astype(dtype))
        elif "float16" in kind:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float16)
        elif "double" in kind:
            feeds[inp.name] = rng.standard_normal(dims)
        elif "bool" in kind:
            feeds[inp.name] = np.ones(dims, bool)
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _plain(value: Any) -> Any:
    """An output as numpy: a ZipMap's list of dicts becomes [rows, classes] by sorted key."""
    import numpy as np

    if isinstance(value, list) and value and isinstance(value[0], dict):
        keys = sorted(value[0])
        return np.array([[row[k] for k in keys] for row in value], np.float64)
    return np.asarray(value)


def child(spec: dict[str, Any]) -> None:
    """One runtime on one model; prints its figures as JSON (and pickles the first outputs)."""
    t0 = time.perf_counter()
    if spec["runtime"] == "onyxrt":
        import onyxrt as rt
    else:
        import onnxruntime as rt  # type: ignore[no-redef]
    imported = time.perf_counter() - t0
    session = rt.InferenceSession(spec["path"], providers=["CPUExecutionProvider"])
    creation = time.perf_counter() - t0
    feeds = make_feeds(session.get_inputs())
    t1 = time.perf_counter()
    first = session.run(None, feeds)
    first_run = time.perf_counter() - t1
    for _ in range(WARMUP_RUNS):
        session.run(None, feeds)
    times = []
    for _ in range(spec["runs"]):
        t1 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t1)
    if spec.get("outputs"):
        with open(spec["outputs"], "wb") as fh:
            pickle.dump([_plain(v) for v in first], fh)
    print(json.dumps({"import_ms": imported * 1e3, "creation_ms": creation * 1e3, "first_run_ms": first_run * 1e3,
                      "median_ms": statistics.median(times) * 1e3}))


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}


def measure(runtime: str, path: Path, runs: int, outputs: Path | None) -> dict[str, float]:
    """Run :func:`child` in a fresh process; its figures (raises with its stderr if it fails)."""
    spec = {"runtime": runtime, "path": str(path), "runs": runs, "outputs": str(outputs) if outputs else None}
    proc = subprocess.run([sys.executable, str(HERE / "families.py"), "--_child", json.dumps(spec)],
                          capture_output=True, text=True, check=False, env=child_env())
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise RuntimeError(lines[-1] if lines else f"exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- models


def default_exports() -> Path:
    local = Path("exports")
    return local if (local / "resnet50.onnx").exists() else Path("/tmp/exports")


def _only(names: Any, wanted: list[str] | None) -> list[str]:
    return [n for n in names if wanted is None or n in wanted]


def family_models(family: str, exports: Path, built: Path,
                  wanted: list[str] | None = None) -> dict[str, Path | str]:
    """Model name -> its file, or the reason it could not be produced (only ``wanted`` ones)."""
    import family_models as fm

    models: dict[str, Path | str] = {}
    if family == "exports":
        for name in _only(EXPORTS, wanted):
            path = exports / f"{name}.onnx"
            models[name] = path if path.exists() else f"could not be produced: {path} is missing"
    elif family == "quantized":
        for name in _only(fm.QUANTIZED, wanted):
            try:
                models[name] = fm.produce_quantized(name, exports, exports / "quantized")
            except Exception as exc:  # noqa: BLE001 - reported, the others go on
                models[name] = f"could not be produced: {type(exc).__name__}: {str(exc)[:300]}"
    else:
        import onnx

        builders = {"recurrent": fm.RECURRENT, "tiny": fm.TINY, "sklearn": fm.SKLEARN}[family]
        for name in _only(builders, wanted):
            builder = builders[name]
            path = built / f"{name}.onnx"
            try:
                onnx.save(builder(), str(path))
                models[name] = path
            except Exception as exc:  # noqa: BLE001
                models[name] = f"could not be produced: {type(exc).__name__}: {str(exc)[:300]}"
    return models


# --------------------------------------------------------------------------- parent


def output_diff(ours: Path, theirs: Path) -> tuple[float, float] | str:
    """Max abs difference of the outputs, and that over the max |onnxruntime output|."""
    import numpy as np

    with open(ours, "rb") as fh:
        a = pickle.load(fh)
    with open(theirs, "rb") as fh:
        b = pickle.load(fh)
    worst, scale = 0.0, 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return f"shape {x.shape} vs {y.shape}"
        if x.dtype.kind in "OUSb":
            worst = max(worst, float(np.any(x != y)))
            continue
        y64 = y.astype(np.float64)
        worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y64), initial=0.0)))
        scale = max(scale, float(np.max(np.abs(y64), initial=0.0)))
    return worst, worst / scale if scale else 0.0


def bench_model(name: str, path: Path, runs: int, repeats: int, scratch: Path) -> dict[str, Any]:
    """Alternating fresh-process measurements; medians over repeats per runtime."""
    samples: dict[str, list[dict[str, float]]] = {rt: [] for rt in RUNTIMES}
    errors: dict[str, str] = {}
    outputs = {rt: scratch / f"{name}.{rt}.pkl" for rt in RUNTIMES}
    for repeat in range(repeats):
        for rt in RUNTIMES:
            if rt in errors:
                continue
            try:
                samples[rt].append(measure(rt, path, runs, outputs[rt] if repeat == 0 else None))
            except RuntimeError as exc:
                errors[rt] = str(exc)[:300]
    row: dict[str, Any] = {"model": name, "path": str(path), "samples": samples, "errors": errors}
    for rt in RUNTIMES:
        for metric in ("median_ms", "first_run_ms", "creation_ms", "import_ms"):
            values = [s[metric] for s in samples[rt]]
            row[f"{rt}_{metric}"] = statistics.median(values) if values else None
    if not errors:
        for metric, key in (("median_ms", "ratio"), ("first_run_ms", "first_run_ratio"),
                            ("creation_ms", "creation_ratio")):
            row[key] = row[f"onyxrt_{metric}"] / row[f"ort_{metric}"]
        diff = output_diff(outputs["onyxrt"], outputs["ort"])
        if isinstance(diff, str):
            row["output_mismatch"] = diff
        else:
            row["max_abs_diff"], row["max_rel_diff"] = diff
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    done = [r for r in rows if "ratio" in r]
    out = {}
    for key in ("ratio", "first_run_ratio", "creation_ratio"):
        values = [r[key] for r in done]
        if values:
            out[f"geomean_{key}"] = geomean(values)
            out[f"max_{key}"] = max(values)
    return out


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.1f}"


def _cells(row: dict[str, Any]) -> list[str]:
    if "unavailable" in row:
        return [row["model"], "could not be produced (below)", "", "", "", "", ""]
    if row["errors"]:
        why = "; ".join(f"{rt} failed: {msg}" for rt, msg in row["errors"].items())
        return [row["model"], _ms(row["onyxrt_median_ms"]), _ms(row["ort_median_ms"]), why, "", "", ""]
    diff = row.get("output_mismatch") or f"{row['max_abs_diff']:.2g} ({row['max_rel_diff']:.1e})"
    return [
        row["model"], _ms(row["onyxrt_median_ms"]), _ms(row["ort_median_ms"]), f"{row['ratio']:.2f}",
        f"{_ms(row['onyxrt_first_run_ms'])} / {_ms(row['ort_first_run_ms'])} ({row['first_run_ratio']:.2f})",
        f"{_ms(row['onyxrt_creation_ms'])} / {_ms(row['ort_creation_ms'])} ({row['creation_ratio']:.2f})",
        diff,
    ]


HEADERS = ["model", "onyxrt ms", "ort ms", "ratio", "first run onyxrt / ort ms (ratio)",
           "creation onyxrt / ort ms (ratio)",
           "max abs diff (relative)"]


def quantized_lines(quantized: list[dict[str, Any]], floats: dict[str, dict[str, Any]]) -> list[str]:
    """Per quantized model: is onyxrt faster on it than on its float32 export?"""
    import family_models as fm

    lines = []
    for row in quantized:
        source, _, kind = fm.QUANTIZED[row["model"]]
        label = "int8" if kind == "int8" else "4-bit weights"
        ours, base = row.get("onyxrt_median_ms"), floats.get(source, {}).get("onyxrt_median_ms")
        if ours is None or base is None:
            why = "not measured" if ours is None else f"{source} (float32) not measured: add --families exports"
            lines.append(f"{row['model']}: {label} faster than float32: n/a ({why})")
        else:
            theirs, their_base = row.get("ort_median_ms"), floats.get(source, {}).get("ort_median_ms")
            context = f"; onnxruntime x{their_base / theirs:.2f}" if theirs and their_base else ""
            lines.append(f"{row['model']}: {label} faster than float32: {'yes' if ours < base else 'no'} "
                         f"(onyxrt {ours:.1f} ms vs {source} {base:.1f} ms, x{base / ours:.2f}{context})")
    return lines


def model_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


#: onyxrt's packages, byte-compiled before measuring (see :func:`byte_compile_onyxrt`).
ONYXRT_PACKAGES = ("onyxrt", "onyxrt_cpu", "onyxrt_ops", "onyxrt_gpu", "onyxrt_cuda", "onyxrt_rocm", "onyxrt_simnpu")


def byte_compile_onyxrt() -> None:
    """Write the .pyc files of onyxrt's packages, as ``pip install`` does for a wheel (and
    did for onnxruntime's): an editable checkout run with PYTHONDONTWRITEBYTECODE set (as on
    the development machine) would otherwise compile every module in every child and bill
    ~180 ms of compilation to onyxrt's session creation."""
    import compileall
    import importlib.util

    for name in ONYXRT_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", type=model_list, default=list(FAMILIES),
                        help=f"comma-separated, from {', '.join(FAMILIES)} (default: all)")
    parser.add_argument("--models", type=model_list, help="only these models (by name, any family)")
    parser.add_argument("--exports", type=Path, default=None, help="folder of the real torch exports")
    parser.add_argument("--runs", type=positive, default=20, help="timed runs per process")
    parser.add_argument("--repeats", type=positive, default=3, help="fresh processes per runtime and model")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", metavar="PATH", help="also write all figures as JSON")
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        child(json.loads(args._child))
        return
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    sys.path.insert(0, str(HERE))
    byte_compile_onyxrt()
    exports = args.exports or default_exports()
    print(f"each runtime alone in a fresh process, alternating, {args.repeats} repeats; "
          f"median of {args.runs} runs per process; exports from {exports}", flush=True)
    report: dict[str, Any] = {"exports": str(exports), "runs": args.runs, "repeats": args.repeats, "families": {}}
    measured: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="families-") as tmp:
        scratch = Path(tmp)
        for family in [f for f in FAMILIES if f in args.families]:
            models = family_models(family, exports, scratch, args.models)
            if not models:
                continue
            rows = []
            for name, path in models.items():
                if isinstance(path, str):
                    row = {"model": name, "unavailable": path}
                else:
                    row = bench_model(name, path, args.runs, args.repeats, scratch)
                    measured[name] = row
                rows.append(row)
            print(f"\n### {family}\n")
            print(format_table(HEADERS, [_cells(r) for r in rows], args.markdown))
            for row in rows:
                if "unavailable" in row:
                    print(f"{row['model']}: {row['unavailable']}")
            summary = summarize(rows)
            if summary:
                print(f"\ngeometric mean / max of onyxrt/ort: latency {summary['geomean_ratio']:.2f} / "
                      f"{summary['max_ratio']:.2f}; first run {summary['geomean_first_run_ratio']:.2f} / "
                      f"{summary['max_first_run_ratio']:.2f}; creation {summary['geomean_creation_ratio']:.2f} / "
                      f"{summary['max_creation_ratio']:.2f}")
                imports = {rt: [r[f"{rt}_import_ms"] for r in rows if r.get(f"{rt}_import_ms")] for rt in RUNTIMES}
                if all(imports.values()):
                    print("import alone (part of creation), median over the models: "
                          f"onyxrt {statistics.median(imports['onyxrt']):.0f} ms, "
                          f"ort {statistics.median(imports['ort']):.0f} ms")
            result: dict[str, Any] = {"rows": rows, "summary": summary}
            if family == "quantized":
                lines = quantized_lines([r for r in rows if "unavailable" not in r], measured)
                if lines:
                    print("\n" + "\n".join(lines))
                result["float_comparison"] = lines
            print(flush=True)
            report["families"][family] = result
    missing = sorted(set(args.models or []) - {r["model"] for f in report["families"].values() for r in f["rows"]})
    if missing:
        print(f"not in the families run: {', '.join(missing)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
