"""A compiled path for a session's usual run, offered by a provider package.

A run through :meth:`InferenceSession.run` passes through a dozen Python frames around
its kernels: output names resolved, each feed checked, the run's limits and memory guard
entered, numpy's floating-point errors ignored, the slot template copied, the steps
called, the outputs checked for aliasing. On a scikit-learn pipeline of five kernels that
was about half of a ~13 µs run. A package with compiled code (the CPU provider's
``_native.fast_run``) can do all of it in one call for the usual case; the core keeps the
rules and hands it what it needs as a :class:`FastRunSpec`.

The contract of the object a factory returns, ``fast(output_names, input_feed)``:

* it returns exactly what ``slow(output_names, input_feed)`` — the session's Python path
  — returns, and raises what it raises; whatever it does not handle itself it passes to
  ``slow`` unchanged (a feed that needs converting or is rejected, an unknown output
  name, a failing step: the Python path runs again and raises its typed error);
* it enters and leaves a run's context as :func:`~onyxrt.limits.run_limits`,
  :func:`~onyxrt.threads.intra_op_limit` and :func:`~onyxrt.float_errors.ignore_float_errors`
  do, through the variables in the spec;
* an output that is not plainly the run's own (a view, a protected slot's value, a feed
  passed through) is copied, or decided by ``outputs_of`` as
  :meth:`~onyxrt.plan.ExecutionPlan._outputs_of` decides it;
* when the plan's steps change (``plan.finalize()`` again) every call goes to ``slow``
  until the session builds a new one (``stale()`` says so).

Sessions take the fast path only where nothing else needs the Python one: a plan on host
providers without run hooks, graph replay or the parallel executor, no profiling, no shape
specialization, no run lock, no sparse outputs, and a call without ``run_options``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import float_errors
from . import limits as _limits
from .records import record

if TYPE_CHECKING:
    from .feeds import InputCheck
    from .limits import RunLimits
    from .plan import ExecutionPlan

__all__ = ["FastRunSpec", "install_fast_run", "fast_run_for"]

#: (name, slot, dtype or None (every feed checked in Python), rank or -1, ((axis, size), ...)
#: of the fixed dimensions, whether the input is required (not an overridable initializer))
InputSpec = tuple[str, int, Any, int, tuple[tuple[int, int], ...], bool]


@record(frozen=True)
class FastRunSpec:
    """What a compiled run path needs from the core (see the module docstring)."""

    plan: ExecutionPlan
    inputs: tuple[InputSpec, ...]
    #: every output's name, in the model's order (what ``output_names=None`` returns)
    output_names: tuple[str, ...]
    limits: RunLimits
    #: the context variable holding the current limits (:func:`onyxrt.limits.current_limits`)
    limits_var: Any
    #: the installed memory guard and the context variable of a run's guard token (the
    #: guard None: no guard)
    guard: Any
    guard_var: Any
    #: numpy's floating-point error state variable, and :mod:`onyxrt.float_errors`'
    #: namespace (its ``_pair`` and functions)
    extobj_var: Any
    float_errors: dict[str, Any]
    #: ``thread_limit()`` → a context manager for one run (None: no BLAS thread limit)
    thread_limit: Callable[[], Any] | None
    slow: Callable[[Any, Any], list[Any]]
    outputs_of: Callable[[list[Any], Any, list[str]], list[Any]]


_factory: Callable[[FastRunSpec], Callable[[Any, Any], list[Any]] | None] | None = None


def install_fast_run(factory: Callable[[FastRunSpec], Callable[[Any, Any], list[Any]] | None] | None) -> None:
    """Use ``factory(spec)`` (None: it cannot serve this spec) for later sessions; None
    removes it."""
    global _factory
    _factory = factory


def fast_run_for(
    plan: ExecutionPlan,
    checks: Mapping[str, InputCheck],
    required: Sequence[str],
    output_names: Sequence[str],
    limits: RunLimits,
    thread_limit: Callable[[], Any] | None,
    slow: Callable[[Any, Any], list[Any]],
) -> Callable[[Any, Any], list[Any]] | None:
    """The installed factory's fast path for ``plan`` run with these feed ``checks``
    (``required``: the graph's inputs; ``output_names``: its outputs in order), ``limits``
    and ``thread_limit`` (a run's BLAS thread limit, or None); None where
    there is no factory, the plan needs the Python path, or the factory declined."""
    if _factory is None or not plan.fast_run_allowed():
        return None
    extobj_var = float_errors.extobj_variable()
    if extobj_var is None:  # numpy 1.x: np.errstate, which only the Python path enters
        return None
    inputs: list[InputSpec] = []
    for name, slot in plan.input_slots.items():
        check = checks.get(name)
        if check is None:
            return None
        inputs.append((name, slot, check.dtype if check.plain else None, check.rank,
                       tuple(check.fixed_axes), name in required))
    spec = FastRunSpec(
        plan=plan,
        inputs=tuple(inputs),
        output_names=tuple(output_names),
        limits=limits,
        limits_var=_limits._current,
        guard=_limits._guard,
        guard_var=_limits._guard_token,
        extobj_var=extobj_var,
        float_errors=vars(float_errors),
        thread_limit=thread_limit,
        slow=slow,
        outputs_of=lambda vals, feeds, names: plan._outputs_of(vals, feeds, names, None),
    )
    return _factory(spec)
