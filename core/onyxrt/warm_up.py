"""Warm-up runs at session creation, for small models on the host.

CPython specializes a function's bytecode only after it has run a few times (its
adaptive interpreter quickens a code object after several calls, then each instruction
after its own counter), and numpy sets up a ufunc's loop on its first use. A tiny model's
run — a scikit-learn pipeline of five kernels, ~13 µs at speed — spends its first ten to
fifteen runs in that warm-up: 20-130 µs each, where onnxruntime's compiled loop is at
speed from its second run. A service sees that as slow first requests.

So a session whose plan is small (the straight-line runner of :mod:`.straight_line`) and
cheap runs itself a few times at creation on synthetic feeds (ones; empty strings for
text; free dimensions 1), through the same :meth:`InferenceSession.run` the caller uses,
and drops the results, once the session is built and Python's collector is back on (the
first run after creation otherwise pays for collecting the young objects creation left:
~0.1 ms on a scikit-learn pipeline). What it costs is bounded: it stops after a run that
takes over :data:`SLOW_RUN_S` (a model whose kernels dwarf the interpreter's warm-up gains
nothing from it; the first run over :data:`SLOW_FIRST_RUN_S`) and after :data:`BUDGET_S`
in all.

It never runs where a run could be observed or differ from run to run: random operators,
control flow, anything but the CPU provider's kernels on ONNX's own domains, profiling,
provider run hooks, shape specialization or the parallel executor. A warm-up run that
fails stops the warm-up quietly (a synthetic feed may be no valid input: the model's own
run then reports the error with the real one). The config entry
``session.warm_up_runs`` sets the number of runs (``0`` turns it off).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InvalidArgument

if TYPE_CHECKING:
    from .feeds import InputCheck
    from .plan import ExecutionPlan

__all__ = ["WARM_UP_RUNS_KEY", "DEFAULT_RUNS", "warm_up_runs", "warm_up_feeds", "warm_up"]

#: session config entry: how many warm-up runs a small model gets at creation (0: none)
WARM_UP_RUNS_KEY = "session.warm_up_runs"

#: enough for CPython 3.11-3.13 to quicken and specialize the run's code (a scikit-learn
#: pipeline's runs reach their steady time after 12-14 runs)
DEFAULT_RUNS = 16

#: a run slower than this ends the warm-up: the kernels' own time dwarfs the interpreter's
#: warm-up (~20-100 µs a run over the first dozen)
SLOW_RUN_S = 0.0005

#: the first run's bound instead: it also pays one-off costs (numpy's first use of a
#: ufunc loop, the young-generation collection of the objects creation left)
SLOW_FIRST_RUN_S = 0.005

#: the most time the warm-up runs after the first take together (a session's creation
#: is tens of milliseconds at least; a scikit-learn pipeline's sixteen runs take ~0.5 ms)
BUDGET_S = 0.002

#: the most elements a synthetic feed may hold (larger inputs mean heavier runs)
MAX_FEED_ELEMENTS = 1 << 16

#: the only provider whose kernels are known to be free of side effects
_PROVIDER = "CPUExecutionProvider"

#: domains whose operators are ONNX's and onnxruntime's own (not a user's custom op)
_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})

#: operators whose runs differ (random draws) or may not end on an arbitrary feed (loops)
_NEVER = frozenset({
    "Multinomial", "Bernoulli", "If", "Loop", "Scan", "SequenceMap",
})


def warm_up_runs(entries: Mapping[str, str]) -> int:
    """The number of warm-up runs the config ``entries`` ask for (the default if unset)."""
    raw = entries.get(WARM_UP_RUNS_KEY)
    if raw is None:
        return DEFAULT_RUNS
    try:
        runs = int(raw)
    except ValueError:
        raise InvalidArgument(f"{WARM_UP_RUNS_KEY} must be a count of runs (0 turns warm-up off), got {raw!r}") from None
    return max(runs, 0)


def _steps_qualify(plan: ExecutionPlan) -> bool:
    """Whether every step of ``plan`` is a side-effect-free CPU kernel of a small plan."""
    if plan._straight is None or plan.graph_replay is not None or plan.hooked_providers:
        return False
    if any(p.name != _PROVIDER for p in plan.used_providers):
        return False
    for step in plan.steps:
        op = step.op_type
        if step.kind == "copy" or op in _NEVER or "Random" in op or "Dropout" in op:
            return False
        info = step.kernel.info if step.kernel is not None else None
        if step.kind == "node" and (info is None or info.domain not in _DOMAINS):
            return False
    return True


def warm_up_feeds(plan: ExecutionPlan, inputs: Sequence[str], checks: Mapping[str, InputCheck]) -> dict[str, Any] | None:
    """Synthetic feeds for ``inputs`` (ones, or empty strings; free dimensions 1), or None
    when the plan does not qualify for a warm-up or an input is no plain small tensor."""
    if not _steps_qualify(plan):
        return None
    feeds: dict[str, Any] = {}
    for name in inputs:
        check = checks.get(name)
        if check is None or check.kind != "tensor" or check.dtype is None or check.shape is None:
            return None
        shape = tuple(d if isinstance(d, int) and d >= 0 else 1 for d in check.shape)
        if int(np.prod(shape, dtype=np.int64)) > MAX_FEED_ELEMENTS:
            return None
        if check.dtype.kind == "O":
            feeds[name] = np.full(shape, "", dtype=object)
        elif check.dtype.kind in "biufc":
            feeds[name] = np.ones(shape, check.dtype)
        else:
            return None
    return feeds


def warm_up(run: Callable[[dict[str, Any]], Any], feeds: dict[str, Any], runs: int) -> int:
    """Call ``run(feeds)`` up to ``runs`` times within the time bounds above; return how
    many runs completed. A failing run ends the warm-up (its error is dropped), and
    warnings raised meanwhile are not shown (the feeds are ours, not the caller's)."""
    done = 0
    spent = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(runs):
            start = time.perf_counter()
            try:
                run(feeds)
            except Exception:
                return done
            took = time.perf_counter() - start
            if done == 0:
                if took > SLOW_FIRST_RUN_S:
                    return 1
            else:
                spent += took
                if took > SLOW_RUN_S or spent > BUDGET_S:
                    return done + 1
            done += 1
    return done
