"""The ai.onnx.preview.training optimizers Adam, Adagrad and Momentum, written once over
an array namespace.

Each node updates one or more tensors at once. After the scalar inputs ``R`` (learning
rate) and ``T`` (update count), read on the host, come groups of equal size: the tensors
``X``, their gradients ``G`` and the optimizer's state (``H`` for Adagrad, ``V`` for
Momentum, ``V`` then ``H`` for Adam), so ``n`` tensors make ``2 + k * n`` inputs. The
outputs are the new ``X`` tensors followed by the new state tensors, group by group. The
updates are evaluated in the tensors' own dtype (float or double): the coefficients are
Python floats, which the standard's type promotion keeps in the array's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_DOMAIN = "ai.onnx.preview.training"
_TYPES = {"T1": (np.float32, np.float64), "T3": (np.float32, np.float64)}


class _Optimizer(OpKernel):
    """Shared plumbing: split the variadic inputs into ``groups`` equal lists."""

    groups = 2

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        n_in = len(info.input_names) - 2
        if n_in <= 0 or n_in % self.groups:
            raise InvalidGraph(f"{self.where()}: expects R, T and {self.groups} equal groups of "
                               f"tensors, got {len(info.input_names)} inputs")
        self.n = n_in // self.groups

    def float_attr(self, name: str, default: float | None) -> float:
        """Attribute ``name`` as a float (``default`` None: required)."""
        value = self.info.attr(name, default)
        if value is None:
            raise InvalidGraph(f"{self.where()}: required attribute {name!r} is missing")
        if not isinstance(value, (int, float)):
            raise InvalidGraph(f"{self.where()}: attribute {name!r} must be a float, got {value!r}")
        return float(value)

    def split(self, inputs: tuple[Any, ...]) -> tuple[float, int, list[list[Any]]]:
        """``R`` and ``T`` as Python numbers, and the ``groups`` lists of tensors."""
        r, t, *rest = inputs
        if len(rest) != self.groups * self.n:
            raise ValueError(f"{self.where()}: got {len(inputs)} inputs")
        for x in rest:
            if dtype_name(x.dtype) not in ("float32", "float64"):
                raise ValueError(f"{self.where()}: tensors must be float, got {x.dtype}")
        groups = [list(rest[i * self.n : (i + 1) * self.n]) for i in range(self.groups)]
        return float(self.host(r).reshape(())), int(self.host(t).reshape(())), groups


@library.define("Adagrad", 1, domain=_DOMAIN, types=_TYPES, host_inputs=(0, 1))
class Adagrad(_Optimizer):
    """One ADAGRAD step: inputs R, T, X..., G..., H...; outputs X_new..., H_new...."""

    groups = 3

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.norm = self.float_attr("norm_coefficient", 0.0)
        self.decay = self.float_attr("decay_factor", 0.0)
        self.eps = self.float_attr("epsilon", 1e-6)

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        r, t, (xs, gs, hs) = self.split(inputs)
        rate = r / (1.0 + t * self.decay)
        new_x, new_h = [], []
        for x, g, h in zip(xs, gs, hs):
            g_reg = self.norm * x + g
            h_new = self.narrow(h + g_reg * g_reg, h)
            new_x.append(self.narrow(x - rate * g_reg / (self.xp.sqrt(h_new) + self.eps), x))
            new_h.append(h_new)
        return (*new_x, *new_h)


@library.define("Momentum", 1, domain=_DOMAIN, types=_TYPES, host_inputs=(0, 1))
class Momentum(_Optimizer):
    """One SGD-with-momentum step (standard or Nesterov): R, T, X..., G..., V... in;
    X_new..., V_new... out."""

    groups = 3

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.norm = self.float_attr("norm_coefficient", None)
        self.alpha = self.float_attr("alpha", None)
        self.beta = self.float_attr("beta", None)
        mode = info.attr("mode")
        if mode not in ("standard", "nesterov"):
            raise InvalidGraph(f"{self.where()}: attribute 'mode' must be 'standard' or 'nesterov', got {mode!r}")
        self.nesterov = mode == "nesterov"

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        r, t, (xs, gs, vs) = self.split(inputs)
        beta = self.beta if t > 0 else 1.0
        new_x, new_v = [], []
        for x, g, v in zip(xs, gs, vs):
            g_reg = self.norm * x + g
            v_new = self.narrow(self.alpha * v + beta * g_reg, v)
            step = g_reg + self.alpha * v_new if self.nesterov else v_new
            new_x.append(self.narrow(x - r * step, x))
            new_v.append(v_new)
        return (*new_x, *new_v)


@library.define("Adam", 1, domain=_DOMAIN, types=_TYPES, host_inputs=(0, 1))
class Adam(_Optimizer):
    """One Adam step: R, T, X..., G..., V..., H... in; X_new..., V_new..., H_new... out."""

    groups = 4

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 0.9)
        self.beta = self.float_attr("beta", 0.999)
        self.eps = self.float_attr("epsilon", 1e-6)
        self.norm = self.float_attr("norm_coefficient", 0.0)
        self.norm_post = self.float_attr("norm_coefficient_post", 0.0)

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        r, t, (xs, gs, vs, hs) = self.split(inputs)
        if t > 0:
            r = r * float(np.sqrt(1.0 - self.beta**t)) / (1.0 - self.alpha**t)
        new_x, new_v, new_h = [], [], []
        for x, g, v, h in zip(xs, gs, vs, hs):
            g_reg = self.norm * x + g
            v_new = self.narrow(self.alpha * v + (1.0 - self.alpha) * g_reg, v)
            h_new = self.narrow(self.beta * h + (1.0 - self.beta) * g_reg * g_reg, h)
            x_new = x - r * v_new / (self.xp.sqrt(h_new) + self.eps)
            new_x.append(self.narrow((1.0 - self.norm_post) * x_new, x))
            new_v.append(v_new)
            new_h.append(h_new)
        return (*new_x, *new_v, *new_h)
