"""A plan's steps as one straight-line Python function, for small plans.

The generic run loop (:meth:`~onyxrt.plan.ExecutionPlan._execute`) pays about half a
microsecond per step for its own bookkeeping — the iterator, unpacking the step's tuple,
fetching inputs through an ``itemgetter``, counting the results, the output and release
loops. On a tiny model (a scikit-learn pipeline, a 16-operator graph) that is a third of
a run. This module writes the same steps out as straight-line code over the slot list::

    def run(vals):
        i = 0
        r = None
        try:
            i = 0; r = f0(vals[3]); i = -1; vals[5] = r[0]
            i = 1; r = f1(vals[5], vals[4]); i = -2; vals[6] = r[0]; vals[5] = None
            ...
        except BaseException as exc:
            return i, r, exc
        return None

so a step costs its call, one index and one store. A kernel that offers
:attr:`~onyxrt.kernels.Kernel.single_output` (a ufunc, say) is called through it:
``i = 2; vals[7] = g2(vals[6])`` — no tuple, and often no Python frame at all. A
failure is returned, not raised from here: ``i`` says where it happened — step ``k``'s
kernel (``i == k``) or its results (``i == ~k``: too few of them) — and the caller
raises the errors the generic loop raises. Returning leaves no reference cycle through the exception's traceback (a frame
holding its own exception), which would keep every value of the failed run alive until
the garbage collector ran (a device arena's blocks included).

Compiling the function costs about 40 µs per step at session creation and saves ~0.4 µs
per step and run (a 200-node Add chain: 0.46 µs a node against the loop's 0.87), so it
pays for itself after ~100 runs at any size; it is made only for plans of at most
:data:`MAX_STEPS` steps, which bounds the creation cost to ~10 ms. Larger plans keep the
loop (their kernels' time dwarfs it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["MAX_STEPS", "straight_line_runner"]

#: Plans with more steps keep the generic loop (compilation grows with the steps, and the
#: per-step saving is lost in the kernels' time there).
MAX_STEPS = 256

#: (compute, input slots, output slots, released slots, the kernel's single_output or
#: None) of one step
StepSpec = tuple[Callable[..., Sequence[Any]], tuple[int, ...], tuple[int, ...], tuple[int, ...],
                 Callable[..., Any] | None]


#: what a straight-line run returns: None, or (step, results, exception) of a failure
Failure = tuple[int, Any, BaseException] | None


def straight_line_runner(steps: Sequence[StepSpec]) -> Callable[[list[Any]], Failure] | None:
    """``run(vals)`` executing ``steps`` in order over the slot list ``vals``, or None for
    a plan too large (or empty) to be worth it.

    ``run`` returns None, or ``(i, results, exc)`` when step ``i``'s kernel raised ``exc``
    (``i >= 0``) or step ``~i`` returned fewer results than it has outputs (``i < 0``;
    ``results`` is what it returned, ``exc`` the IndexError or TypeError of reading it).
    """
    if not steps or len(steps) > MAX_STEPS:
        return None
    lines = ["def run(vals):", "    i = 0", "    r = None", "    try:"]
    namespace: dict[str, Any] = {}
    for k, (compute, ins, outs, release, single) in enumerate(steps):
        args = ", ".join(f"vals[{j}]" for j in ins)
        if single is not None and len(outs) == 1:
            namespace[f"g{k}"] = single
            parts = [f"i = {k}", f"vals[{outs[0]}] = g{k}({args})"]
        else:
            namespace[f"f{k}"] = compute
            parts = [f"i = {k}", f"r = f{k}({args})", f"i = {~k}"]
            parts += [f"vals[{j}] = r[{n}]" for n, j in enumerate(outs)]
        parts += [f"vals[{j}] = None" for j in release]
        lines.append("        " + "; ".join(parts))
    lines += ["    except BaseException as exc:", "        return i, r, exc", "    return None"]
    exec(compile("\n".join(lines), "<onyxrt plan>", "exec"), namespace)  # noqa: S102 - our own code
    run: Callable[[list[Any]], Failure] = namespace["run"]
    return run
