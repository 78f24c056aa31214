"""CPU kernels: recurrent layers (RNN, GRU, LSTM).

All three share the plumbing in :class:`_Recurrent`: attribute parsing (``hidden_size``,
``direction``, ``layout``, ``activations`` with ``activation_alpha``/``activation_beta``,
``clip``), layout transposes, ``sequence_lens`` masking and the per-direction loop. The input
projection ``X @ W^T + Wb`` of every time step is one matmul; only the recurrence runs step
by step, vectorized over the batch.

Variable sequence lengths: batch entry ``b`` only runs its first ``sequence_lens[b]`` steps;
its ``Y`` rows beyond that are zero and its ``Y_h``/``Y_c`` are the state after its last
step. The reverse direction walks each entry's own valid prefix backwards: the prefix is
reversed (a per-entry gather), run forward, and the outputs are reversed back.

Gate layouts follow ONNX: GRU ``[z, r, h]``, LSTM ``[i, o, f, c]`` and peepholes
``[i, o, f]``; ``B`` is ``[Wb, Rb]``. float16/bfloat16 run in float32 and are cast back.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry

_Act = Callable[[np.ndarray], np.ndarray]


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a non-positive argument only: no overflow for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, 0).astype(x.dtype, copy=False)


# name (lower case) -> (number of parameters used, default alpha, default beta, factory)
_ACTIVATIONS: dict[str, tuple[int, float, float, Callable[[float, float], _Act]]] = {
    "sigmoid": (0, 0.0, 0.0, lambda a, b: _sigmoid),
    "tanh": (0, 0.0, 0.0, lambda a, b: np.tanh),
    "relu": (0, 0.0, 0.0, lambda a, b: lambda x: np.maximum(x, 0)),
    "softsign": (0, 0.0, 0.0, lambda a, b: lambda x: x / (1 + np.abs(x))),
    "softplus": (0, 0.0, 0.0, lambda a, b: _softplus),
    "leakyrelu": (1, 0.01, 0.0, lambda a, b: lambda x: np.where(x >= 0, x, a * x)),
    "thresholdedrelu": (1, 1.0, 0.0, lambda a, b: lambda x: np.where(x > a, x, 0)),
    "elu": (1, 1.0, 0.0, lambda a, b: lambda x: np.where(x >= 0, x, a * np.expm1(x))),
    "affine": (2, 1.0, 0.0, lambda a, b: lambda x: a * x + b),
    "scaledtanh": (2, 1.0, 1.0, lambda a, b: lambda x: a * np.tanh(b * x)),
    "hardsigmoid": (2, 0.2, 0.5, lambda a, b: lambda x: np.clip(a * x + b, 0, 1)),
}


def _typed(fn: _Act) -> _Act:
    """``fn`` with its result cast back to the argument's dtype (python floats promote)."""
    return lambda x: np.asarray(fn(x)).astype(x.dtype, copy=False)


class _Recurrent(Kernel):
    """Shared RNN/GRU/LSTM machinery; subclasses define the gates and one time step."""

    #: Gates per direction (rows of W are ``gates * hidden_size``).
    gates = 1
    #: Default activations of one direction.
    default_activations: tuple[str, ...] = ("Tanh",)
    #: Whether the op has a cell state (LSTM: initial_c input and Y_c output).
    has_cell = False

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        node = _node(info)
        hidden = info.attr("hidden_size")
        if not isinstance(hidden, int) or hidden < 1:
            raise InvalidGraph(f"{node}: attribute 'hidden_size' must be a positive int")
        self.hidden = hidden
        direction = info.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise InvalidGraph(
                f"{node}: direction must be forward, reverse or bidirectional, got {direction!r}"
            )
        self.reverse = [direction == "reverse"] if direction != "bidirectional" else [False, True]
        self.num_dirs = len(self.reverse)
        self.layout = info.attr("layout", 0)
        if self.layout not in (0, 1):
            raise InvalidGraph(f"{node}: layout must be 0 or 1, got {self.layout!r}")
        clip = info.attr("clip")
        if clip is not None and not clip > 0:
            raise InvalidGraph(f"{node}: clip must be positive, got {clip!r}")
        self.clip = None if clip is None else float(clip)
        self.acts = self._parse_activations(info)

    def _parse_activations(self, info: KernelInfo) -> list[list[_Act]]:
        """One list of activation functions per direction (alpha/beta consumed in order)."""
        node = _node(info)
        per_dir = len(self.default_activations)
        names = info.attr("activations")
        if names is None:
            names = list(self.default_activations) * self.num_dirs
        elif len(names) == per_dir and self.num_dirs == 2:
            names = list(names) * 2
        if len(names) != per_dir * self.num_dirs:
            raise InvalidGraph(
                f"{node}: expected {per_dir * self.num_dirs} activations, got {len(names)}"
            )
        alphas = list(info.attr("activation_alpha", []))
        betas = list(info.attr("activation_beta", []))
        funcs: list[_Act] = []
        for name in names:
            entry = _ACTIVATIONS.get(str(name).lower())
            if entry is None:
                raise InvalidGraph(f"{node}: unsupported activation {name!r}")
            used, alpha, beta, make = entry
            if used >= 1 and alphas:
                alpha = alphas.pop(0)
            if used >= 2 and betas:
                beta = betas.pop(0)
            funcs.append(_typed(make(alpha, beta)))
        return [funcs[d * per_dir : (d + 1) * per_dir] for d in range(self.num_dirs)]

    def _clip(self, x: np.ndarray) -> np.ndarray:
        return x if self.clip is None else np.clip(x, -self.clip, self.clip)

    # ---- subclass hooks

    def _step(self, d: int, xw: np.ndarray, h: np.ndarray, c: np.ndarray | None, params):
        """One time step of direction ``d``: (new h, new c or None)."""
        raise NotImplementedError

    def _params(self, d: int, r: np.ndarray, rb: np.ndarray, p: np.ndarray | None):
        """Per-direction recurrence parameters handed to :meth:`_step` (prepacked once)."""
        return r.T, rb

    # ---- shared driver

    def _state(self, value, name: str, batch: int, dtype: np.dtype) -> np.ndarray:
        shape = (self.num_dirs, batch, self.hidden)
        if value is None:
            return np.zeros(shape, dtype=dtype)
        s = np.asarray(value).astype(dtype, copy=False)
        if self.layout == 1:
            s = s.transpose(1, 0, 2)
        if s.shape != shape:
            raise ValueError(f"{self.info.op_type}: {name} must have shape {shape}, got {s.shape}")
        return s

    def compute(self, X, W, R, B=None, sequence_lens=None, initial_h=None, *rest):
        op = self.info.op_type
        initial_c = rest[0] if self.has_cell and rest else None
        P = rest[1] if self.has_cell and len(rest) > 1 else None
        x = np.asarray(X)
        out_dtype = x.dtype
        work = np.dtype(np.float64) if out_dtype == np.float64 else np.dtype(np.float32)
        x = x.astype(work, copy=False)
        if x.ndim != 3:
            raise ValueError(f"{op}: X must have rank 3, got shape {x.shape}")
        if self.layout == 1:
            x = x.transpose(1, 0, 2)
        seq, batch, _ = x.shape
        hs, gh = self.hidden, self.gates * self.hidden
        w = np.asarray(W).astype(work, copy=False)
        r = np.asarray(R).astype(work, copy=False)
        if w.shape != (self.num_dirs, gh, x.shape[2]) or r.shape != (self.num_dirs, gh, hs):
            raise ValueError(
                f"{op}: W {w.shape} / R {r.shape} do not match {self.num_dirs} direction(s), "
                f"hidden_size {hs} and input size {x.shape[2]}"
            )
        b = (
            np.zeros((self.num_dirs, 2 * gh), dtype=work)
            if B is None
            else np.asarray(B).astype(work, copy=False)
        )
        if b.shape != (self.num_dirs, 2 * gh):
            raise ValueError(f"{op}: B must have shape {(self.num_dirs, 2 * gh)}, got {b.shape}")
        p = None
        if self.has_cell and P is not None:
            p = np.asarray(P).astype(work, copy=False)
            if p.shape != (self.num_dirs, 3 * hs):
                raise ValueError(f"{op}: P must have shape {(self.num_dirs, 3 * hs)}")
        h0 = self._state(initial_h, "initial_h", batch, work)
        c0 = self._state(initial_c, "initial_c", batch, work) if self.has_cell else None

        t = np.arange(seq)[:, None]
        cols = np.arange(batch)
        if sequence_lens is None:
            lens = np.full(batch, seq, dtype=np.int64)
        else:
            lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
            if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
                raise ValueError(f"{op}: sequence_lens must be {batch} values in [0, {seq}]")
        ragged = bool((lens != seq).any())
        mask = (t < lens)[..., None]  # [seq, batch, 1]
        # Per-entry reversal of the valid prefix (an involution: it also undoes itself).
        rev = np.where(t < lens, lens - 1 - t, t)

        y = np.zeros((seq, self.num_dirs, batch, hs), dtype=work)
        y_h = np.empty((self.num_dirs, batch, hs), dtype=work)
        y_c = np.empty((self.num_dirs, batch, hs), dtype=work) if self.has_cell else None
        for d in range(self.num_dirs):
            xd = x[rev, cols] if self.reverse[d] else x
            xw = np.matmul(xd, w[d].T) + b[d, :gh]  # [seq, batch, gates*hidden]
            params = self._params(d, r[d], b[d, gh:], None if p is None else p[d])
            h = h0[d]
            c = None if c0 is None else c0[d]
            yd = np.zeros((seq, batch, hs), dtype=work)
            for step in range(seq):
                h_new, c_new = self._step(d, xw[step], h, c, params)
                if ragged:
                    m = mask[step]
                    h = np.where(m, h_new, h)
                    if c is not None:
                        c = np.where(m, c_new, c)
                    yd[step] = np.where(m, h_new, 0)
                else:
                    h, c = h_new, c_new
                    yd[step] = h_new
            y[:, d] = yd[rev, cols] if self.reverse[d] else yd
            y_h[d] = h
            if y_c is not None:
                y_c[d] = c
        if self.layout == 1:
            y = y.transpose(2, 0, 1, 3)
            y_h = y_h.transpose(1, 0, 2)
            y_c = None if y_c is None else y_c.transpose(1, 0, 2)
        outs = [y.astype(out_dtype), y_h.astype(out_dtype)]
        if y_c is not None:
            outs.append(y_c.astype(out_dtype))
        return tuple(outs)


@registry.register("RNN", since=(1, 7, 14, 22), types={"T": FLOAT_TYPES})
class RNN(_Recurrent):
    """Elman RNN: ``H = f(X W^T + H R^T + Wb + Rb)``."""

    def _step(self, d, xw, h, c, params):
        rt, rb = params
        return self.acts[d][0](self._clip(xw + h @ rt + rb)), None


@registry.register("GRU", since=(1, 3, 7, 14, 22), types={"T": FLOAT_TYPES})
class GRU(_Recurrent):
    """Gated recurrent unit (gates z, r, h), with or without ``linear_before_reset``."""

    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        lbr = info.attr("linear_before_reset", 0)
        if lbr not in (0, 1):
            raise InvalidGraph(f"{_node(info)}: linear_before_reset must be 0 or 1, got {lbr!r}")
        self.linear_before_reset = bool(lbr)

    def _params(self, d, r, rb, p):
        hs = self.hidden
        return r[: 2 * hs].T, rb[: 2 * hs], r[2 * hs :].T, rb[2 * hs :]

    def _step(self, d, xw, h, c, params):
        rzr_t, rbzr, rh_t, rbh = params
        f, g = self.acts[d]
        hs = self.hidden
        zr = f(self._clip(xw[:, : 2 * hs] + h @ rzr_t + rbzr))
        z, r = zr[:, :hs], zr[:, hs:]
        if self.linear_before_reset:
            cand = xw[:, 2 * hs :] + r * (h @ rh_t + rbh)
        else:
            cand = xw[:, 2 * hs :] + (r * h) @ rh_t + rbh
        hh = g(self._clip(cand))
        return (1 - z) * hh + z * h, None


@registry.register("LSTM", since=(1, 7, 14, 22), types={"T": FLOAT_TYPES})
class LSTM(_Recurrent):
    """Long short-term memory (gates i, o, f, c), with peepholes and ``input_forget``."""

    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    has_cell = True

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        coupled = info.attr("input_forget", 0)
        if coupled not in (0, 1):
            raise InvalidGraph(f"{_node(info)}: input_forget must be 0 or 1, got {coupled!r}")
        self.input_forget = bool(coupled)

    def _params(self, d, r, rb, p):
        hs = self.hidden
        peep = (None, None, None) if p is None else (p[:hs], p[hs : 2 * hs], p[2 * hs :])
        return (r.T, rb, *peep)

    def _step(self, d, xw, h, c, params):
        rt, rb, pi, po, pf = params
        f, g, hact = self.acts[d]
        hs = self.hidden
        gates = xw + h @ rt + rb
        gi, go, gf, gc = (gates[:, k * hs : (k + 1) * hs] for k in range(4))
        if pi is not None:
            gi = gi + pi * c
            gf = gf + pf * c
        i = f(self._clip(gi))
        fg = 1 - i if self.input_forget else f(self._clip(gf))
        c_new = fg * c + i * g(self._clip(gc))
        if po is not None:
            go = go + po * c_new
        o = f(self._clip(go))
        return o * hact(c_new), c_new
