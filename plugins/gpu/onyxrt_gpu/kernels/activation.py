"""GPU fast paths for activations; the operators themselves come from the operator
library (:mod:`onyxrt_ops.activation`), bound over CuPy in ``kernels/__init__``.

Activations made of several elementwise steps — LeakyRelu, Sigmoid, HardSigmoid,
HardSwish and Gelu — run as one fused kernel (``cupy.fuse``) instead of one launch per
step, built once per CuPy module and shared by every node. Each override subclasses the
library's kernel, so attributes are parsed and checked exactly as on every provider.
float16 inputs are computed in float32 and rounded once at the end. Gelu's exact form is
evaluated as ``0.5 x erfc(-x / sqrt 2)``, which avoids the cancellation of
``1 + erf(x / sqrt 2)`` for negative x.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

from onyxrt_ops import library

from . import registry
from ._common import BACKEND, FLOATS, fused_kernel, widen

__all__ = ["fused", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Gelu"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _builders(cp: Any) -> dict[str, Callable[..., Any]]:
    """The fused activations, as plain functions of device arrays over CuPy module ``cp``
    (a weak proxy: see :func:`._common.fused_kernel`)."""
    erfc = importlib.import_module("cupyx.scipy.special").erfc

    def sigmoid(x):
        return 1.0 / (1.0 + cp.exp(-x))

    def leaky_relu(x, alpha):
        return cp.maximum(x, 0.0) + cp.minimum(x, 0.0) * alpha

    def hard_sigmoid(x, alpha, beta):
        return cp.maximum(cp.minimum(x * alpha + beta, 1.0), 0.0)

    def hard_swish(x):
        return x * cp.maximum(cp.minimum(x * (1.0 / 6.0) + 0.5, 1.0), 0.0)

    def gelu_erf(x):
        return 0.5 * x * erfc(x * -_INV_SQRT2)

    def gelu_tanh(x):
        return 0.5 * x * (1.0 + cp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))

    return {
        "sigmoid": sigmoid,
        "leaky_relu": leaky_relu,
        "hard_sigmoid": hard_sigmoid,
        "hard_swish": hard_swish,
        "gelu_erf": gelu_erf,
        "gelu_tanh": gelu_tanh,
    }


def fused(cp: Any, name: str) -> Callable[..., Any]:
    """The fused kernel ``name`` for CuPy module ``cp`` (built on first use, then shared)."""
    return fused_kernel(cp, name, lambda module: _builders(module)[name])  # type: ignore[no-any-return]


class _Fused:
    """Mixin for a library activation computed by one fused kernel on float32/float64
    data: ``kernel`` names it, ``args`` are its scalar arguments after ``x``."""

    kernel = "sigmoid"

    def __init__(self, info: Any) -> None:
        super().__init__(info)  # the library kernel: parses and checks the attributes
        self.cp = self.xp.module
        self.fn = fused(self.cp, self.kernel)

    @property
    def args(self) -> tuple[float, ...]:
        return ()

    def compute(self, x):
        y = self.fn(widen(x), *self.args)
        return (y.astype(x.dtype, copy=False),)


@registry.register("LeakyRelu", since=(1, 6, 16), types={"T": FLOATS})
class LeakyRelu(_Fused, library.kernel("LeakyRelu", 16, BACKEND)):
    """y = x if x >= 0 else alpha * x, fused."""

    kernel = "leaky_relu"

    @property
    def args(self) -> tuple[float, ...]:
        return (self.alpha,)


@registry.register("Sigmoid", since=(1, 6, 13), types={"T": FLOATS})
class Sigmoid(_Fused, library.kernel("Sigmoid", 13, BACKEND)):
    """y = 1 / (1 + exp(-x)), fused (exp(-x) overflowing to inf gives 0)."""

    kernel = "sigmoid"


@registry.register("HardSigmoid", since=(1, 6, 22), types={"T": FLOATS})
class HardSigmoid(_Fused, library.kernel("HardSigmoid", 22, BACKEND)):
    """y = max(0, min(1, alpha * x + beta)), fused."""

    kernel = "hard_sigmoid"

    @property
    def args(self) -> tuple[float, ...]:
        return (self.alpha, self.beta)


@registry.register("HardSwish", since=(14, 22), types={"T": FLOATS})
class HardSwish(_Fused, library.kernel("HardSwish", 22, BACKEND)):
    """y = x * max(0, min(1, x / 6 + 0.5)), fused."""

    kernel = "hard_swish"


@registry.register("Gelu", since=20, types={"T": FLOATS})
class Gelu(_Fused, library.kernel("Gelu", 20, BACKEND)):
    """Gelu, exact (through erfc) or the tanh approximation, fused."""

    @property
    def kernel(self) -> str:  # type: ignore[override]
        return "gelu_tanh" if self.approximate == "tanh" else "gelu_erf"
