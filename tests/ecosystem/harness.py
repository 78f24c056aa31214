"""What every driver shares: run a library's cases in this process, time them, note which
runtime the library's sessions came from, and write the results that ``report.py`` compares.

A driver is a script ``drive_<library>.py`` that uses the library's public API only::

    driver = Driver("magika", distribution="magika")

    @driver.case("standard_v3_3", models=["magika/models/standard_v3_3/model.onnx"],
                 compared="labels exact; scores within 1e-4 (probabilities)")
    def identify() -> Prepared:
        m = magika.Magika()              # setup: the library creates its sessions here
        data = synthetic.sample_files()
        return Prepared(inputs=digest(*data.values()),
                        call=lambda: {"labels": Exact([...]), "scores": Close([...], atol=1e-4)})

    if __name__ == "__main__":
        driver.main()

The session runs each driver twice, in separate processes: ``python drive_magika.py --output
DIR`` (the real onnxruntime) and ``python -m onyxrt.compat drive_magika.py --output DIR``
(the same code, ``import onnxruntime`` resolved to onyxrt). Each run writes
``DIR/<library>.<runtime>.json`` and, for arrays, ``DIR/<library>.<runtime>.npz``.

A case that raises is recorded with its traceback (and printed to stderr) and the driver
goes on with the next case: one model that fails on onyxrt does not hide the others.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: The two runtimes a driver runs under, as they name the result files.
REFERENCE, ONYXRT = "onnxruntime", "onyxrt"


@dataclass(frozen=True)
class Exact:
    """An output compared for equality: labels, strings, integer boxes the library rounds."""

    value: Any


@dataclass(frozen=True)
class Close:
    """A numeric output compared elementwise: ``|onyxrt - onnxruntime| <= atol + rtol *
    |onnxruntime|`` (numpy.isclose). Each driver says why its tolerance is what it is."""

    value: Any
    rtol: float = 0.0
    atol: float = 0.0


Outputs = dict[str, Exact | Close]


@dataclass(frozen=True)
class Prepared:
    """What a case's setup hands back: the digest of the inputs it made (both runs must
    see the same bytes) and one call of the library's API, returning its outputs."""

    inputs: str
    call: Callable[[], Outputs]


@dataclass(frozen=True)
class Case:
    """One model (or one pipeline of models) of a library, exercised through its API."""

    name: str
    models: tuple[str, ...]
    compared: str
    setup: Callable[[], Prepared]
    repeats: int | None = None


@dataclass
class Driver:
    """The cases of one library and the command line that runs them."""

    library: str
    distribution: str
    cases: list[Case] = field(default_factory=list)

    def case(self, name: str, *, models: list[str], compared: str,
             repeats: int | None = None) -> Callable[[Callable[[], Prepared]], Callable[[], Prepared]]:
        """Register ``setup`` as the case ``name`` (a decorator). ``models`` are the model
        files the case runs, as paths inside the library's package; ``repeats`` overrides the
        number of timed calls for slow cases."""

        def register(setup: Callable[[], Prepared]) -> Callable[[], Prepared]:
            if any(c.name == name for c in self.cases):
                raise ValueError(f"{self.library}: two cases named {name!r}")
            self.cases.append(Case(name, tuple(models), compared, setup, repeats))
            return setup

        return register

    def main(self, argv: list[str] | None = None) -> int:
        """Run every case (or those named with ``--case``) and write the results."""
        parser = argparse.ArgumentParser(description=f"ecosystem driver for {self.library}")
        parser.add_argument("--output", required=True, type=Path, help="folder for the result files")
        parser.add_argument("--repeats", type=int, default=5,
                            help="timed calls per case after the first (the median is reported)")
        parser.add_argument("--case", action="append", help="run only this case (repeatable)")
        args = parser.parse_args(argv)

        import onnxruntime  # under the shim: onyxrt

        shim = bool(getattr(onnxruntime, "__onyxrt_shim__", False))
        runtime = ONYXRT if shim else REFERENCE
        record: dict[str, Any] = {
            "library": self.library,
            "distribution": self.distribution,
            "version": importlib.metadata.version(self.distribution),
            "runtime": runtime,
            "shim": shim,
            "onnxruntime_version": onnxruntime.__version__,
            "onyxrt_version": getattr(onnxruntime, "onyxrt_version", None),
            "python": sys.version.split()[0],
            "cases": {},
        }
        arrays: dict[str, np.ndarray] = {}
        selected = [c for c in self.cases if not args.case or c.name in args.case]
        for case in selected:
            print(f"[{self.library} on {runtime}] {case.name}", flush=True)
            record["cases"][case.name] = _run_case(case, args.repeats, arrays)
        args.output.mkdir(parents=True, exist_ok=True)
        stem = args.output / f"{self.library}.{runtime}"
        np.savez_compressed(f"{stem}.npz", **arrays)
        Path(f"{stem}.json").write_text(json.dumps(record, indent=1))
        failed = [n for n, c in record["cases"].items() if c["status"] != "ok"]
        print(f"[{self.library} on {runtime}] {len(selected) - len(failed)} of {len(selected)} cases ran"
              + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
        return 0


def _run_case(case: Case, repeats: int, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    result: dict[str, Any] = {"models": list(case.models), "compared": case.compared}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_calls(case, repeats, arrays, result)
    # What the runtime (or the library) warned about: the report shows those onyxrt gives and
    # onnxruntime does not, without failing on them.
    result["warnings"] = sorted({f"{w.category.__name__}: {(str(w.message).splitlines() or [''])[0][:200]}"
                                 for w in caught})
    return result


def _run_calls(case: Case, repeats: int, arrays: dict[str, np.ndarray], result: dict[str, Any]) -> None:
    try:
        start = time.perf_counter()
        prepared = case.setup()
        result["setup_ms"] = 1000 * (time.perf_counter() - start)
        result["inputs"] = prepared.inputs
        # The first call is the one compared; it pays for any lazy initialisation, so it is
        # not timed. The last timed call's outputs are kept to tell whether repeated calls
        # agree bit for bit (a runtime that does not is racing or reading stale memory).
        outputs = last = prepared.call()
        times = []
        for _ in range(case.repeats or repeats):
            start = time.perf_counter()
            last = prepared.call()
            times.append(1000 * (time.perf_counter() - start))
        result["call_ms"] = statistics.median(times) if times else None
        result["calls"] = len(times)
        result["repeatable"] = _same(outputs, last)
        result["outputs"] = {name: _encode(f"a{len(arrays)}", value, arrays) for name, value in outputs.items()}
        result["sessions"] = live_sessions()
        result["status"] = "ok"
    except Exception as error:  # noqa: BLE001 - every failure is data for the report
        text = "".join(traceback.format_exception(error))
        print(text, file=sys.stderr, flush=True)
        result.update(status="error", error=_summary(error), traceback=text, sessions=live_sessions())


def live_sessions() -> list[str]:
    """The classes of the ``InferenceSession`` objects alive in this process (the driver
    makes none itself: these are the library's), as ``module.QualName``."""
    found = {f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects()
             if type(o).__name__ == "InferenceSession"}
    return sorted(found)


def _summary(error: BaseException) -> str:
    """The innermost cause's type and first line: libraries wrap runtime errors in their own."""
    root, seen = error, set()
    while id(root) not in seen:
        seen.add(id(root))
        nxt = root.__cause__ or (None if root.__suppress_context__ else root.__context__)
        if nxt is None:
            break
        root = nxt
    line = (str(root).strip().splitlines() or [""])[0]
    return f"{type(root).__name__}: {line}"[:400]


def _same(first: Outputs, again: Outputs) -> bool:
    if first.keys() != again.keys():
        return False
    for name, value in first.items():
        other = again[name]
        if isinstance(value, Close):
            a, b = np.asarray(value.value, np.float64), np.asarray(other.value, np.float64)
            if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
                return False
        elif plain(value.value) != plain(other.value):
            return False
    return True


def _encode(key: str, value: Exact | Close, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    if isinstance(value, Exact):
        return {"kind": "exact", "value": plain(value.value)}
    if isinstance(value, Close):
        array = np.asarray(value.value, dtype=np.float64)
        arrays[key] = array
        return {"kind": "close", "array": key, "rtol": value.rtol, "atol": value.atol,
                "shape": list(array.shape)}
    raise TypeError(f"an output must be Exact or Close, got {type(value).__name__}")


def plain(value: Any) -> Any:
    """``value`` as JSON data: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value
