"""The spectral operators (DFT, STFT, MelWeightMatrix), written once over an array namespace.

ONNX carries complex values as a trailing dimension of size 2 (real, imaginary); real
signals have a trailing dimension of size 1. The transforms make complex arrays of the
namespace, use its ``fft`` extension (the array API standard's optional ``xp.fft``:
``fft``, ``ifft``, ``irfft``) and split the result back. float16/bfloat16 data are
computed in float32 and rounded once at the end; float32 stays single precision and
float64 double.

DFT-17 takes ``axis`` as an attribute (default 1), DFT-20 as an optional scalar input
(default -2); both count negative axes from the back of the full rank (the complex
dimension included), so the valid range is ``[-r, -2]`` and ``[0, r-2]``. Steering inputs
(DFT's ``dft_length`` and ``axis``, STFT's ``frame_step`` and ``frame_length``, every
input of MelWeightMatrix) are read on the host.

The standard makes ``xp.fft`` optional: over a namespace without it (the simulated CuPy)
DFT and STFT transform with ``numpy.fft`` on the host and hand the result to the backend.
MelWeightMatrix is computed on the host (a small table of its scalar inputs) and handed to
the backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES, np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .library import OpKernel, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []


def _scalar_int(op: str, name: str, value: np.ndarray) -> int:
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ValueError(f"{op}: input {name!r} must hold one integer, got {value.dtype} of "
                         f"shape {value.shape}")
    return int(value.reshape(-1)[0])


def _scalar_float(op: str, name: str, value: np.ndarray) -> float:
    if value.size != 1:
        raise ValueError(f"{op}: input {name!r} must be a scalar, got shape {value.shape}")
    return float(value.reshape(-1)[0].astype(np.float64))


class _Spectral(OpKernel):
    """The complex <-> ``[..., 2]`` conversions of DFT and STFT. Casts go through
    ``xp.asarray(x, dtype=...)``: the same conversion as ``xp.astype``, without numpy's
    Python-level overhead (a sizeable part of a small transform)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fft = getattr(self.xp, "fft", None)
        self.float32, self.float64 = self.backend.dtype(np.float32), self.backend.dtype(np.float64)
        self.complex64, self.complex128 = (self.backend.dtype(t) for t in (np.complex64, np.complex128))

    def transform(self, name: str, z: Any, **kwargs: Any) -> Any:
        """``xp.fft.<name>(z, **kwargs)``; where the namespace has no fft extension, numpy's
        on the host, whose result stays there until :meth:`from_complex` hands it over."""
        if self.fft is not None:
            return getattr(self.fft, name)(z, **kwargs)
        return getattr(np.fft, name)(self.host(z), **kwargs)

    def to_complex(self, x: Any) -> Any:
        """``[..., 1]`` or ``[..., 2]`` → a complex array of shape ``[...]`` (complex128 for
        float64, else complex64)."""
        if x.ndim < 1 or x.shape[-1] not in (1, 2):
            raise ValueError(f"{self.info.op_type}: the last dimension must be 1 (real) or 2 "
                             f"(complex), got shape {tuple(x.shape)}")
        # Half types widen to float32 (asarray: numpy's astype costs more per call).
        xf = x if x.dtype in (self.float32, self.float64) else self.xp.asarray(x, dtype=self.float32)
        if x.shape[-1] == 2:
            return xf[..., 0] + xf[..., 1] * 1j  # a complex scalar makes the matching complex type
        return self.xp.asarray(xf[..., 0], dtype=self.complex128 if xf.dtype == self.float64 else self.complex64)

    def from_complex(self, z: Any, like: Any) -> Any:
        """Complex ``[...]`` (a :meth:`transform` result) → ``[..., 2]`` in ``like``'s dtype."""
        xp = self.xp if self.fft is not None else np
        return self.xp.asarray(xp.stack([xp.real(z), xp.imag(z)], axis=-1), dtype=like.dtype)


@library.define("DFT", (17, 20), types={"T1": FLOAT_TYPES}, host_inputs=(1, 2))
class DFT(_Spectral):
    """Discrete Fourier transform (full, inverse, one-sided RFFT and IRFFT) along one axis."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.inverse = self.flag_attr("inverse", 0)
        self.onesided = self.flag_attr("onesided", 0)
        self.axis_attr: int | None = None
        if info.since_version < 20:
            axis = info.attr("axis", 1)
            if not isinstance(axis, int):
                raise InvalidGraph(f"{self.where()}: attribute 'axis' must be an int")
            self.axis_attr = axis

    def compute(self, input, dft_length=None, axis=None):
        op = self.info.op_type
        rank = input.ndim
        if self.axis_attr is not None:
            ax = self.axis_attr
        else:
            ax = -2 if axis is None else _scalar_int(op, "axis", self.host(axis))
        if not (-rank <= ax <= -2 or 0 <= ax <= rank - 2):
            raise ValueError(f"{op}: axis {ax} is out of range for an input of rank {rank}")
        ax = ax + rank if ax < 0 else ax
        z = self.to_complex(input)
        n = None if dft_length is None else _scalar_int(op, "dft_length", self.host(dft_length))
        if n is not None and n < 1:
            raise ValueError(f"{op}: dft_length must be positive, got {n}")
        if self.inverse and self.onesided:  # IRFFT: one-sided spectrum -> real signal
            y = self.transform("irfft", z, n=2 * (z.shape[ax] - 1) if n is None else n, axis=ax)
            return (self.xp.asarray(y[..., None], dtype=input.dtype),)
        y = self.transform("ifft" if self.inverse else "fft", z, n=n, axis=ax)
        if self.onesided:  # RFFT: keep the non-redundant half
            index = [slice(None)] * y.ndim
            index[ax] = slice(0, y.shape[ax] // 2 + 1)
            y = y[tuple(index)]
        return (self.from_complex(y, input),)


@library.define("STFT", 17, types={"T1": FLOAT_TYPES}, host_inputs=(1, 3))
class STFT(_Spectral):
    """Short-time Fourier transform: windowed frames of the signal, each transformed."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.onesided = self.flag_attr("onesided", 1)

    def compute(self, signal, frame_step, window=None, frame_length=None):
        op, xp = self.info.op_type, self.xp
        x = signal
        if x.ndim == 2:
            # [batch, length]: a real signal without its trailing axis. The spec asks for
            # rank 3, but onnxruntime takes this and exported audio front ends rely on it.
            x = xp.expand_dims(x, axis=-1)
        if x.ndim != 3:
            raise ValueError(f"{op}: signal must have rank 3 ([batch, length, 1 or 2]) or 2 "
                             f"([batch, length], real), got shape {tuple(x.shape)}")
        z = self.to_complex(x)  # [batch, signal_length]
        length = z.shape[1]
        step = _scalar_int(op, "frame_step", self.host(frame_step))
        if step < 1:
            raise ValueError(f"{op}: frame_step must be positive, got {step}")
        if window is not None and window.ndim != 1:
            raise ValueError(f"{op}: window must be 1-D, got shape {tuple(window.shape)}")
        if frame_length is not None:
            n = _scalar_int(op, "frame_length", self.host(frame_length))
            if window is not None and window.shape[0] != n:
                raise ValueError(f"{op}: window length {window.shape[0]} differs from frame_length {n}")
        else:
            n = length if window is None else window.shape[0]
        if not 1 <= n <= length:
            raise ValueError(f"{op}: frame length {n} must be in [1, {length}]")
        frames = (length - n) // step + 1
        index = (np.arange(frames)[:, None] * step + np.arange(n)).reshape(-1)
        framed = xp.reshape(xp.take(z, xp.asarray(index), axis=1), (z.shape[0], frames, n))
        if window is not None:
            real = self.float64 if z.dtype == self.complex128 else self.float32
            framed = framed * xp.asarray(window, dtype=real)
        y = self.transform("fft", framed, axis=-1)
        if self.onesided:
            y = y[..., : n // 2 + 1]
        return (self.from_complex(y, signal),)


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return 700.0 * (np.power(10.0, mel / 2595.0) - 1.0)


@library.define("MelWeightMatrix", 17, host_inputs=(0, 1, 2, 3, 4))
class MelWeightMatrix(OpKernel):
    """Triangular mel filterbank weights, ``[dft_length // 2 + 1, num_mel_bins]``.

    The ``num_mel_bins + 2`` band edges are spaced on the mel scale from the lower edge in
    steps of ``(mel(upper) - mel(lower)) / (num_mel_bins + 2)`` (the convention of the ONNX
    conformance data, which stops one step short of the upper edge) and mapped to bins
    ``floor((dft_length + 1) * hz / sample_rate)``; band ``i`` rises linearly from edge
    ``i`` to a peak of 1 at edge ``i + 1`` and falls back to 0 at edge ``i + 2``. Computed
    on the host (numpy) from the scalar inputs, then handed to the backend.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        code = info.attr("output_datatype", 1)
        try:
            self.out_dtype = np_dtype(code)
        except (KeyError, TypeError, ValueError):
            self.out_dtype = None
        if self.out_dtype is None or self.out_dtype not in FLOAT_TYPES:
            raise InvalidGraph(f"{self.where()}: output_datatype {code!r} is not a float tensor type")

    def compute(self, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        op = self.info.op_type
        bands = _scalar_int(op, "num_mel_bins", self.host(num_mel_bins))
        n = _scalar_int(op, "dft_length", self.host(dft_length))
        rate = _scalar_int(op, "sample_rate", self.host(sample_rate))
        low = _scalar_float(op, "lower_edge_hertz", self.host(lower_edge_hertz))
        high = _scalar_float(op, "upper_edge_hertz", self.host(upper_edge_hertz))
        if bands < 1 or n < 1 or rate <= 0:
            raise ValueError(f"{op}: num_mel_bins, dft_length and sample_rate must be positive, "
                             f"got {bands}, {n}, {rate}")
        if not 0 <= low <= high:
            raise ValueError(f"{op}: need 0 <= lower_edge_hertz <= upper_edge_hertz")
        spec_bins = n // 2 + 1
        low_mel, high_mel = float(_hz_to_mel(low)), float(_hz_to_mel(high))
        mels = low_mel + np.arange(bands + 2) * ((high_mel - low_mel) / (bands + 2))
        edges = np.floor((n + 1) * _mel_to_hz(mels) / rate).astype(np.int64)
        lower, center, upper = edges[:-2], edges[1:-1], edges[2:]  # one per band
        j = np.arange(spec_bins, dtype=np.float64)[:, None]  # [spec_bins, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            rise = (j - lower) / (center - lower)
            fall = (upper - j) / (upper - center)
        w = np.zeros((spec_bins, bands), dtype=np.float64)
        w = np.where((j >= lower) & (j <= center), rise, w)
        w = np.where((j > center) & (j < upper), fall, w)
        w = np.where(j == center, 1.0, w)  # peak (also when a band has zero width)
        return (self.xp.asarray(w.astype(self.out_dtype)),)
