"""CPU kernels: the ai.onnx.preview.training optimizers Adam, Adagrad and Momentum.

Each node updates one or more tensors at once. After the scalar inputs ``R`` (learning rate)
and ``T`` (update count) come groups of equal size: the tensors ``X``, their gradients
``G`` and the optimizer's state (``H`` for Adagrad, ``V`` for Momentum, ``V`` then ``H``
for Adam), so ``n`` tensors make ``2 + k * n`` inputs. The outputs are the new ``X``
tensors followed by the new state tensors, group by group. The updates are evaluated in the
tensors' own dtype (float or double).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry

_DOMAIN = "ai.onnx.preview.training"
_TYPES = {"T1": (np.float32, np.float64), "T3": (np.float32, np.float64)}


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _float_attr(info: KernelInfo, name: str, default: float | None) -> float:
    value = info.attr(name, default)
    if value is None:
        raise InvalidGraph(f"{_node(info)}: required attribute {name!r} is missing")
    if not isinstance(value, (int, float)):
        raise InvalidGraph(f"{_node(info)}: attribute {name!r} must be a float, got {value!r}")
    return float(value)


class _Optimizer(Kernel):
    """Shared plumbing: split the variadic inputs into ``groups`` equal lists."""

    groups = 2

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        n_in = len(info.input_names) - 2
        if n_in <= 0 or n_in % self.groups:
            raise InvalidGraph(
                f"{_node(info)}: expects R, T and {self.groups} equal groups of tensors, "
                f"got {len(info.input_names)} inputs"
            )
        self.n = n_in // self.groups

    def _split(self, inputs: tuple[Any, ...]) -> tuple[float, int, list[list[np.ndarray]]]:
        r, t, *rest = inputs
        if len(rest) != self.groups * self.n:
            raise ValueError(f"{_node(self.info)}: got {len(inputs)} inputs")
        for x in rest:
            if x.dtype not in FLOAT_TYPES:
                raise ValueError(f"{_node(self.info)}: tensors must be float, got {x.dtype}")
        groups = [list(rest[i * self.n : (i + 1) * self.n]) for i in range(self.groups)]
        return float(np.asarray(r).reshape(())), int(np.asarray(t).reshape(())), groups


@registry.register("Adagrad", since=1, domain=_DOMAIN, types=_TYPES)
class Adagrad(_Optimizer):
    """One ADAGRAD step: inputs R, T, X..., G..., H...; outputs X_new..., H_new...."""

    groups = 3

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.norm = _float_attr(info, "norm_coefficient", 0.0)
        self.decay = _float_attr(info, "decay_factor", 0.0)
        self.eps = _float_attr(info, "epsilon", 1e-6)

    def compute(self, *inputs: Any) -> tuple[np.ndarray, ...]:
        r, t, (xs, gs, hs) = self._split(inputs)
        rate = r / (1.0 + t * self.decay)
        new_x, new_h = [], []
        for x, g, h in zip(xs, gs, hs):
            dt = x.dtype.type
            g_reg = dt(self.norm) * x + g
            h_new = (h + g_reg * g_reg).astype(h.dtype, copy=False)
            x_new = x - dt(rate) * g_reg / (np.sqrt(h_new) + dt(self.eps))
            new_x.append(x_new.astype(x.dtype, copy=False))
            new_h.append(h_new)
        return (*new_x, *new_h)


@registry.register("Momentum", since=1, domain=_DOMAIN, types=_TYPES)
class Momentum(_Optimizer):
    """One SGD-with-momentum step (standard or Nesterov): R, T, X..., G..., V... in;
    X_new..., V_new... out."""

    groups = 3

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.norm = _float_attr(info, "norm_coefficient", None)
        self.alpha = _float_attr(info, "alpha", None)
        self.beta = _float_attr(info, "beta", None)
        mode = info.attr("mode")
        if mode not in ("standard", "nesterov"):
            raise InvalidGraph(
                f"{_node(info)}: attribute 'mode' must be 'standard' or 'nesterov', got {mode!r}"
            )
        self.nesterov = mode == "nesterov"

    def compute(self, *inputs: Any) -> tuple[np.ndarray, ...]:
        r, t, (xs, gs, vs) = self._split(inputs)
        beta = self.beta if t > 0 else 1.0
        new_x, new_v = [], []
        for x, g, v in zip(xs, gs, vs):
            dt = x.dtype.type
            g_reg = dt(self.norm) * x + g
            v_new = (dt(self.alpha) * v + dt(beta) * g_reg).astype(v.dtype, copy=False)
            step = g_reg + dt(self.alpha) * v_new if self.nesterov else v_new
            new_x.append((x - dt(r) * step).astype(x.dtype, copy=False))
            new_v.append(v_new)
        return (*new_x, *new_v)


@registry.register("Adam", since=1, domain=_DOMAIN, types=_TYPES)
class Adam(_Optimizer):
    """One Adam step: R, T, X..., G..., V..., H... in; X_new..., V_new..., H_new... out."""

    groups = 4

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 0.9)
        self.beta = _float_attr(info, "beta", 0.999)
        self.eps = _float_attr(info, "epsilon", 1e-6)
        self.norm = _float_attr(info, "norm_coefficient", 0.0)
        self.norm_post = _float_attr(info, "norm_coefficient_post", 0.0)

    def compute(self, *inputs: Any) -> tuple[np.ndarray, ...]:
        r, t, (xs, gs, vs, hs) = self._split(inputs)
        if t > 0:
            r = r * np.sqrt(1.0 - self.beta**t) / (1.0 - self.alpha**t)
        new_x, new_v, new_h = [], [], []
        for x, g, v, h in zip(xs, gs, vs, hs):
            dt = x.dtype.type
            g_reg = dt(self.norm) * x + g
            v_new = (dt(self.alpha) * v + dt(1.0 - self.alpha) * g_reg).astype(v.dtype, copy=False)
            h_new = (dt(self.beta) * h + dt(1.0 - self.beta) * g_reg * g_reg).astype(
                h.dtype, copy=False
            )
            x_new = x - dt(r) * v_new / (np.sqrt(h_new) + dt(self.eps))
            x_new = dt(1.0 - self.norm_post) * x_new
            new_x.append(x_new.astype(x.dtype, copy=False))
            new_v.append(v_new)
            new_h.append(h_new)
        return (*new_x, *new_v, *new_h)
