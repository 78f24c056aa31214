"""The recurrent layers (RNN, GRU, LSTM), written once over an array namespace.

All three share :class:`_Recurrent`: attribute parsing (``hidden_size``, ``direction``,
``layout``, ``activations`` with ``activation_alpha``/``activation_beta``, ``clip``), input
checks and the per-direction loop. The input projection ``X W^T + Wb`` of every time step
(with the recurrence biases that sit outside the recurrence folded in) is one matmul; only
the recurrence runs step by step, vectorized over the batch. Both layouts are read and
written in place by indexing the time axis, so no transpose is made.

Variable sequence lengths (``sequence_lens``, a steering input read on the host): batch
entry ``b`` only runs its first ``sequence_lens[b]`` steps; its ``Y`` rows beyond are zero
and its ``Y_h``/``Y_c`` are the state after its last step (zeros for an entry of length 0,
as onnxruntime gives, not its initial state). The reverse direction walks the
time axis backwards with the same mask: an entry's padded steps come first and leave its
state untouched, so it runs its own valid prefix in reverse with no gather.

Gate layouts follow ONNX: GRU ``[z, r, h]``, LSTM ``[i, o, f, c]`` and peepholes
``[i, o, f]``; ``B`` is ``[Wb, Rb]``. float16/bfloat16 run in float32 and are rounded once
at the end. Bad attributes are :class:`~onyxrt.errors.InvalidGraph` naming the node; inputs
of the wrong shape are ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .library import OpKernel, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_Act = Callable[[Any], Any]


def _sigmoid(xp: Any) -> _Act:
    def sigmoid(x: Any) -> Any:
        # exp of a non-positive argument only: no overflow for large |x|.
        e = xp.exp(-xp.abs(x))
        r = 1.0 / (1.0 + e)
        return xp.where(x >= 0, r, e * r)

    return sigmoid


def _softplus(xp: Any) -> _Act:
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow (and no logaddexp, which
    # CuPy's simulated namespace lacks).
    return lambda x: xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x)))


# name (lower case) -> (number of parameters used, default alpha, default beta,
# factory of (namespace, alpha, beta)).
_ACTIVATIONS: dict[str, tuple[int, float, float, Callable[[Any, float, float], _Act]]] = {
    "sigmoid": (0, 0.0, 0.0, lambda xp, a, b: _sigmoid(xp)),
    "tanh": (0, 0.0, 0.0, lambda xp, a, b: xp.tanh),
    "relu": (0, 0.0, 0.0, lambda xp, a, b: lambda x: xp.maximum(x, 0.0)),
    "softsign": (0, 0.0, 0.0, lambda xp, a, b: lambda x: x / (1.0 + xp.abs(x))),
    "softplus": (0, 0.0, 0.0, lambda xp, a, b: _softplus(xp)),
    "leakyrelu": (1, 0.01, 0.0, lambda xp, a, b: lambda x: xp.where(x >= 0, x, a * x)),
    "thresholdedrelu": (1, 1.0, 0.0, lambda xp, a, b: lambda x: xp.where(x > a, x, 0.0)),
    "elu": (1, 1.0, 0.0, lambda xp, a, b: lambda x: xp.where(x >= 0, x, a * xp.expm1(x))),
    "affine": (2, 1.0, 0.0, lambda xp, a, b: lambda x: a * x + b),
    "scaledtanh": (2, 1.0, 1.0, lambda xp, a, b: lambda x: a * xp.tanh(b * x)),
    "hardsigmoid": (2, 0.2, 0.5, lambda xp, a, b: lambda x: xp.clip(a * x + b, 0.0, 1.0)),
}


class _Recurrent(OpKernel):
    """Shared RNN/GRU/LSTM machinery; subclasses define the gates and one time step."""

    #: Gates per direction (rows of W are ``gates * hidden_size``).
    gates = 1
    #: Default activations of one direction.
    default_activations: tuple[str, ...] = ("Tanh",)
    #: Whether the op has a cell state (LSTM: initial_c input and Y_c output).
    has_cell = False

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        hidden = info.attr("hidden_size")
        if not isinstance(hidden, int) or hidden < 1:
            raise InvalidGraph(f"{self.where()}: attribute 'hidden_size' must be a positive int")
        self.hidden = hidden
        direction = info.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise InvalidGraph(f"{self.where()}: direction must be forward, reverse or "
                               f"bidirectional, got {direction!r}")
        self.reverse = [direction == "reverse"] if direction != "bidirectional" else [False, True]
        self.num_dirs = len(self.reverse)
        self.layout = info.attr("layout", 0)
        if self.layout not in (0, 1):
            raise InvalidGraph(f"{self.where()}: layout must be 0 or 1, got {self.layout!r}")
        clip = info.attr("clip")
        if clip is not None and not clip > 0:
            raise InvalidGraph(f"{self.where()}: clip must be positive, got {clip!r}")
        self.clip = None if clip is None else float(clip)
        self.acts = self._parse_activations(info)

    def _parse_activations(self, info: KernelInfo) -> list[list[_Act]]:
        """One list of activation functions per direction (alpha/beta consumed in order)."""
        per_dir = len(self.default_activations)
        names = info.attr("activations")
        if names is None:
            names = list(self.default_activations) * self.num_dirs
        elif len(names) == per_dir and self.num_dirs == 2:
            names = list(names) * 2
        if len(names) != per_dir * self.num_dirs:
            raise InvalidGraph(f"{self.where()}: expected {per_dir * self.num_dirs} "
                               f"activations, got {len(names)}")
        alphas = list(info.attr("activation_alpha", []))
        betas = list(info.attr("activation_beta", []))
        funcs: list[_Act] = []
        for name in names:
            entry = _ACTIVATIONS.get(str(name).lower())
            if entry is None:
                raise InvalidGraph(f"{self.where()}: unsupported activation {name!r}")
            used, alpha, beta, make = entry
            if used >= 1 and alphas:
                alpha = alphas.pop(0)
            if used >= 2 and betas:
                beta = betas.pop(0)
            # A backend's own sigmoid/tanh (the CPU's: onnxruntime's exact float32 numerics).
            own = self.backend.extras.get(str(name).lower()) if used == 0 else None
            funcs.append(own if own is not None else make(self.xp, float(alpha), float(beta)))
        return [funcs[d * per_dir : (d + 1) * per_dir] for d in range(self.num_dirs)]

    def _clip(self, x: Any) -> Any:
        return x if self.clip is None else self.xp.clip(x, -self.clip, self.clip)

    # ---- subclass hooks

    def _prepare(self, d: int, r: Any, rb: Any, p: Any) -> tuple[Any, tuple[Any, ...]]:
        """Direction ``d``'s recurrence parameters for :meth:`_step`, and the part of the
        recurrence bias ``rb`` that can be added to the input projection once."""
        return rb, (r.T,)

    def _step(self, d: int, xw: Any, h: Any, c: Any, params: tuple[Any, ...]) -> tuple[Any, Any]:
        """One time step of direction ``d``: (new h, new c or None)."""
        raise NotImplementedError

    # ---- shared driver

    def _state(self, value: Any, name: str, batch: int, dtype: Any, d: int) -> Any:
        """Direction ``d``'s initial state (zeros when absent)."""
        if value is None:
            return self.xp.zeros((batch, self.hidden), dtype=dtype)
        shape = (self.num_dirs, batch, self.hidden) if self.layout == 0 else (batch, self.num_dirs, self.hidden)
        if tuple(value.shape) != shape:
            raise ValueError(f"{self.where()}: {name} must have shape {shape}, got {tuple(value.shape)}")
        s = value[d, ...] if self.layout == 0 else value[:, d, ...]
        return s if s.dtype == dtype else self.xp.astype(s, dtype)

    def _shaped(self, value: Any, name: str | None, shape: tuple[int, ...], dtype: Any) -> Any:
        """``value`` in ``dtype``, checked to have ``shape`` (when ``name`` is given)."""
        if name and tuple(value.shape) != shape:
            raise ValueError(f"{self.where()}: {name} must have shape {shape}, got {tuple(value.shape)}")
        return value if value.dtype == dtype else self.xp.astype(value, dtype)

    def _mask(self, sequence_lens: Any, seq: int, batch: int) -> tuple[Any, Any]:
        """``[seq, batch, 1]`` step-is-valid flags (None when every entry runs ``seq``
        steps), and ``[batch, 1]`` flags of the entries with no step at all (None when
        there are none): onnxruntime gives those zeros as final states, not the initial ones."""
        if sequence_lens is None:
            return None, None
        lens = self.host(sequence_lens).astype(np.int64).reshape(-1)
        if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
            raise ValueError(f"{self.where()}: sequence_lens must be {batch} values in [0, {seq}]")
        empty = self.xp.asarray((lens == 0)[:, None]) if (lens == 0).any() else None
        if (lens == seq).all():
            return None, empty
        return self.xp.asarray((np.arange(seq)[:, None] < lens)[..., None]), empty

    def compute(self, X, W, R, B=None, sequence_lens=None, initial_h=None, *rest):
        xp = self.xp
        initial_c = rest[0] if self.has_cell and rest else None
        P = rest[1] if self.has_cell and len(rest) > 1 else None
        x = self.widen(X)
        work = x.dtype
        if x.ndim != 3:
            raise ValueError(f"{self.where()}: X must have rank 3, got shape {tuple(x.shape)}")
        seq, batch = (x.shape[0], x.shape[1]) if self.layout == 0 else (x.shape[1], x.shape[0])
        hs, gh, dirs = self.hidden, self.gates * self.hidden, self.num_dirs
        if tuple(W.shape) != (dirs, gh, x.shape[2]) or tuple(R.shape) != (dirs, gh, hs):
            raise ValueError(f"{self.where()}: W {tuple(W.shape)} / R {tuple(R.shape)} do not match "
                             f"{dirs} direction(s), hidden_size {hs} and input size {x.shape[2]}")
        w, r = self._shaped(W, None, (), work), self._shaped(R, None, (), work)
        b = None if B is None else self._shaped(B, "B", (dirs, 2 * gh), work)
        p = None if P is None or not self.has_cell else self._shaped(P, "P", (dirs, 3 * hs), work)
        mask, empty = self._mask(sequence_lens, seq, batch)
        time_axis = self.layout  # of X and of each direction's Y: indexed, never transposed

        ys, y_hs, y_cs = [], [], []
        for d in range(dirs):
            rb = xp.zeros((gh,), dtype=work) if b is None else b[d, gh:]
            folded, params = self._prepare(d, r[d, ...], rb, None if p is None else p[d, ...])
            xw = xp.matmul(x, w[d, ...].T) + (folded if b is None else b[d, :gh] + folded)
            h = self._state(initial_h, "initial_h", batch, work, d)
            c = self._state(initial_c, "initial_c", batch, work, d) if self.has_cell else None
            out: list[Any] = [None] * seq
            zero = None if mask is None else xp.zeros_like(h)
            for t in (range(seq - 1, -1, -1) if self.reverse[d] else range(seq)):
                h_new, c_new = self._step(d, xw[t, ...] if time_axis == 0 else xw[:, t, ...], h, c, params)
                if mask is None:
                    h, c = h_new, c_new
                    out[t] = h_new
                else:
                    m = mask[t, ...]
                    h = xp.where(m, h_new, h)
                    c = None if c is None else xp.where(m, c_new, c)
                    out[t] = xp.where(m, h_new, zero)
            ys.append(xp.stack(out, axis=time_axis) if seq else
                      xp.zeros((0, batch, hs) if time_axis == 0 else (batch, 0, hs), dtype=work))
            if empty is not None:
                h = xp.where(empty, 0.0, h)
                c = None if c is None else xp.where(empty, 0.0, c)
            y_hs.append(h)
            y_cs.append(c)
        # Y: [seq, dirs, batch, hidden] (layout 0) or [batch, seq, dirs, hidden] (layout 1);
        # Y_h and Y_c: [dirs, batch, hidden] or [batch, dirs, hidden].
        outs = [xp.stack(ys, axis=time_axis + 1), xp.stack(y_hs, axis=self.layout)]
        if self.has_cell:
            outs.append(xp.stack(y_cs, axis=self.layout))
        return tuple(self.narrow(o, X) for o in outs)


@library.define("RNN", (1, 7, 14, 22), types={"T": FLOAT_TYPES}, host_inputs=(4,))
class RNN(_Recurrent):
    """Elman RNN: ``H = f(X W^T + H R^T + Wb + Rb)``."""

    def _step(self, d, xw, h, c, params):
        (rt,) = params
        return self.acts[d][0](self._clip(xw + h @ rt)), None


@library.define("GRU", (1, 3, 7, 14, 22), types={"T": FLOAT_TYPES}, host_inputs=(4,))
class GRU(_Recurrent):
    """Gated recurrent unit (gates z, r, h), with or without ``linear_before_reset``."""

    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.linear_before_reset = self.flag_attr("linear_before_reset", 0)

    def _prepare(self, d, r, rb, p):
        hs = self.hidden
        if self.linear_before_reset:
            # Rbh sits inside the reset gate's product: only Rbz and Rbr fold.
            folded = self.xp.where(self.xp.arange(3 * hs) < 2 * hs, rb, 0.0)
            return folded, (r[: 2 * hs, :].T, r[2 * hs :, :].T, rb[2 * hs :])
        return rb, (r[: 2 * hs, :].T, r[2 * hs :, :].T, None)

    def _step(self, d, xw, h, c, params):
        rzr_t, rh_t, rbh = params
        f, g = self.acts[d]
        hs = self.hidden
        zr = f(self._clip(xw[:, : 2 * hs] + h @ rzr_t))
        z, r = zr[:, :hs], zr[:, hs:]
        if rbh is not None:
            cand = xw[:, 2 * hs :] + r * (h @ rh_t + rbh)
        else:
            cand = xw[:, 2 * hs :] + (r * h) @ rh_t
        hh = g(self._clip(cand))
        return (1.0 - z) * hh + z * h, None


@library.define("LSTM", (1, 7, 14, 22), types={"T": FLOAT_TYPES}, host_inputs=(4,))
class LSTM(_Recurrent):
    """Long short-term memory (gates i, o, f, c), with peepholes and ``input_forget``."""

    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    has_cell = True

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.input_forget = self.flag_attr("input_forget", 0)

    def _prepare(self, d, r, rb, p):
        hs = self.hidden
        peep = (None, None, None) if p is None else (p[:hs], p[hs : 2 * hs], p[2 * hs :])
        return rb, (r.T, *peep)

    def _step(self, d, xw, h, c, params):
        rt, pi, po, pf = params
        f, g, hact = self.acts[d]
        hs = self.hidden
        gates = xw + h @ rt
        gi, go, gf, gc = (gates[:, k * hs : (k + 1) * hs] for k in range(4))
        if pi is not None:
            gi = gi + pi * c
            gf = gf + pf * c
        i = f(self._clip(gi))
        fg = 1.0 - i if self.input_forget else f(self._clip(gf))
        c_new = fg * c + i * g(self._clip(gc))
        if po is not None:
            go = go + po * c_new
        o = f(self._clip(go))
        return o * hact(c_new), c_new
