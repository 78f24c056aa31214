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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import OnyxError, RunTerminated

if TYPE_CHECKING:
    from .plan import ExecutionPlan

__all__ = ["StepGraph", "run_parallel"]


@dataclass(frozen=True)
class StepGraph:
    """Dependencies between a plan's steps, computed once per plan."""

    successors: tuple[tuple[int, ...], ...]
    indegree: tuple[int, ...]
    #: slot → how many steps read it (slots read by no step are not listed)
    readers: dict[int, int]

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
        return cls(tuple(tuple(sorted(s)) for s in successors), tuple(indegree), readers)


def run_parallel(plan: ExecutionPlan, vals: list[Any], run_options: Any, pool: ThreadPoolExecutor) -> None:
    """Execute ``plan``'s steps on ``pool``, each as soon as its inputs exist."""
    from .plan import _count, _too_few

    steps = plan.steps
    graph = plan.step_graph
    if not steps:
        return
    indegree = list(graph.indegree)
    readers = dict(graph.readers)
    keep = plan.kept_slots
    lock = threading.Lock()
    finished = threading.Event()
    remaining = [len(steps)]
    failure: list[tuple[int, BaseException]] = []
    # Steps submitted and not yet returned: after a failure the run waits for them, so no
    # step of it still runs (or writes `vals`) once the caller has the error.
    inflight = [0]
    idle = threading.Event()

    def run_step(i: int) -> None:
        try:
            step = steps[i]
            if failure:
                return
            if run_options is not None and run_options.terminate:
                raise RunTerminated(f"run terminated by RunOptions.terminate before node {step.name!r}")
            results = step.fn(*[vals[j] for j in step.ins])
            if _count(results) < len(step.outs):
                raise _too_few(step, results, plan.providers[step.provider].name)
            ready = []
            with lock:
                for j, v in zip(step.outs, results):
                    vals[j] = v
                for j in step.ins:
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
        raise plan._kernel_error(steps[i], vals, exc) from exc  # type: ignore[arg-type]
