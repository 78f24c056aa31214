"""Batch inference on Ray Data with one onyxrt session per worker.

:class:`OnyxPredictor` is a callable class for ``Dataset.map_batches``: Ray builds one per
actor, its ``__init__`` creates one :class:`onyxrt.InferenceSession`, and each call scores
one batch of rows (``batch_format="numpy"``) and returns the model outputs as new columns.
:func:`run_inference` wraps the whole job: it runs ``map_batches`` on an actor pool,
checks that every input row came back, turns a failed batch into an error that names it
(and the rows in it that fail when run alone), and gathers what each worker did
(providers, placement, runs, time)::

    import ray
    from onyxrt.integrations.ray import run_inference

    ds = ray.data.read_parquet("s3://bucket/images/")
    result = run_inference(ds, "model.onnx", input_columns={"input": "image"},
                           id_column="id", workers=4, batch_size=256)
    print(result)                                # rows, seconds, rows/s, one line per worker
    result.dataset.write_parquet("s3://bucket/scores/")

Or use the predictor with ``map_batches`` directly::

    from ray.data import ActorPoolStrategy
    from onyxrt.integrations.ray import OnyxPredictor

    scored = ds.map_batches(
        OnyxPredictor,
        fn_constructor_kwargs={"model": "model.onnx", "input_columns": {"input": "image"}},
        compute=ActorPoolStrategy(size=4), batch_size=256, batch_format="numpy")

Ray is imported only when it is needed (``pip install onyxrt[ray]``); the predictor itself
is plain Python and can be called on a dict of arrays without Ray.

**Columns.** ``input_columns`` maps model inputs to columns (default: the column of the
input's name). A column's dtype must be the input's declared type (no silent casts:
:class:`ColumnTypeError` names the column and both types). A column that holds each row
flattened (an ``(n, k)`` array, or the per-row 1-D arrays Ray Data makes of a Parquet list
column) is reshaped to the model's per-row shape when ``k`` is its element count.
Outputs become columns named by ``output_columns`` (default: the output names). Columns
not fed to the model pass through (ids, labels, paths); the input tensors are dropped
unless ``passthrough_columns`` names them.

**Batch dimension.** A model whose inputs have a symbolic first dimension scores each
batch in one run. A model exported with a fixed batch ``B`` is run on chunks of ``B``
rows; the last chunk is padded by repeating its last row and the padded rows are dropped
from the outputs.

**Providers.** A worker that Ray gave a GPU (``ray.get_gpu_ids()`` non-empty, i.e.
``num_gpus`` was requested) puts ``"CUDAExecutionProvider"`` first; any other worker uses
the requested list as given. The session's fallback policy applies unchanged: a provider
that cannot be used is a ``ProviderFallbackWarning`` (in the worker's log), or an error in
strict mode (config entry ``session.strict_providers = "1"``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import elem_type_from_string, np_dtype
from ..errors import InvalidArgument, InvalidInput, OnyxError, RunTerminated
from ..records import record
from ..session import InferenceSession
from ..session_options import SessionOptions

if TYPE_CHECKING:  # pragma: no cover - typing only
    import onnx
    from ray.data import Dataset
    from ray.data.dataset import MaterializedDataset

__all__ = [
    "BatchInferenceError",
    "ColumnError",
    "ColumnShapeError",
    "ColumnTypeError",
    "InferenceResult",
    "OnyxPredictor",
    "RowCountMismatch",
    "WorkerStats",
    "providers_for_worker",
    "read_worker_stats",
    "run_inference",
]

CUDA = "CUDAExecutionProvider"
_STATS_PREFIX = "onyxrt-worker-"
# The search for the rows of a failed batch that fail on their own: at most this many rows
# named, this many runs, and (see _failing_rows) a time limit, so that a failure costs a
# few batches' worth of work, not a re-run of the batch row by row.
_SEARCH_ROWS = 10
_SEARCH_RUNS = 40


# --------------------------------------------------------------------------- errors
# Ray Data hands the driver a UserCodeException that keeps only the text of a worker's
# traceback, so these errors are single-line and take just a message: run_inference finds
# them in that text and raises them again at the driver.


class ColumnError(InvalidInput):
    """A batch column cannot feed its model input (missing, wrong type or shape)."""


class ColumnTypeError(ColumnError):
    """A column's dtype is not the model input's declared element type."""


class ColumnShapeError(ColumnError):
    """A column's rows do not have the model input's per-row shape (nor its element count)."""


class BatchInferenceError(OnyxError, RuntimeError):
    """Scoring one batch failed on a worker; the message names the batch (its ids when the
    dataset has an id column), the worker, the rows that fail when run alone (when a short
    search finds them) and the original error, e.g.::

        batch 4 of worker node1:8123 (100 rows; id 500..549, 1200..1249) failed at row
        id=1234 (it fails when run alone): KernelError: node 'GatherElements_0' ...
    """


class RowCountMismatch(OnyxError, RuntimeError):
    """The job finished with fewer (or more) rows than it was given: rows were dropped."""


_RAISED_AGAIN: dict[str, type[OnyxError]] = {
    cls.__name__: cls for cls in (ColumnTypeError, ColumnShapeError, ColumnError, BatchInferenceError)
}
_ERROR_LINE = re.compile(
    r"^(?:[\w.]+\.)?(" + "|".join(_RAISED_AGAIN) + r"): (.+)$", re.MULTILINE
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _runs(values: Sequence[Any]) -> list[tuple[Any, Any]]:
    """The distinct values, sorted, as ``(first, last)`` runs of consecutive integers."""
    distinct = list(dict.fromkeys(values))
    try:
        distinct.sort()
    except TypeError:  # values that do not compare (mixed types): keep their order
        pass
    runs: list[list[Any]] = []
    for v in distinct:
        last = runs[-1][1] if runs else None
        if isinstance(v, int) and isinstance(last, int) and v == last + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return [(a, b) for a, b in runs]


def _compact_ids(values: Sequence[Any], limit: int = 10) -> str:
    """Row ids as text, whatever order Ray hands them in: ``"1200..1299"``,
    ``"500..549, 1200..1249"``; past ``limit`` runs, ``"3..1999 in 57 separate runs"``."""
    runs = _runs(values)
    if len(runs) <= limit:
        return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)
    kind = "runs" if any(a != b for a, b in runs) else "values"
    return f"{runs[0][0]}..{runs[-1][1]} in {len(runs)} separate {kind}"


# --------------------------------------------------------------------------- worker stats


@record(frozen=True)
class WorkerStats:
    """What one worker (one actor, one session) did during a job.

    ``worker`` is ``"hostname:pid"``; ``providers`` is ``session.get_providers()`` and
    ``placement`` the placement report's summary lines; ``run_ms`` sums the time spent in
    ``session.run`` and ``init_ms`` is the session's creation time. ``profile`` is the
    profile summary when ``session_options`` turned profiling on.
    """

    worker: str
    hostname: str
    pid: int
    gpu_ids: list[Any]
    providers_requested: list[str]
    providers: list[str]
    placement: list[str]
    fallbacks: list[str]
    init_ms: float
    batches: int = 0
    rows: int = 0
    runs: int = 0
    run_ms: float = 0.0
    profile: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary_line(self) -> str:
        per_row = self.run_ms / self.rows if self.rows else 0.0
        return (
            f"{self.worker}: {self.rows} rows in {self.batches} batches, {self.runs} runs, "
            f"{self.run_ms:.0f} ms in run ({per_row:.3f} ms/row), "
            f"providers {', '.join(self.providers)}"
            + (f", GPUs {self.gpu_ids}" if self.gpu_ids else "")
        )


def read_worker_stats(stats_dir: str | os.PathLike[str]) -> list[WorkerStats]:
    """The stats every worker wrote to ``stats_dir`` (one file per worker), by worker name."""
    stats = []
    for path in sorted(Path(stats_dir).glob(f"{_STATS_PREFIX}*.json")):
        stats.append(WorkerStats(**json.loads(path.read_text())))
    return sorted(stats, key=lambda s: s.worker)


# --------------------------------------------------------------------------- predictor


def _assigned_gpu_ids() -> list[Any]:
    """The GPUs Ray assigned to this worker ([] outside Ray or without GPUs).

    Only asks a Ray that is already imported and connected: ``ray.get_gpu_ids()`` would
    otherwise start a local cluster just to answer.
    """
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return []
    return list(ray.get_gpu_ids())


def _provider_entries(
    providers: Sequence[Any] | None, provider_options: Sequence[Mapping[str, Any]] | None
) -> list[tuple[str, dict[str, Any]]]:
    names = list(providers) if providers else ["CPUExecutionProvider"]
    if provider_options is not None and len(provider_options) != len(names):
        raise InvalidArgument(
            f"provider_options has {len(provider_options)} entries for {len(names)} providers; "
            "give one dict per provider"
        )
    entries = []
    for i, p in enumerate(names):
        name, opts = (p[0], dict(p[1])) if isinstance(p, (tuple, list)) else (str(p), {})
        if provider_options is not None:
            opts.update(provider_options[i])
        entries.append((name, opts))
    return entries


def providers_for_worker(
    providers: Sequence[Any] | None,
    provider_options: Sequence[Mapping[str, Any]] | None = None,
    gpu_ids: Sequence[Any] = (),
) -> list[tuple[str, dict[str, Any]]]:
    """The provider list a worker creates its session with: the requested one, with
    ``CUDAExecutionProvider`` moved (or added) first when Ray gave the worker a GPU."""
    entries = _provider_entries(providers, provider_options)
    if not gpu_ids:
        return entries
    cuda = [e for e in entries if e[0] == CUDA] or [(CUDA, {})]
    return cuda[:1] + [e for e in entries if e[0] != CUDA]


def _session_options(
    session_options: SessionOptions | Mapping[str, Any] | None,
    config_entries: Mapping[str, str] | None,
) -> SessionOptions:
    if isinstance(session_options, SessionOptions):
        so = session_options
    else:
        so = SessionOptions()
        for key, value in (session_options or {}).items():
            setattr(so, key, value)  # SessionOptions rejects unknown names with a hint
    for key, value in (config_entries or {}).items():
        so.add_session_config_entry(key, str(value))
    return so


def _names_map(spec: Mapping[str, str] | Sequence[str] | None, names: list[str], what: str) -> dict[str, str]:
    """``{model name: column}`` from a mapping, a list of names (same column names) or None."""
    if spec is None:
        return {n: n for n in names}
    mapping = dict(spec) if isinstance(spec, Mapping) else {n: n for n in spec}
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise InvalidArgument(f"{what} names {unknown}, which the model does not have; its {what[:-8]}s are {names}")
    return mapping


@record
class _InputSpec:
    name: str
    column: str
    dtype: np.dtype[Any] | None
    type: str
    row_shape: tuple[int | str | None, ...] | None  # the declared shape after the batch dim


class OnyxPredictor:
    """Scores Ray Data batches with one onyxrt session per worker (see the module docs).

    Arguments:
        model: a path (readable on every node), the model's bytes, or an ``onnx.ModelProto``.
        providers, provider_options: as for ``InferenceSession``; default CPU.
        session_options: a ``SessionOptions`` or a dict of its attributes, e.g.
            ``{"intra_op_num_threads": 1}``.
        config_entries: session config entries, e.g. ``{"session.strict_providers": "1"}``.
        input_columns: ``{model input: column}``; default the input names.
        output_columns: ``{model output: column}`` or a list of outputs; default all outputs
            under their own names.
        passthrough_columns: columns copied to the result; default every column that is
            not fed to the model.
        id_column: a column that identifies rows; failed batches and their failing rows
            are named by its values (otherwise by position in the batch).
        worker_column: if set, a column of that name holding ``"hostname:pid"`` per row.
        stats_dir: a folder (shared by every node) where each worker keeps its
            :class:`WorkerStats` up to date; read it with :func:`read_worker_stats`.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes | onnx.ModelProto,
        *,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        session_options: SessionOptions | Mapping[str, Any] | None = None,
        config_entries: Mapping[str, str] | None = None,
        input_columns: Mapping[str, str] | None = None,
        output_columns: Mapping[str, str] | Sequence[str] | None = None,
        passthrough_columns: Sequence[str] | None = None,
        id_column: str | None = None,
        worker_column: str | None = None,
        stats_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.gpu_ids = _assigned_gpu_ids()
        self.providers_requested = providers_for_worker(providers, provider_options, self.gpu_ids)
        if isinstance(model, os.PathLike):
            model = os.fspath(model)
        t0 = time.perf_counter()
        self.session = InferenceSession(
            model,
            _session_options(session_options, config_entries),
            providers=self.providers_requested,
        )
        init_ms = (time.perf_counter() - t0) * 1e3

        inputs = {a.name: a for a in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        columns = _names_map(input_columns, list(inputs), "input_columns")
        missing = [n for n in inputs if n not in columns]
        if missing:
            raise InvalidArgument(f"input_columns gives no column for model input(s) {missing}")
        self._inputs = [self._input_spec(inputs[name], columns[name]) for name in inputs]
        self._outputs = _names_map(output_columns, outputs, "output_columns")
        self._passthrough = None if passthrough_columns is None else list(passthrough_columns)
        self._id_column = id_column
        self._worker_column = worker_column
        self.fixed_batch = self._fixed_batch()

        hostname = socket.gethostname()
        self._stats_path = (
            Path(stats_dir) / f"{_STATS_PREFIX}{hostname}-{os.getpid()}.json" if stats_dir else None
        )
        profiling = bool(self.session.get_session_options().enable_profiling)
        self._profiling = profiling
        placement = self.session.placement
        self.stats = WorkerStats(
            worker=f"{hostname}:{os.getpid()}",
            hostname=hostname,
            pid=os.getpid(),
            gpu_ids=list(self.gpu_ids),
            providers_requested=[name for name, _ in self.providers_requested],
            providers=self.session.get_providers(),
            placement=placement.summary_lines(),
            fallbacks=[f"{f.provider}: {f.reason}" for f in placement.fallbacks],
            init_ms=init_ms,
        )
        self._write_stats()

    # -- set-up -------------------------------------------------------------------------
    @staticmethod
    def _input_spec(arg: Any, column: str) -> _InputSpec:
        dtype = None
        if arg.type.startswith("tensor("):
            try:
                dtype = np_dtype(elem_type_from_string(arg.type))
            except (KeyError, TypeError):
                dtype = None
        row_shape = tuple(arg.shape[1:]) if arg.shape else None
        return _InputSpec(arg.name, column, dtype, arg.type, row_shape)

    def _fixed_batch(self) -> int | None:
        """The batch size the model fixes (its inputs' first dim), or None if symbolic."""
        fixed = {}
        for arg in self.session.get_inputs():
            if not arg.shape:
                raise InvalidArgument(
                    f"model input {arg.name!r} has no batch dimension (shape {arg.shape}); "
                    "OnyxPredictor feeds each input a batch of rows along dimension 0"
                )
            if isinstance(arg.shape[0], int):
                fixed[arg.name] = arg.shape[0]
        if len(set(fixed.values())) > 1:
            raise InvalidArgument(f"the model's inputs fix different batch sizes: {fixed}")
        return next(iter(fixed.values()), None)

    # -- scoring --------------------------------------------------------------------------
    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Score one batch: model outputs as new columns, plus the passthrough columns."""
        index = self.stats.batches
        rows = len(next(iter(batch.values()))) if batch else 0
        try:
            feeds = {spec.name: self._column(batch, spec, rows, index) for spec in self._inputs}
        except ColumnError:
            raise
        except Exception as exc:  # any failure: name the batch, keep the original as cause
            raise self._batch_error(batch, rows, index, exc) from exc
        t0 = time.perf_counter()
        try:
            results = self._run(feeds, rows)
        except Exception as exc:
            culprits = self._failing_rows(batch, feeds, rows, exc, time.perf_counter() - t0)
            raise self._batch_error(batch, rows, index, exc, culprits) from exc
        keep = self._passthrough
        if keep is None:
            fed = {spec.column for spec in self._inputs}
            keep = [c for c in batch if c not in fed]
        out = {c: batch[c] for c in keep}
        for name, column in self._outputs.items():
            out[column] = results[name]
        if self._worker_column:
            out[self._worker_column] = np.full(rows, self.stats.worker, dtype=object)
        self._count(batches=1, rows=rows)
        return out

    def _batch_error(
        self, batch: Mapping[str, np.ndarray], rows: int, index: int, exc: Exception, culprits: str = ""
    ) -> BatchInferenceError:
        return BatchInferenceError(
            f"{self._describe(batch, rows, index)} failed{culprits}: "
            f"{type(exc).__name__}: {_one_line(str(exc))}"
        )

    def _failing_rows(
        self, batch: Mapping[str, np.ndarray], feeds: dict[str, np.ndarray], rows: int, error: Exception,
        seconds: float,
    ) -> str:
        """Which rows of a failed batch fail on their own, as text for the error ("" when
        the error is not about row values).

        Bisects: each half of a failing slice is run alone and the halves that fail with the
        same kind of error are split again, first half first, down to single rows. One bad
        row in ``n`` costs about ``2 log2 n`` runs over ``2n`` rows. The search stops after
        :data:`_SEARCH_ROWS` rows, :data:`_SEARCH_RUNS` runs or ten times the failed run's
        time (at least 2 s), and says so. A batch that fails while neither half does (a
        failure that needs rows together, or a batch too large) is reported as such.
        """
        # Argument errors (a feed's shape or type, an output check) are the same for every
        # row, and a terminated run was stopped on purpose: nothing to search for.
        if rows < 2 or isinstance(error, (InvalidArgument, RunTerminated)):
            return ""
        deadline = time.perf_counter() + max(2.0, 10 * seconds)
        found: list[int] = []
        smallest = (0, rows)  # the smallest failing slice neither half of which fails
        pending = [(0, rows)]  # slices known to fail, the next one last
        runs, stopped = 0, False
        while pending and len(found) < _SEARCH_ROWS:
            lo, hi = pending.pop()
            if hi - lo == 1:
                found.append(lo)  # it failed as a half of its own
                continue
            if runs >= _SEARCH_RUNS or time.perf_counter() > deadline:
                stopped = True
                break
            mid = (lo + hi) // 2
            halves = ((lo, mid), (mid, hi))
            failing = [(a, b) for a, b in halves if self._fails_alone(feeds, a, b, type(error))]
            runs += 2
            if not failing and hi - lo < smallest[1] - smallest[0]:
                smallest = (lo, hi)
            pending += reversed(failing)
        more = f"; the search stopped after {runs} runs" if stopped else ""
        if found:
            if pending and not stopped:
                more = f"; the search stopped after {len(found)} rows"
            each = "it fails" if len(found) == 1 else "each fails"
            return f" at {self._rows_named(batch, found)} ({each} when run alone{more})"
        if stopped:
            return f" (no single failing row found{more})"
        if smallest == (0, rows):
            return " (neither half of it fails when run alone)"
        part = self._rows_named(batch, range(*smallest))
        return f" (no single row fails when run alone; the smallest failing part found: {part})"

    def _fails_alone(self, feeds: dict[str, np.ndarray], lo: int, hi: int, kind: type[Exception]) -> bool:
        try:
            self._run({name: value[lo:hi] for name, value in feeds.items()}, hi - lo)
        except kind:
            return True
        except Exception:  # another error is not the failure being searched for
            return False
        return False

    def _rows_named(self, batch: Mapping[str, np.ndarray], positions: Sequence[int]) -> str:
        """``row id=1234``, ``rows id=3, 17..19``, or positions when there is no id column."""
        rows = "row" if len(positions) == 1 else "rows"
        key = self._id_column
        if key is not None and key in batch:
            return f"{rows} {key}={_compact_ids(np.asarray(batch[key])[list(positions)].tolist())}"
        return f"{rows} #{_compact_ids(list(positions))} of the batch"

    def _describe(self, batch: Mapping[str, np.ndarray], rows: int, index: int) -> str:
        where = f"batch {index} of worker {self.stats.worker} ({rows} rows"
        ids = batch.get(self._id_column) if self._id_column else None
        if ids is not None and len(ids):
            where += f"; {self._id_column} {_compact_ids(np.asarray(ids).tolist())}"
        elif self._id_column:
            where += f"; the batch has no column {self._id_column!r}"
        else:
            where += "; pass id_column= to name its rows"
        return where + ")"

    def _column(self, batch: Mapping[str, np.ndarray], spec: _InputSpec, rows: int, index: int) -> np.ndarray:
        if spec.column not in batch:
            raise ColumnError(
                f"model input {spec.name!r} reads column {spec.column!r}, which the batch does not "
                f"have (columns: {sorted(batch)}); map it with input_columns={{{spec.name!r}: ...}}"
            )
        value = np.asarray(batch[spec.column])
        if value.dtype == object and rows and isinstance(value[0], np.ndarray):
            # A list column (Parquet list<...>) arrives as one array per row.
            lengths = {np.shape(v) for v in value}
            if len(lengths) > 1:
                bad = self._first_odd_row(batch, value)
                raise ColumnShapeError(
                    f"column {spec.column!r} (model input {spec.name!r}) has rows of different shapes "
                    f"{sorted(lengths)}, first odd row {bad}, in {self._describe(batch, rows, index)}"
                )
            value = np.stack(list(value))
        if spec.dtype is not None and value.dtype != spec.dtype:
            raise ColumnTypeError(
                f"column {spec.column!r} holds {value.dtype} but model input {spec.name!r} is "
                f"{spec.type} ({spec.dtype}); convert the column first, e.g. in a map_batches "
                f"step: batch[{spec.column!r}].astype(np.{spec.dtype.name})"
            )
        return self._reshape(value, spec)

    def _first_odd_row(self, batch: Mapping[str, np.ndarray], value: np.ndarray) -> str:
        shapes = [np.shape(v) for v in value]
        common = max(set(shapes), key=shapes.count)
        i = next(i for i, s in enumerate(shapes) if s != common)
        key = self._id_column
        ident = f"{key}={batch[key][i]}" if key is not None and key in batch else f"#{i} of the batch"
        return f"{ident} with shape {shapes[i]} (others {common})"

    @staticmethod
    def _reshape(value: np.ndarray, spec: _InputSpec) -> np.ndarray:
        if spec.row_shape is None or value.ndim == len(spec.row_shape) + 1:
            return value
        row = value.shape[1:]
        dims = [d for d in spec.row_shape if isinstance(d, int)]
        fixed = len(dims) == len(spec.row_shape)
        size = int(np.prod(dims)) if fixed else -1
        if fixed and value.ndim == 2 and row[0] == size:
            return value.reshape((value.shape[0], *dims))
        raise ColumnShapeError(
            f"column {spec.column!r} has rows of shape {list(row)}, but model input {spec.name!r} "
            f"takes rows of shape {list(spec.row_shape)}"
            + (f" (or flattened rows of {size} elements)" if fixed else "")
        )

    def _run(self, feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        names = list(self._outputs)
        b = self.fixed_batch
        if b is None or rows == b:
            chunks = [self._timed_run(names, feeds, rows)]
        else:
            chunks = []
            for start in range(0, rows, b):
                part = {k: v[start : start + b] for k, v in feeds.items()}
                n = len(next(iter(part.values())))
                if n < b:  # pad by repeating the last row; the padded outputs are dropped
                    part = {k: np.concatenate([v, np.repeat(v[-1:], b - n, axis=0)]) for k, v in part.items()}
                chunks.append([o[:n] for o in self._timed_run(names, part, b)])
        return {name: np.concatenate([c[i] for c in chunks]) if len(chunks) > 1 else chunks[0][i]
                for i, name in enumerate(names)}

    def _timed_run(self, names: list[str], feeds: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        t0 = time.perf_counter()
        outputs = self.session.run(names, feeds)
        self._count(runs=1, run_ms=(time.perf_counter() - t0) * 1e3)
        for name, out in zip(names, outputs):
            if np.ndim(out) == 0 or len(out) != rows:
                raise InvalidArgument(
                    f"output {name!r} has shape {list(np.shape(out))} for {rows} input rows; "
                    "only outputs with one row per input row can become columns "
                    "(leave it out with output_columns=)"
                )
        return list(outputs)

    def _count(self, **add: float) -> None:
        values = {k: getattr(self.stats, k) + v for k, v in add.items()}
        if "batches" in add and self._profiling:
            values["profile"] = str(self.session.profile_summary())
        self.stats = WorkerStats(**{**self.stats.to_dict(), **values})
        if "batches" in add:
            self._write_stats()

    def _write_stats(self) -> None:
        if self._stats_path is None:
            return
        # Replace atomically: the driver may read while a worker writes.
        tmp = self._stats_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.stats.to_dict()))
        os.replace(tmp, self._stats_path)


# --------------------------------------------------------------------------- the job


@record(frozen=True)
class InferenceResult:
    """A finished :func:`run_inference` job: the scored rows (materialized in the object
    store) and what it took."""

    dataset: MaterializedDataset
    rows: int
    seconds: float
    workers: list[WorkerStats] = field(default_factory=list)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    def summary_lines(self) -> list[str]:
        lines = [f"{self.rows} rows in {self.seconds:.2f} s ({self.rows_per_second:.0f} rows/s) "
                 f"on {len(self.workers)} worker(s)"]
        lines += ["  " + w.summary_line() for w in self.workers]
        return lines

    def __str__(self) -> str:
        return "\n".join(self.summary_lines())


def _raise_from_ray(exc: BaseException) -> None:
    """Raise the onyxrt error a worker raised, found in the text Ray passed back."""
    match = _ERROR_LINE.search(_ANSI.sub("", str(exc)))
    if match:
        raise _RAISED_AGAIN[match.group(1)](match.group(2).strip()) from exc


def _warn_if_no_cpu_left(ray: Any, reserved: float) -> None:
    total = ray.cluster_resources().get("CPU", 0) if ray.is_initialized() else 0
    if total and reserved >= total:
        warnings.warn(
            f"the inference actors reserve {reserved:g} of the cluster's {total:g} CPUs, leaving "
            "none for the tasks that read the dataset: Ray Data may wait forever. Use fewer "
            "workers or a fraction per worker (num_cpus_per_worker=0.5).",
            RuntimeWarning,
            stacklevel=3,
        )


def _ids(ds: Dataset, id_column: str) -> np.ndarray:
    parts = [b[id_column] for b in ds.select_columns([id_column]).iter_batches(batch_format="numpy")]
    return np.concatenate(parts) if parts else np.array([])


def _missing_ids(source: Dataset, scored: Dataset, id_column: str, limit: int = 10) -> str:
    """The ids of the dropped rows, as ranges of consecutive values (the first ``limit``)."""
    missing = np.setdiff1d(_ids(source, id_column), _ids(scored, id_column))
    if not len(missing):
        return ""
    ranges = _runs(missing.tolist())
    shown = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in ranges[:limit])
    more = " ..." if len(ranges) > limit else ""
    return f"; {len(missing)} {id_column} value(s) missing: {shown}{more}"


def run_inference(
    ds: Dataset,
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    *,
    workers: int = 1,
    batch_size: int = 256,
    num_cpus_per_worker: float = 1,
    num_gpus_per_worker: float = 0,
    expected_rows: int | None = None,
    stats_dir: str | os.PathLike[str] | None = None,
    id_column: str | None = None,
    **predictor_kwargs: Any,
) -> InferenceResult:
    """Score ``ds`` with ``model`` on a pool of ``workers`` actors and check the result.

    Runs ``ds.map_batches(OnyxPredictor, ...)`` with ``batch_format="numpy"`` and
    materializes it. Then:

    * a batch that raised becomes the worker's error again at the driver
      (:class:`BatchInferenceError` naming the batch, or a :class:`ColumnError`);
    * the output must have ``expected_rows`` rows (default ``ds.count()``, which reads
      Parquet metadata only); otherwise :class:`RowCountMismatch`, listing missing ids
      when ``id_column`` is given — rows can vanish silently, e.g. when
      ``DataContext.max_errored_blocks`` lets Ray skip failed blocks;
    * each worker's :class:`WorkerStats` are read back from ``stats_dir`` (a temporary
      folder by default: on a multi-node cluster pass a folder every node can write, or
      the stats of other nodes' workers are missing).

    ``num_cpus_per_worker`` and ``num_gpus_per_worker`` are what each actor reserves (a
    worker given a GPU puts CUDA first). The actors hold their CPUs for the whole job, so
    leave some for the tasks that read the data: when the actors would take every CPU of
    the cluster, Ray Data waits forever for a read task, and this warns (use fewer workers
    or a fraction, e.g. ``num_cpus_per_worker=0.5``). Ray Data gives each block to one
    actor, so a dataset needs several blocks per worker to keep them all busy
    (``read_parquet(..., override_num_blocks=4 * workers)``; Ray may otherwise read a
    folder of small files as one block). Other keyword arguments go to
    :class:`OnyxPredictor`.
    """
    import ray
    from ray.data import ActorPoolStrategy

    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif isinstance(model, os.PathLike):
        model = os.fspath(model)
    expected = ds.count() if expected_rows is None else expected_rows
    with tempfile.TemporaryDirectory(prefix="onyxrt-ray-stats-") as tmp:
        folder = Path(stats_dir) if stats_dir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob(f"{_STATS_PREFIX}*.json"):
            old.unlink()  # a reused folder: only this job's workers count
        kwargs = {**predictor_kwargs, "id_column": id_column, "stats_dir": str(folder)}
        extra: dict[str, Any] = {"num_gpus": num_gpus_per_worker} if num_gpus_per_worker else {}
        _warn_if_no_cpu_left(ray, workers * num_cpus_per_worker)
        scored = ds.map_batches(
            OnyxPredictor,
            fn_constructor_kwargs={"model": model, **kwargs},
            compute=ActorPoolStrategy(size=workers),
            num_cpus=num_cpus_per_worker,
            batch_size=batch_size,
            batch_format="numpy",
            **extra,
        )
        t0 = time.perf_counter()
        try:
            materialized = scored.materialize()
        except ray.exceptions.RayError as exc:
            _raise_from_ray(exc)
            raise
        seconds = time.perf_counter() - t0
        stats = read_worker_stats(folder)
    rows = materialized.count()
    if rows != expected:
        detail = _missing_ids(ds, materialized, id_column) if id_column and rows < expected else ""
        raise RowCountMismatch(
            f"inference returned {rows} rows for {expected} input rows: "
            f"{abs(expected - rows)} row(s) {'dropped' if rows < expected else 'added'}{detail}"
        )
    return InferenceResult(materialized, rows, seconds, stats)
