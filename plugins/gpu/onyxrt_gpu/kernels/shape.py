"""GPU overrides for the shape family; the operators themselves come from the operator
library (:mod:`onyxrt_ops.shape`, bound over CuPy in ``kernels/__init__``), which also
brings the GPU CenterCropPad, Compress, DepthToSpace, ReverseSequence and SpaceToDepth.

Kept here, each subclassing the library's kernel:

* Transpose, DepthToSpace and SpaceToDepth permute axes, and Concat joins arrays, with
  ``cupy.transpose``/``cupy.concatenate``: CuPy before 14 (and the simulated CuPy) lacks
  the standard's ``permute_dims`` and ``concat``;
* Dropout runs inference only: a node whose ``training_mode`` may be true is refused at
  capability time (:meth:`Dropout.refuse_node`) and runs on a provider with random
  dropout (the CPU's), rather than uploading a mask drawn on the host every run. Versions
  1 and 6 are inference whatever ``is_test`` says (as onnxruntime does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt_ops import library

from ._common import BACKEND, BOOL, TENSORS, register_host

__all__ = ["Concat", "Dropout"]


class _NumpyNames:
    """``permuted`` with CuPy's ``transpose`` (see the module docstring)."""

    def permuted(self, x: Any, axes: tuple[int, ...]) -> Any:
        return self.xp.transpose(x, axes)  # type: ignore[attr-defined]


def _with_numpy_names(op: str) -> Any:
    """The library's ``op`` with :class:`_NumpyNames`, registered for all its versions."""
    (d,) = [d for d in library.definitions if d.op_type == op and d.domain == ""]
    base = library.kernel(op, d.versions[0], BACKEND)
    cls = type(op, (_NumpyNames, base), {"__module__": __name__, "__doc__": base.__doc__})
    return register_host(op, d.versions, host=d.host_inputs)(cls)


for _op in ("Transpose", "DepthToSpace", "SpaceToDepth"):
    _with_numpy_names(_op)


@register_host("Concat", (1, 4, 11, 13))
class Concat(library.kernel("Concat", 13, BACKEND)):
    """Concatenate the inputs along ``axis`` with ``cupy.concatenate``."""

    def compute(self, *inputs):
        arrays, axis = self.arrays(inputs)
        return (self.xp.concatenate(arrays, axis=axis),)


@register_host("Dropout", (1, 6, 7, 10, 12, 13, 22), host=(1, 2), types={"T": TENSORS - BOOL})
class Dropout(library.kernel("Dropout", 22, BACKEND)):
    """Dropout for inference: the input passes through; the mask (when asked) is all ones."""

    @classmethod
    def refuse_node(cls, graph: Any, node: Any) -> str:
        """Why a training-mode Dropout cannot run here: ``training_mode`` present and not
        a constant false (a constant ``ratio`` of 0 drops nothing, so it is accepted)."""
        mode = node.inputs[2] if len(node.inputs) > 2 else ""
        if not mode:
            return ""
        if not graph.is_constant(mode):
            return (f"training_mode ({mode!r}) is decided at run time and may be true; the GPU "
                    "provider has no random dropout")
        if not bool(np.asarray(graph.initializers[mode]).reshape(-1)[0]):
            return ""
        ratio = node.inputs[1] if len(node.inputs) > 1 else ""
        if ratio and graph.is_constant(ratio) and float(np.asarray(graph.initializers[ratio]).reshape(-1)[0]) == 0.0:
            return ""
        return "training_mode is true (random dropout); the GPU provider has no random dropout"

    def train(self, x, ratio):
        if self.info.since_version < 12:
            return x, None  # is_test unset: inference all the same, as onnxruntime does
        raise NotImplementedError("Dropout with training_mode=True is not supported on the GPU provider")
