"""CPU overrides of the recurrent layers (RNN, GRU, LSTM) of the operator library
(:mod:`onyxrt_ops.recurrent`): float32 layers with their default activations run the
recurrence compiled (``csrc/recurrent.c`` through :func:`..native.recurrent`); every other
case (other activations, float16/bfloat16, no compiled module) is the library's kernel.

Both paths make the input projections of all steps one GEMM per direction, with the
recurrence biases that sit outside the recurrence folded in; the library then runs each
step as a matmul and a dozen numpy calls (~20 µs of overhead per step before any
arithmetic), the compiled path as one GEMV and the fused gate math per batch row, with
directions and batch rows on the pool's threads. The gates' Sigmoid and Tanh are
onnxruntime's (the same functions the library takes from the CPU backend), so the two
paths differ only in the summation order of the products (a constant W goes to the
compiled GEMM, packed at creation, where AVX-512 makes it the faster one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND

__all__ = ["RNN", "GRU", "LSTM"]

_F32 = np.dtype(np.float32)


class _CompiledRecurrence:
    """``compute`` through :func:`native.recurrent` where it applies, the library's
    otherwise (mixed in before the library's kernel class below)."""

    #: :func:`native.recurrent`'s cell code.
    cell: int

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)  # type: ignore[call-arg]
        names = info.attr("activations")
        default = [a.lower() for a in self.default_activations]  # type: ignore[attr-defined]
        self._compiled_ok = native.RECURRENT and (
            names is None or [str(n).lower() for n in names] in (default, default * 2)
        )
        self._r_source = info.constant(2)
        self._rt: np.ndarray | None = None
        r = self._r_source
        if self._compiled_ok and isinstance(r, np.ndarray) and r.dtype == _F32 and r.ndim == 3:
            self._packed_r(r)  # at creation, not in the first run
        # A constant W packed per direction for the compiled GEMM, which adds the folded
        # biases tile by tile (LSTM encoder, hidden 256, 512 inputs: 1.21 ms a direction
        # for matmul and the bias pass, 1.03 packed), and the folded biases of a constant
        # B and R made once.
        self._w_source, self._b_source = info.constant(1), info.constant(3)
        self._w_packed: list[native.PackedMatrix] | None = None
        self._bias_cache: tuple[np.ndarray | None, np.ndarray | None] | None = None
        w = self._w_source
        if self._compiled_ok and native.GEMM_PREFERRED and isinstance(w, np.ndarray) and w.dtype == _F32 \
                and w.ndim == 3:
            packed = [native.pack_gemm_b(np.ascontiguousarray(w[d].T)) for d in range(w.shape[0])]
            self._w_packed = packed if all(p is not None for p in packed) else None  # type: ignore[assignment]

    def compute(self, X, W, R, B=None, sequence_lens=None, initial_h=None, *rest):
        if self._compiled_ok:
            outs = self._compiled(X, W, R, B, sequence_lens, initial_h, *rest)
            if outs is not None:
                return outs
        return super().compute(X, W, R, B, sequence_lens, initial_h, *rest)  # type: ignore[misc]

    # ---- the compiled path

    def _compiled(self, X, W, R, B, sequence_lens, initial_h, initial_c=None, P=None):
        """The outputs, or None when the compiled path does not take this call (the
        library's kernel then runs it, and raises where the inputs are wrong)."""
        hs, dirs, layout = self.hidden, self.num_dirs, self.layout  # type: ignore[attr-defined]
        gh = self.gates * hs  # type: ignore[attr-defined]
        if X.dtype != _F32 or X.ndim != 3 or any(a is not None and a.dtype != _F32
                                                for a in (W, R, B, initial_h, initial_c, P)):
            return None
        x = X if layout == 0 else X.transpose(1, 0, 2)
        seq, batch, inputs = x.shape
        state_shape = (dirs, batch, hs) if layout == 0 else (batch, dirs, hs)
        if (batch == 0 or W.shape != (dirs, gh, inputs) or R.shape != (dirs, gh, hs)
                or (B is not None and B.shape != (dirs, 2 * gh))
                or any(s is not None and s.shape != state_shape for s in (initial_h, initial_c))
                or (P is not None and P.shape != (dirs, 3 * hs))):
            return None
        lens = None
        if sequence_lens is not None:
            lens = np.ascontiguousarray(np.asarray(sequence_lens).reshape(-1), dtype=np.int64)
            if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
                return None
            if seq and (lens == seq).all():
                lens = None

        constant_bias = R is self._r_source and B is self._b_source
        if constant_bias and self._bias_cache is not None:
            bias, rbh = self._bias_cache
        else:
            bias, rbh = self._biases(R, B, dirs, gh)
            if constant_bias:
                self._bias_cache = (bias, rbh)
        xw = np.empty((dirs, seq, batch, gh), _F32)
        rows = x.reshape(seq * batch, inputs)
        packed = self._w_packed if W is self._w_source and native.compiled_gemm_wins(seq * batch, inputs, gh) else None
        for d in range(dirs):
            out = xw[d].reshape(seq * batch, gh)
            if packed is not None and native.gemm(rows, packed[d], out, None, None if bias is None else bias[d]):
                continue
            np.matmul(rows, W[d].T, out=out)
            if bias is not None:
                out += bias[d]
        h = self._initial_state(initial_h, dirs, batch, hs, layout)
        c = self._initial_state(initial_c, dirs, batch, hs, layout) if self.has_cell else None  # type: ignore[attr-defined]
        y = np.empty((dirs, seq, batch, hs), _F32)
        reverse = sum(1 << d for d, back in enumerate(self.reverse) if back)  # type: ignore[attr-defined]
        done = native.recurrent(
            self.cell, xw, self._packed_r(R), h, c, y, split=self._split(),
            peepholes=None if P is None else np.ascontiguousarray(P),
            rbh=rbh, lens=lens, reverse=reverse, clip=self.clip or 0.0,  # type: ignore[attr-defined]
            input_forget=bool(getattr(self, "input_forget", 0)),
        )
        if not done:
            return None
        # Y: [seq, dirs, batch, hidden] (layout 0) or [batch, seq, dirs, hidden] (layout 1);
        # Y_h and Y_c: [dirs, batch, hidden] or [batch, dirs, hidden].
        order = (1, 0, 2, 3) if layout == 0 else (2, 1, 0, 3)
        outs = [np.ascontiguousarray(y.transpose(order))]
        for s in (h, c) if c is not None else (h,):
            outs.append(s if layout == 0 else np.ascontiguousarray(s.transpose(1, 0, 2)))
        return tuple(outs)

    def _biases(
        self, R: np.ndarray, B: np.ndarray | None, dirs: int, gh: int
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(the biases folded into the input projection [dirs, G], GRU's recurrence bias
        of the candidate when it stays inside the reset gate's product [dirs, hidden]).
        Which recurrence biases fold is the library's rule (its ``_prepare``), as is where
        GRU keeps the candidate's: the third of its step parameters."""
        if B is None:
            return None, None
        folded, inside = [], []
        for d in range(dirs):
            rb, params = self._prepare(d, R[d], B[d, gh:], None)  # type: ignore[attr-defined]
            folded.append(B[d, :gh] + rb)
            inside.append(params[2] if self.cell == native.CELL_GRU else None)
        rbh = None if inside[0] is None else np.ascontiguousarray(np.stack(inside), dtype=_F32)
        return np.stack(folded), rbh

    @staticmethod
    def _initial_state(value: np.ndarray | None, dirs: int, batch: int, hs: int, layout: int) -> np.ndarray:
        """An initial state as a fresh [dirs, batch, hidden] array (zeros when absent)."""
        if value is None:
            return np.zeros((dirs, batch, hs), _F32)
        return np.array(value if layout == 0 else value.transpose(1, 0, 2), dtype=_F32, order="C")

    def _split(self) -> int:
        """Where R^T's columns are cut in two (see :func:`native.recurrent_panels`): GRU
        without ``linear_before_reset`` multiplies its candidate's block by ``r * h``, not
        by ``h``."""
        gh = self.gates * self.hidden  # type: ignore[attr-defined]
        if self.cell == native.CELL_GRU and not getattr(self, "linear_before_reset", 0):
            return 2 * self.hidden  # type: ignore[attr-defined]
        return gh

    def _packed_r(self, R: np.ndarray) -> np.ndarray:
        """R^T per direction in :func:`native.recurrent_panels`' layout, made once for a
        constant R."""
        if self._rt is not None and R is self._r_source:
            return self._rt
        rt = native.recurrent_panels(R.transpose(0, 2, 1), self._split())
        if R is self._r_source:
            self._rt = rt
        return rt


def _recurrent_kernel(op: str) -> Any:
    return library.kernel(op, 22, BACKEND)


@registry.register("RNN", since=(1, 7, 14, 22))
class RNN(_CompiledRecurrence, _recurrent_kernel("RNN")):
    """Elman RNN; Tanh recurrences in float32 compiled."""

    cell = native.CELL_RNN


@registry.register("GRU", since=(1, 3, 7, 14, 22))
class GRU(_CompiledRecurrence, _recurrent_kernel("GRU")):
    """GRU; Sigmoid/Tanh recurrences in float32 compiled (either linear_before_reset)."""

    cell = native.CELL_GRU


@registry.register("LSTM", since=(1, 7, 14, 22))
class LSTM(_CompiledRecurrence, _recurrent_kernel("LSTM")):
    """LSTM; Sigmoid/Tanh/Tanh recurrences in float32 compiled (peepholes, input_forget,
    clip and sequence lengths included)."""

    cell = native.CELL_LSTM
