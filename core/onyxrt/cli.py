"""The ``onyxrt`` command-line tool (also ``python -m onyxrt``).

Commands::

    onyxrt providers [--format text|json]
        every installed provider: package, version, protocol version, what it is (for the
        CPU provider, which build: compiled kernels or numpy-only), state (usable, or not
        usable with the reason and the fix), devices (virtual ones flagged), and the
        plugins that failed to load.
    onyxrt doctor
        per provider the probe in detail (versions, driver messages) and the exact fix.
    onyxrt explain MODEL [--providers A,B] [--option P.key=value ...] [--dim name=value ...]
                         [--format text|json|html] [--output FILE]
        the session's placement report (``session.placement``), as text, JSON or a
        self-contained HTML page with a picture of the graph (``placement_html``).
    onyxrt run MODEL [--input name=file.npy ...] [--dim ...] [--providers ...] [--save DIR]
                     [--format text|json]
        one run on given or random inputs; per output dtype, shape, mean, min, max.
    onyxrt bench MODEL [--runs N] [--warmup N] [--providers ...] [--dim ...] [--format ...]
        latency percentiles, throughput and the operators that took the most time
        (progress on stderr, see ``onyxrt.progress``).
    onyxrt parity MODEL --providers A[,B] --vs C[,D] [--rtol R] [--atol A] [--format text|json]
        runs both provider lists on the same random inputs and compares the outputs.

Provider lists are comma-separated names; they are used in strict mode
(``session.strict_providers=1``), so a requested provider that cannot be used is an
error rather than a silent fallback. ``--option`` sets a provider option:
``--option SimNPUExecutionProvider.precision=fp32``.

EXIT CODES:

    0    success
    1    a check failed: ``parity`` (an output differs beyond tolerance), ``providers`` and
         ``doctor`` (no execution provider is installed)
    2    usage or input error: bad arguments, a missing or invalid model file, an unknown
         or unusable provider name, a bad provider option, a bad ``--input``
    3    runtime error: any other onyxrt error while creating or running the session
    141  stdout was closed before everything was written (``onyxrt doctor | head -1``):
         the command stops quietly, as a Unix tool ended by SIGPIPE does (128 + 13)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ._version import __version__
from .discovery import CPU_PROVIDER, PLUGINS_ENV_VAR, catalog, install_command
from .dtypes import elem_type_from_string, np_dtype
from .errors import InvalidArgument, InvalidModel, OnyxError, ProviderUnavailable
from .placement_html import render_html
from .progress import Progress
from .session import InferenceSession, NodeArg
from .session_options import STRICT_PROVIDERS_KEY, SessionOptions

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_RUNTIME",
           "EXIT_BROKEN_PIPE"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3
#: 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away.
EXIT_BROKEN_PIPE = 141

class CliError(Exception):
    """An error the CLI reports as one message and an exit code (no traceback)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- helpers


def _out(text: str = "") -> None:
    print(text)


def _split_assignment(text: str, flag: str, example: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise CliError(f"{flag} {text!r}: expected {example}")
    return name.strip(), value.strip()


def _parse_providers(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise CliError(f"--providers {text!r}: expected a comma-separated list of provider names")
    return names


def _parse_options(items: Sequence[str]) -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    for item in items:
        key, value = _split_assignment(item, "--option", "Provider.key=value")
        provider, dot, opt = key.partition(".")
        if not dot or not provider or not opt:
            raise CliError(f"--option {item!r}: expected Provider.key=value")
        result.setdefault(provider, {})[opt] = value
    return result


def _parse_dims(items: Sequence[str]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in items:
        name, value = _split_assignment(item, "--dim", "name=value (a positive integer)")
        try:
            dims[name] = int(value)
        except ValueError:
            raise CliError(f"--dim {item!r}: the value must be an integer") from None
        if dims[name] < 1:
            raise CliError(f"--dim {item!r}: the value must be >= 1")
    return dims


def _check_model_path(model: str) -> None:
    if not os.path.exists(model):
        raise CliError(f"model file not found: {model}")
    if os.path.isdir(model):
        raise CliError(f"model path is a folder, not a file: {model}")


def _make_session(
    model: str,
    providers: list[str] | None,
    options: dict[str, dict[str, str]],
    dims: dict[str, int],
    profile_prefix: str | None = None,
) -> InferenceSession:
    """A strict-mode session; provider options go to the providers listed."""
    _check_model_path(model)
    listed = providers if providers is not None else ["CPUExecutionProvider"]
    unknown = sorted(set(options) - set(listed))
    if unknown:
        raise CliError(
            f"--option names provider(s) not in the provider list {listed}: {', '.join(unknown)}"
        )
    so = SessionOptions()
    so.add_session_config_entry(STRICT_PROVIDERS_KEY, "1")
    for name, value in dims.items():
        so.add_free_dimension_override_by_name(name, value)
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    entries = None if providers is None else [(p, dict(options.get(p, {}))) for p in providers]
    if entries is None and options:
        entries = [(p, dict(o)) for p, o in options.items()]
    return InferenceSession(model, so, providers=entries)


def _session_from_args(args: argparse.Namespace, providers_attr: str = "providers") -> InferenceSession:
    return _make_session(
        args.model,
        _parse_providers(getattr(args, providers_attr)),
        _parse_options(args.option),
        _parse_dims(args.dim),
    )


def _concrete_shape(arg: NodeArg, notes: list[str]) -> list[int]:
    """The input's shape with every symbolic or unknown dimension set to 1 (noted)."""
    shape: list[int] = []
    for i, d in enumerate(arg.shape or []):
        if isinstance(d, int) and d >= 0:
            shape.append(d)
            continue
        if isinstance(d, str):
            notes.append(f"input {arg.name!r}: dimension {d} is not fixed; using 1 "
                         f"(set it with --dim {d}=N)")
        else:
            notes.append(f"input {arg.name!r}: dimension {i} is unknown; using 1")
        shape.append(1)
    return shape


def _random_array(arg: NodeArg, rng: np.random.Generator, notes: list[str]) -> np.ndarray:
    try:
        dtype = np_dtype(elem_type_from_string(arg.type))
    except (KeyError, TypeError):
        raise CliError(
            f"input {arg.name!r} has type {arg.type}; random values of that type are not "
            f"supported, give it with --input {arg.name}=file.npy"
        ) from None
    shape = _concrete_shape(arg, notes)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        return rng.integers(0, 8, size=shape).astype(dtype)
    if dtype.kind == "f" or dtype.kind == "V":
        return rng.standard_normal(size=shape).astype(np.float32).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(size=shape) + 1j * rng.standard_normal(size=shape)).astype(dtype)
    raise CliError(
        f"input {arg.name!r} has type {arg.type}; give it with --input {arg.name}=file.npy"
    )


def _load_inputs(items: Sequence[str], session: InferenceSession) -> dict[str, np.ndarray]:
    names = [i.name for i in session.get_inputs()]
    feeds: dict[str, np.ndarray] = {}
    for item in items:
        name, path = _split_assignment(item, "--input", "name=file.npy")
        if name not in names:
            raise CliError(f"--input {item!r}: the model has no input {name!r} (inputs: {names})")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CliError(f"--input {item!r}: cannot read {path}: {exc}") from None
    return feeds


def _feeds(
    session: InferenceSession, given: dict[str, np.ndarray], seed: int, notes: list[str]
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = dict(given)
    for arg in session.get_inputs():
        if arg.name not in feeds:
            feeds[arg.name] = _random_array(arg, rng, notes)
    return feeds


def _stats(value: Any) -> dict[str, Any]:
    arr = np.asarray(value)
    info: dict[str, Any] = {"dtype": str(arr.dtype), "shape": list(arr.shape)}
    if arr.size and (arr.dtype.kind in "biuf"):
        data = arr.astype(np.float64)
        info.update(mean=float(data.mean()), min=float(data.min()), max=float(data.max()))
    return info


def _json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as the strings "nan", "inf", "-inf" (strict JSON)."""
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _json(data: dict[str, Any]) -> str:
    return json.dumps(_json_safe(data), indent=2, allow_nan=False)


def _emit(text: str, output: str | None) -> None:
    if output is None:
        _out(text)
        return
    try:
        Path(output).write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    except OSError as exc:
        raise CliError(f"--output {output}: {exc}") from None
    print(f"wrote {output}", file=sys.stderr)


# --------------------------------------------------------------------------- providers


def _provider_entries() -> list[dict[str, Any]]:
    cat = catalog()
    entries: list[dict[str, Any]] = []
    for name in cat.names():
        status = cat.status(name)
        entry: dict[str, Any] = {
            "name": name,
            "package": status.package,
            "version": status.package_version,
            "protocol_version": status.protocol_version,
            "priority": status.priority,
            "state": status.state,
            "usable": status.usable,
            "reason": status.reason,
            "fix": status.fix,
            "description": cat.specs[name].description,
            "device_types": list(status.device_types),
            "details": dict(status.details),
            "devices": [],
        }
        if status.usable:
            try:
                entry["devices"] = [
                    {"type": d.type, "vendor": d.vendor, "device_id": d.device_id,
                     "virtual": d.virtual, "memory_space": d.memory_space, "text": str(d)}
                    for d in cat.devices(name)
                ]
            except Exception as exc:  # reported, not fatal
                entry["device_error"] = f"{type(exc).__name__}: {exc}"
        entries.append(entry)
    return entries


def _plugin_failures() -> list[dict[str, str]]:
    cat = catalog()
    return [
        {"entry_point": f.entry_point, "package": f.package, "error": f.error,
         "traceback": f.traceback,
         # A timeout or a duplicate name says what to do; otherwise reinstalling is.
         "fix": f.fix or (f"pip install --force-reinstall {f.package}" if f.package else "")}
        for f in cat.failures
    ]


def _no_provider_message() -> str:
    """Why no provider is listed, and how to get one (``providers`` and ``doctor``)."""
    cat = catalog()
    fix = (f"install the CPU provider: {install_command(CPU_PROVIDER)} (or pip install onyxrt, "
           "which depends on it)")
    if not cat.excluded and not cat.failures:
        return f"no execution provider is installed, so no model can run; {fix}"
    why = []
    if cat.failures:
        why.append(f"{len(cat.failures)} plugin(s) failed to load")
        fix = f"repair the plugins that failed (`onyxrt doctor` shows how), or {fix}"
    if cat.excluded:
        why.append(f"{PLUGINS_ENV_VAR}={os.environ.get(PLUGINS_ENV_VAR, '')!r} excluded "
                   f"{len(cat.excluded)} installed plugin(s)")
        fix = f"change {PLUGINS_ENV_VAR} to include one, or {fix}"
    return (f"no execution provider is available, so no model can run ({' and '.join(why)}, "
            f"listed above); {fix}")


def cmd_providers(args: argparse.Namespace) -> int:
    """``onyxrt providers``: what is installed and whether it is usable."""
    entries = _provider_entries()
    failures = _plugin_failures()
    excluded = list(catalog().excluded)
    if args.format == "json":
        for f in failures:
            f.pop("traceback", None)
        _out(json.dumps({"providers": entries, "plugin_failures": failures,
                         "excluded": excluded}, indent=2))
        if not entries:
            raise CliError(_no_provider_message(), EXIT_FAILURE)
        return EXIT_OK
    for e in entries:
        _out(f"{e['name']}  ({e['package']} {e['version']}, protocol {e['protocol_version']})")
        if e["description"]:
            _out(f"  {e['description']}")
        _out(f"  state: {e['state']}")
        if not e["usable"]:
            _out(f"  reason: {e['reason']}")
            if e["fix"]:
                _out(f"  fix: {e['fix']}")
        for d in e["devices"]:
            _out(f"  device: {d['text']}" + ("  [virtual]" if d["virtual"] else ""))
        if "device_error" in e:
            _out(f"  device query failed: {e['device_error']}")
    for f in failures:
        _out(f"plugin failed to load: {f['entry_point']} ({f['package'] or 'unknown package'}): "
             f"{f['error']}")
    for x in excluded:
        _out(f"excluded: {x}")
    if not entries:
        raise CliError(_no_provider_message(), EXIT_FAILURE)
    return EXIT_OK


# --------------------------------------------------------------------------- doctor


def cmd_doctor(args: argparse.Namespace) -> int:
    """``onyxrt doctor``: each provider's probe in detail, and what to do."""
    import onnx

    _out(f"onyxrt {__version__}, python {platform.python_version()}, numpy {np.__version__}, "
         f"onnx {onnx.__version__}, {platform.system()} {platform.machine()}")
    _out("")
    entries = _provider_entries()
    for e in entries:
        mark = "OK " if e["usable"] else "!! "
        _out(f"{mark}{e['name']}  ({e['package']} {e['version']}, protocol "
             f"{e['protocol_version']}, priority {e['priority']})")
        if e["description"]:
            _out(f"    {e['description']}")
        _out(f"    state: {e['state']}")
        if not e["usable"]:
            _out(f"    reason: {e['reason']}")
            _out(f"    fix: {e['fix'] or '(the provider gives no fix)'}")
        if e["details"]:
            _out("    probe details:")
        for key, value in sorted(e["details"].items()):
            _out(f"      {key}: {value}")
        for d in e["devices"]:
            _out(f"    device: {d['text']}" + ("  [virtual]" if d["virtual"] else ""))
        if "device_error" in e:
            _out(f"    device query failed: {e['device_error']}")
    failures = _plugin_failures()
    if failures:
        _out("")
        _out("plugins that failed to load:")
    for f in failures:
        _out(f"!! {f['entry_point']} ({f['package'] or 'unknown package'}): {f['error']}")
        if f["fix"]:
            _out(f"    fix: {f['fix']}")
        for line in f["traceback"].strip().splitlines()[-3:]:
            _out(f"    | {line}")
    for x in catalog().excluded:
        _out(f"excluded: {x}")
    if not entries:
        _out(f"!! {_no_provider_message()}")
        return EXIT_FAILURE
    return EXIT_OK


# --------------------------------------------------------------------------- explain


def cmd_explain(args: argparse.Namespace) -> int:
    """``onyxrt explain``: the session's placement report, as it is."""
    session = _session_from_args(args)
    report = session.placement
    if args.format == "json":
        text = report.to_json()
    elif args.format == "html":
        # The picture needs the edges, which the report does not hold: they come from the
        # session's (optimized) graph, whose node names are the report's. InferenceSession
        # has no public accessor for it (yet), hence the private attribute.
        text = render_html(report, session._graph,
                           f"onyxrt placement: {os.path.basename(args.model)}")
    else:
        text = str(report)
    _emit(text, args.output)
    return EXIT_OK


# --------------------------------------------------------------------------- run


def _safe_file_name(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return cleaned.lstrip(".") or "output"


def cmd_run(args: argparse.Namespace) -> int:
    """``onyxrt run``: one run; prints a summary of every output (text or one JSON object)."""
    session = _session_from_args(args)
    notes: list[str] = []
    feeds = _feeds(session, _load_inputs(args.input, session), args.seed, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    names = [o.name for o in session.get_outputs()]
    t0 = time.perf_counter()
    outputs = session.run(None, feeds)
    elapsed_ms = (time.perf_counter() - t0) * 1e3
    saved: list[str] = []
    if args.save:
        folder = Path(args.save)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for name, value in zip(names, outputs):
                path = folder / f"{_safe_file_name(name)}.npy"
                np.save(path, np.asarray(value))
                saved.append(str(path))
        except OSError as exc:
            raise CliError(f"--save {args.save}: {exc}") from None
    summaries = [{"name": name, **_stats(value)} for name, value in zip(names, outputs)]
    if args.format == "json":
        _out(_json({
            "model": args.model,
            "providers_used": list(session.placement.providers_used),
            "outputs": summaries,
            "run_time_ms": elapsed_ms,
            "saved": saved,
        }))
        return EXIT_OK
    _out(f"providers used: {', '.join(session.placement.providers_used)}")
    for s in summaries:
        line = f"{s['name']}: {s['dtype']} {tuple(s['shape'])}"
        if "mean" in s:
            line += f" mean={s['mean']:.6g} min={s['min']:.6g} max={s['max']:.6g}"
        _out(line)
    _out(f"run time: {elapsed_ms:.3f} ms")
    for saved_path in saved:
        _out(f"saved {saved_path}")
    return EXIT_OK


# --------------------------------------------------------------------------- bench


def _op_times(trace_path: str) -> dict[str, float]:
    with open(trace_path, encoding="utf-8") as fh:
        events = json.load(fh)
    totals: dict[str, float] = {}
    for ev in events:
        if ev.get("cat") != "Node":
            continue
        op = ev.get("args", {}).get("op_name", "?")
        totals[op] = totals.get(op, 0.0) + float(ev.get("dur", 0.0))
    return totals


def cmd_bench(args: argparse.Namespace) -> int:
    """``onyxrt bench``: latency percentiles, throughput, and the slowest operators."""
    if args.runs < 1 or args.warmup < 0:
        raise CliError("--runs must be >= 1 and --warmup >= 0")
    providers = _parse_providers(args.providers)
    options = _parse_options(args.option)
    dims = _parse_dims(args.dim)
    session = _make_session(args.model, providers, options, dims)
    notes: list[str] = []
    feeds = _feeds(session, {}, args.seed, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    profile_runs = min(args.runs, 10)
    times = []
    # Progress on stderr (stdout is the result); advance() is outside the timed region.
    with Progress(args.warmup + args.runs + profile_runs + 1, "bench") as progress:
        for _ in range(args.warmup):
            session.run(None, feeds)
            progress.advance()
        for _ in range(args.runs):
            t0 = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - t0)
            progress.advance()
        # Operator times from a separate profiled session, so profiling does not skew
        # latency.
        with tempfile.TemporaryDirectory(prefix="onyxrt-bench-") as tmp:
            profiled = _make_session(args.model, providers, options, dims,
                                     profile_prefix=os.path.join(tmp, "bench"))
            for _ in range(profile_runs + 1):  # the first is a warm-up, counted too
                profiled.run(None, feeds)
                progress.advance()
            op_totals = _op_times(profiled.end_profiling())
    ms = np.asarray(times) * 1e3
    p50, p90, p99 = (float(np.percentile(ms, q)) for q in (50, 90, 99))
    throughput = args.runs / float(np.sum(times))
    total_us = sum(op_totals.values()) or 1.0
    top = sorted(op_totals.items(), key=lambda kv: -kv[1])[: args.top]
    ops = [
        {"op": op, "total_us": round(us, 3), "per_run_us": round(us / (profile_runs + 1), 3),
         "share": round(us / total_us, 4)}
        for op, us in top
    ]
    result = {
        "model": args.model,
        "providers_used": list(session.placement.providers_used),
        "runs": args.runs,
        "warmup": args.warmup,
        "latency_ms": {"p50": p50, "p90": p90, "p99": p99, "mean": float(ms.mean()),
                       "min": float(ms.min()), "max": float(ms.max())},
        "throughput_per_s": throughput,
        "top_ops": ops,
    }
    if args.format == "json":
        _out(json.dumps(result, indent=2))
        return EXIT_OK
    _out(f"model: {args.model}")
    _out(f"providers used: {', '.join(result['providers_used'])}")
    _out(f"runs: {args.runs} (warm-up {args.warmup})")
    _out(f"latency ms: p50 {p50:.3f}  p90 {p90:.3f}  p99 {p99:.3f}  "
         f"(min {ms.min():.3f}, max {ms.max():.3f})")
    _out(f"throughput: {throughput:.1f} runs/s")
    _out(f"top operators by time ({profile_runs + 1} profiled runs):")
    for o in ops:
        _out(f"  {o['op']:<24} {o['per_run_us']:>12.1f} us/run  {100 * o['share']:5.1f}%")
    return EXIT_OK


# --------------------------------------------------------------------------- parity


def _compare(a: Any, b: Any, rtol: float, atol: float) -> dict[str, Any]:
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        return {"ok": False, "problem": f"shape {x.shape} vs {y.shape}"}
    if x.dtype.kind not in "biufc" or y.dtype.kind not in "biufc":
        equal = bool(np.array_equal(x, y))
        return {"ok": equal, "problem": "" if equal else "values differ",
                "max_abs": None, "max_rel": None}
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    diff = np.abs(xf - yf)
    same_nan = np.isnan(xf) & np.isnan(yf)
    diff = np.where(same_nan, 0.0, diff)
    rel = diff / np.maximum(np.abs(yf), np.finfo(np.float64).tiny)
    rel = np.where(diff == 0, 0.0, rel)
    bad = ~(diff <= atol + rtol * np.abs(yf))
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float(rel.max()) if rel.size else 0.0
    return {"ok": not bool(bad.any()), "problem": "", "max_abs": max_abs, "max_rel": max_rel,
            "mismatched": int(bad.sum()), "size": int(diff.size)}


def cmd_parity(args: argparse.Namespace) -> int:
    """``onyxrt parity``: do two provider lists give the same outputs?"""
    options = _parse_options(args.option)
    dims = _parse_dims(args.dim)
    left_names = _parse_providers(args.providers) or []
    right_names = _parse_providers(args.vs) or []
    listed = set(left_names) | set(right_names)
    unknown = sorted(set(options) - listed)
    if unknown:
        raise CliError(f"--option names provider(s) in neither list: {', '.join(unknown)}")
    left = _make_session(args.model, left_names,
                         {p: o for p, o in options.items() if p in left_names}, dims)
    right = _make_session(args.model, right_names,
                          {p: o for p, o in options.items() if p in right_names}, dims)
    notes: list[str] = []
    feeds = _feeds(left, {}, args.seed, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    names = [o.name for o in left.get_outputs()]
    out_left = left.run(None, feeds)
    out_right = right.run(None, feeds)
    if left.placement.providers_used == right.placement.providers_used:
        print("note: both sides ran on the same providers; `onyxrt explain` shows why a "
              "provider declined nodes (e.g. a symbolic dimension: fix it with --dim)",
              file=sys.stderr)
    results = [{"name": name, **_compare(a, b, args.rtol, args.atol)}
               for name, a, b in zip(names, out_left, out_right)]
    failed = sum(not r["ok"] for r in results)
    if args.format == "json":
        _out(_json({
            "model": args.model,
            "a": {"providers": left_names, "providers_used": list(left.placement.providers_used)},
            "b": {"providers": right_names,
                  "providers_used": list(right.placement.providers_used)},
            "rtol": args.rtol,
            "atol": args.atol,
            "outputs": results,
            "failed": failed,
            "ok": not failed,
        }))
        return EXIT_FAILURE if failed else EXIT_OK
    _out(f"A: {', '.join(left.placement.providers_used)}")
    _out(f"B: {', '.join(right.placement.providers_used)}")
    _out(f"tolerance: |A - B| <= atol + rtol * |B| with rtol={args.rtol:g} atol={args.atol:g}")
    for r in results:
        verdict = "ok" if r["ok"] else "FAIL"
        if r.get("max_abs") is None:
            _out(f"{r['name']}: {verdict} {r['problem']}")
            continue
        detail = f" ({r['mismatched']} of {r['size']} elements outside tolerance)" if not r["ok"] else ""
        _out(f"{r['name']}: max abs diff {r['max_abs']:.3e}, max rel diff {r['max_rel']:.3e}: "
             f"{verdict}{detail}")
    if failed:
        _out(f"parity FAILED: {failed} of {len(names)} output(s) outside tolerance")
        return EXIT_FAILURE
    _out(f"parity ok: {len(names)} output(s) within tolerance")
    return EXIT_OK


# --------------------------------------------------------------------------- parser


def _add_session_args(p: argparse.ArgumentParser, providers: bool = True) -> None:
    p.add_argument("model", help="path to an .onnx file")
    if providers:
        p.add_argument("--providers", help="comma-separated provider names, highest priority "
                       "first (default: CPUExecutionProvider); strict: unusable ones are errors")
    p.add_argument("--option", action="append", default=[], metavar="PROVIDER.KEY=VALUE",
                   help="a provider option, e.g. SimNPUExecutionProvider.precision=fp32")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                   help="fix a symbolic dimension, e.g. batch=1")


class _Parser(argparse.ArgumentParser):
    """Exits with EXIT_USAGE on bad arguments (argparse's own code is also 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def _print_message(self, message: str, file: Any = None) -> None:
        # Recent argparse ignores a failed write of --help or --version; a closed stdout
        # must end them as it ends every command (main), whatever the buffering.
        stream = file if file is not None else sys.stderr
        if message and stream is not None:
            stream.write(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``onyxrt``."""
    parser = _Parser(prog="onyxrt", description="onyxrt: inspect providers, explain placement, "
                     "run, benchmark and compare ONNX models.",
                     epilog="exit codes: 0 ok, 1 a check failed (parity; no provider "
                     "installed), 2 usage or input error, 3 runtime error, 141 stdout closed "
                     "early (e.g. by head); see docs/cli.md")
    parser.add_argument("--version", action="version", version=f"onyxrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("providers", help="installed providers, their state and devices")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_providers)

    p = sub.add_parser("doctor", help="every provider's probe in detail, with fixes (exit 1 "
                       "when no provider is installed)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("explain", help="where each node of a model runs (placement report)")
    _add_session_args(p)
    p.add_argument("--format", choices=("text", "json", "html"), default="text")
    p.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("run", help="run a model once on given or random inputs")
    _add_session_args(p)
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    p.add_argument("--save", metavar="DIR", help="save every output as DIR/<name>.npy")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="json: one object on stdout (outputs' summaries, run time, saved files)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="latency percentiles, throughput and top operators")
    _add_session_args(p)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=10, help="how many operators to list")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("parity", help="compare outputs of two provider lists")
    _add_session_args(p, providers=False)
    p.add_argument("--providers", required=True, help="provider list A, e.g. SimNPU...,CPU...")
    p.add_argument("--vs", required=True, help="provider list B, e.g. CPUExecutionProvider")
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="json: one object on stdout (per output max abs/rel diff and ok); "
                   "the exit code is the same")
    p.set_defaults(func=cmd_parity)

    p = sub.add_parser("shim", help="run a command with `import onnxruntime` resolved to onyxrt",
                       description="Run COMMAND (any program; its Python processes and their "
                       "children) with `import onnxruntime` resolved to onyxrt: "
                       "onyxrt shim -- python app.py. With --pythonpath, print the folder to put "
                       "first on PYTHONPATH instead.")
    p.add_argument("--pythonpath", action="store_true",
                   help="print the folder that, first on PYTHONPATH, installs the shim")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    p.set_defaults(func=cmd_shim)
    return parser


def cmd_shim(args: argparse.Namespace) -> int:
    """``onyxrt shim -- COMMAND``: run COMMAND under the compatibility shim; its exit code."""
    import subprocess

    from .compat import shim_environment, shim_pythonpath

    if args.pythonpath:
        print(shim_pythonpath())
        return EXIT_OK
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("give a command to run: onyxrt shim -- python app.py", EXIT_USAGE)
    try:
        return subprocess.call(command, env=shim_environment())
    except FileNotFoundError:
        raise CliError(f"command not found: {command[0]!r}", EXIT_USAGE) from None


def _error(message: str, code: int) -> int:
    print(f"onyxrt: error: {message}", file=sys.stderr)
    return code


def _detach_stdout() -> None:
    """Point stdout's file descriptor at the null device, so that flushing what is still
    buffered at exit does not fail again (the recipe of Python's ``signal`` docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real descriptor (tests' capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onyxrt`` script; returns the exit code.

    A reader that stops early (``onyxrt doctor | head -1``) ends every command quietly with
    :data:`EXIT_BROKEN_PIPE`: no traceback, no message.
    """
    try:
        try:
            return _main(argv)
        finally:
            # Write what is buffered now, where a closed pipe can be caught, not at
            # interpreter exit (which would print "Exception ignored ... BrokenPipeError").
            # Also after argparse's SystemExit (--help, --version).
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        _detach_stdout()
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CliError as exc:
        return _error(str(exc), exc.code)
    except (InvalidModel, InvalidArgument, ProviderUnavailable) as exc:
        # A bad model file, a bad option or input, a requested provider that cannot be used.
        return _error(f"{type(exc).__name__}: {exc}", EXIT_USAGE)
    except OnyxError as exc:
        return _error(f"{type(exc).__name__}: {exc}", EXIT_RUNTIME)
    except KeyboardInterrupt:
        return _error("interrupted", 130)
    except BrokenPipeError:
        raise  # the reader of stdout went away: main() ends quietly
    except Exception as exc:
        if os.environ.get("ONYXRT_CLI_TRACEBACK"):
            raise
        return _error(f"unexpected {type(exc).__name__}: {exc} "
                      "(set ONYXRT_CLI_TRACEBACK=1 to see the traceback)", EXIT_RUNTIME)


if __name__ == "__main__":
    sys.exit(main())
