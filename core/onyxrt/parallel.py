"""Parallel execution of a plan's independent steps (``ExecutionMode.ORT_PARALLEL``).

Steps form a DAG through the slots they read and write. A thread pool runs every step
whose producers have finished; numpy, BLAS and device kernels release the GIL, so
independent branches (two towers of a model, an NPU group beside CPU nodes) overlap.
Intermediates are freed by reference counting, since the sequential plan's "release
after the last step that reads it" depends on the sequential order.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .errors import OnyxError
from .records import record

__all__ = ["StepGraph", "run_parallel"]


@record(frozen=True)
class StepGraph:
    """Dependencies between a plan's steps, computed once per plan."""

    successors: tuple[tuple[int, ...], ...]
    indegree: tuple[int, ...]
    #: slot → how many steps read it (slots read by no step are not listed)
    readers: dict[int, int]
    #: each step's input and output slots
    ins: tuple[tuple[int, ...], ...]
    outs: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, steps: Sequence[Any]) -> StepGraph:
        """Build the graph from steps' ``ins``/``outs`` slot tuples."""
        producer: dict[int, int] = {}
        for i, step in enumerate(steps):
            for j in step.outs:
                producer[j] = i
        successors: list[set[int]] = [set() for _ in steps]
        indegree = [0] * len(steps)
        readers: dict[int, int] = {}
        for i, step in enumerate(steps):
            preds = {producer[j] for j in step.ins if j in producer}
            for p in preds:
                successors[p].add(i)
            indegree[i] = len(preds)
            for j in step.ins:
                readers[j] = readers.get(j, 0) + 1
        return cls(
            tuple(tuple(sorted(s)) for s in successors), tuple(indegree), readers,
            tuple(tuple(s.ins) for s in steps), tuple(tuple(s.outs) for s in steps),
        )


def run_parallel(
    graph: StepGraph,
    vals: list[Any],
    call: Callable[[int, list[Any]], Sequence[Any]],
    error: Callable[[int, list[Any], BaseException], BaseException],
    keep: Set[int],
    pool: ThreadPoolExecutor,
) -> None:
    """Execute the steps of ``graph`` on ``pool``, each as soon as its inputs exist.

    ``call(i, args)`` runs step ``i`` on its input values and returns its results
    (checked: the plan raises for a stopped run or too few results); ``error(i, vals,
    exc)`` turns a step's failure other than an :class:`~onyxrt.errors.OnyxError` into
    the error raised. Slots in ``keep`` are never released. The plan hands these in, so
    this module knows steps only as slot numbers.
    """
    if not graph.ins:
        return
    indegree = list(graph.indegree)
    readers = dict(graph.readers)
    lock = threading.Lock()
    finished = threading.Event()
    remaining = [len(graph.ins)]
    failure: list[tuple[int, BaseException]] = []
    # Steps submitted and not yet returned: after a failure the run waits for them, so no
    # step of it still runs (or writes `vals`) once the caller has the error.
    inflight = [0]
    idle = threading.Event()

    def run_step(i: int) -> None:
        try:
            if failure:
                return
            ins = graph.ins[i]
            results = call(i, [vals[j] for j in ins])
            ready = []
            with lock:
                for j, v in zip(graph.outs[i], results):
                    vals[j] = v
                for j in ins:
                    readers[j] -= 1
                    if readers[j] == 0 and j not in keep:
                        vals[j] = None
                for k in graph.successors[i]:
                    indegree[k] -= 1
                    if indegree[k] == 0:
                        ready.append(k)
                remaining[0] -= 1
                if remaining[0] == 0:
                    finished.set()
                inflight[0] += len(ready)
            for k in ready:
                pool.submit(contextvars.copy_context().run, run_step, k)
        except BaseException as exc:  # handed to the caller's thread below
            failure.append((i, exc))
            finished.set()
        finally:
            with lock:
                inflight[0] -= 1
                if inflight[0] == 0:
                    idle.set()

    # Collect the roots before submitting any: workers decrement `indegree` concurrently.
    roots = [i for i, deg in enumerate(graph.indegree) if deg == 0]
    inflight[0] = len(roots)
    for i in roots:
        pool.submit(contextvars.copy_context().run, run_step, i)
    finished.wait()
    if failure:
        idle.wait()
        i, exc = failure[0]
        if isinstance(exc, OnyxError):
            raise exc
        raise error(i, vals, exc) from exc
