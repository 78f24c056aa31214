"""The CPU provider's compiled run path (``csrc/fast_run.c``) for :mod:`onyxrt.fast_run`.

Installed when the provider is imported, as the memory guard is: a session whose plan
qualifies (see :mod:`onyxrt.fast_run`) then runs ``InferenceSession.run``'s usual call in
one compiled call — feeds checked, the run's context entered, the steps called with
vectorcall, the outputs handed out — and everything else through the core's Python path.
Without the compiled module (the pure-Python build), or under a memory guard other than
this package's, nothing is installed or the factory declines.
"""

from __future__ import annotations

from typing import Any

from onyxrt.fast_run import FastRunSpec, install_fast_run

from . import native
from .memory_guard import NumpyMemoryGuard

__all__ = ["make_fast_run", "install"]


def make_fast_run(spec: FastRunSpec) -> Any:
    """The compiled run path for ``spec``, or None where this build cannot serve it."""
    module = native.compiled_module()
    if module is None or not hasattr(module, "fast_run"):
        return None
    guard = spec.guard
    if guard is not None and not isinstance(guard, NumpyMemoryGuard):
        return None  # another package's guard: only the Python path enters it
    plan = spec.plan
    slots = tuple(plan.output_slots[name][0] for name in spec.output_names)
    return module.fast_run(
        plan, plan._compiled, list(plan.template), list(spec.inputs), list(plan.step_specs),
        list(spec.output_names), slots, tuple(sorted(plan.protected)),
        spec.limits_var, spec.limits, spec.guard_var if guard is not None else None,
        int(spec.limits.max_tensor_bytes), int(spec.limits.max_run_bytes),
        spec.extobj_var, spec.float_errors,
        spec.thread_limit if spec.thread_limit is not None else None,
        spec.slow, spec.outputs_of,
    )


def install() -> bool:
    """Install :func:`make_fast_run` if the compiled module has it; return whether it did."""
    module = native.compiled_module()
    if module is None or not hasattr(module, "fast_run"):
        return False
    install_fast_run(make_fast_run)
    return True
