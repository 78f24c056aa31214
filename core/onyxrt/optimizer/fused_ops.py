"""What the ``ai.onyxrt`` operators mean, written once for every provider's kernels.

* FusedConv's epilogue — :func:`conv_epilogue` reads the node's ``activation`` /
  ``activation_params`` attributes (as the fusion pass wrote them) and returns an in-place
  function ``(xp, y, z) -> None`` that adds the residual ``z`` and applies the activation
  over an array module ``xp`` (numpy on the CPU, CuPy on GPUs), so the CPU and GPU kernels
  compute exactly the same thing. Only ufuncs with ``out=`` are used (CuPy has no
  ``where=``).
* FusedMatMul's attributes — :class:`MatMulAttributes`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidGraph
from ..kernels import KernelInfo
from ..records import record

__all__ = ["activation", "conv_epilogue", "InPlaceActivation", "MatMulAttributes"]

InPlaceActivation = Callable[[Any, Any], None]


def _relu(xp: Any, y: Any) -> None:
    xp.maximum(y, 0, out=y)


def _sigmoid(xp: Any, y: Any) -> None:
    # 1 / (1 + exp(-y)); exp overflowing to inf gives 1/inf = 0, the right limit.
    xp.negative(y, out=y)
    xp.exp(y, out=y)
    y += 1
    xp.reciprocal(y, out=y)


def _tanh(xp: Any, y: Any) -> None:
    xp.tanh(y, out=y)


def _leaky_relu(alpha: float) -> InPlaceActivation:
    def leaky(xp: Any, y: Any) -> None:
        # max(y, 0) + alpha * min(y, 0): exact, as the LeakyRelu kernels compute it.
        negative = xp.minimum(y, 0)
        negative *= y.dtype.type(alpha)
        xp.maximum(y, 0, out=y)
        y += negative

    return leaky


def _hard_sigmoid(alpha: float, beta: float) -> InPlaceActivation:
    def hard_sigmoid(xp: Any, y: Any) -> None:
        y *= y.dtype.type(alpha)
        y += y.dtype.type(beta)
        xp.clip(y, 0, 1, out=y)

    return hard_sigmoid


def _clip(lo: float, hi: float) -> InPlaceActivation:
    def clip(xp: Any, y: Any) -> None:
        # max then min, as Clip defines it (min > max gives max)
        xp.maximum(y, y.dtype.type(lo), out=y)
        xp.minimum(y, y.dtype.type(hi), out=y)

    return clip


def activation(node_name: str, name: str, params: Sequence[float]) -> InPlaceActivation | None:
    """The in-place function for a FusedConv's ``activation`` ("" means none)."""
    params = [float(p) for p in params]
    if name == "":
        return None
    if name == "Relu" and not params:
        return _relu
    if name == "Sigmoid" and not params:
        return _sigmoid
    if name == "Tanh" and not params:
        return _tanh
    if name == "LeakyRelu" and len(params) == 1:
        return _leaky_relu(params[0])
    if name == "HardSigmoid" and len(params) == 2:
        return _hard_sigmoid(params[0], params[1])
    if name == "Clip" and len(params) == 2:
        return _clip(params[0], params[1])
    raise InvalidGraph(
        f"node {node_name!r} (FusedConv): unsupported activation {name!r} with parameters "
        f"{params}; expected Relu, Sigmoid, Tanh, LeakyRelu[alpha], HardSigmoid[alpha, beta] "
        "or Clip[min, max]"
    )


def conv_epilogue(info: KernelInfo) -> Callable[[Any, Any, Any], None]:
    """FusedConv's work after the convolution: ``epilogue(xp, y, z)`` adds the residual
    ``z`` (``None`` when absent) to ``y`` and applies the activation, in place."""
    act = activation(
        info.node_name, info.attr("activation", "") or "", info.attr("activation_params", []) or []
    )

    def epilogue(xp: Any, y: Any, z: Any) -> None:
        if z is not None:
            if tuple(z.shape) != tuple(y.shape):
                raise ValueError(f"residual Z has shape {z.shape}, the convolution gives {y.shape}")
            y += z
        if act is not None:
            act(xp, y)

    return epilogue


@record(frozen=True)
class MatMulAttributes:
    """FusedMatMul's attributes: ``Y = alpha * A' @ B' + bias``, where A'/B' swap their
    last two axes when ``trans_a``/``trans_b``."""

    alpha: float
    trans_a: bool
    trans_b: bool

    @classmethod
    def of(cls, info: KernelInfo) -> MatMulAttributes:
        """Read them from the node."""
        return cls(float(info.attr("alpha", 1.0)), bool(info.attr("transA", 0)), bool(info.attr("transB", 0)))
