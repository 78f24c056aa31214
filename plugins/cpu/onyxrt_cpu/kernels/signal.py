"""CPU kernels: spectral ops (DFT, STFT, MelWeightMatrix).

ONNX carries complex values as a trailing dimension of size 2 (real, imaginary); real
signals have a trailing dimension of size 1. The transforms convert to numpy complex arrays,
use ``numpy.fft`` and convert back. float16/bfloat16 data are computed in float32 and cast
back; float32 stays single precision and float64 double.

DFT-17 takes ``axis`` as an attribute (default 1), DFT-20 as an optional scalar input
(default -2); both count negative axes from the back of the full rank (the complex
dimension included), so the valid range is ``[-r, -2]`` and ``[0, r-2]``.
"""

from __future__ import annotations

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES, np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _flag_attr(info: KernelInfo, name: str, default: int) -> bool:
    value = info.attr(name, default)
    if value not in (0, 1):
        raise InvalidGraph(f"{_node(info)}: attribute {name!r} must be 0 or 1, got {value!r}")
    return bool(value)


def _scalar_int(op: str, name: str, value: object) -> int:
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ValueError(
            f"{op}: input {name!r} must hold one integer, got {arr.dtype} of shape {arr.shape}"
        )
    return int(arr.reshape(-1)[0])


def _scalar_float(op: str, name: str, value: object) -> float:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"{op}: input {name!r} must be a scalar, got shape {arr.shape}")
    return float(arr.reshape(-1)[0].astype(np.float64))


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """The float dtype the math runs in: float32 or float64 (halves widen to float32)."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _to_complex(op: str, x: np.ndarray) -> tuple[np.ndarray, bool]:
    """``[..., 1]`` or ``[..., 2]`` → (complex array of shape ``[...]``, whether it was real)."""
    if x.ndim < 1 or x.shape[-1] not in (1, 2):
        raise ValueError(
            f"{op}: the last dimension must be 1 (real) or 2 (complex), got shape {x.shape}"
        )
    xf = x.astype(_work_dtype(x.dtype), copy=False)
    if x.shape[-1] == 1:
        return xf[..., 0], True
    return xf[..., 0] + 1j * xf[..., 1], False


def _from_complex(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Complex ``[...]`` → ``[..., 2]`` of ``dtype``."""
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


# ------------------------------------------------------------------------- DFT


@registry.register("DFT", since=(17, 20), types={"T1": FLOAT_TYPES})
class DFT(Kernel):
    """Discrete Fourier transform (full, inverse, one-sided RFFT and IRFFT) along one axis."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.inverse = _flag_attr(info, "inverse", 0)
        self.onesided = _flag_attr(info, "onesided", 0)
        self.axis_attr: int | None = None
        if info.since_version < 20:
            axis = info.attr("axis", 1)
            if not isinstance(axis, int):
                raise InvalidGraph(f"{_node(info)}: attribute 'axis' must be an int")
            self.axis_attr = axis

    def compute(self, input, dft_length=None, axis=None):
        op = self.info.op_type
        x = np.asarray(input)
        rank = x.ndim
        if self.axis_attr is not None:
            ax = self.axis_attr
        else:
            ax = -2 if axis is None else _scalar_int(op, "axis", axis)
        if not (-rank <= ax <= -2 or 0 <= ax <= rank - 2):
            raise ValueError(f"{op}: axis {ax} is out of range for an input of rank {rank}")
        ax = ax + rank if ax < 0 else ax
        z, _ = _to_complex(op, x)
        n = None if dft_length is None else _scalar_int(op, "dft_length", dft_length)
        if n is not None and n < 1:
            raise ValueError(f"{op}: dft_length must be positive, got {n}")
        if self.inverse and self.onesided:  # IRFFT: one-sided spectrum -> real signal
            if n is None:
                n = 2 * (z.shape[ax] - 1)
            y = np.fft.irfft(z, n=n, axis=ax)
            return (y[..., None].astype(x.dtype),)
        y = (np.fft.ifft if self.inverse else np.fft.fft)(z, n=n, axis=ax)
        if self.onesided:  # RFFT: keep the non-redundant half
            y = np.take(y, np.arange(y.shape[ax] // 2 + 1), axis=ax)
        return (_from_complex(y, x.dtype),)


# ------------------------------------------------------------------------ STFT


@registry.register("STFT", since=17, types={"T1": FLOAT_TYPES})
class STFT(Kernel):
    """Short-time Fourier transform: windowed frames of the signal, each transformed."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.onesided = _flag_attr(info, "onesided", 1)

    def compute(self, signal, frame_step, window=None, frame_length=None):
        op = self.info.op_type
        x = np.asarray(signal)
        if x.ndim == 2:
            # [batch, length]: a real signal without its trailing axis. The spec asks for
            # rank 3, but onnxruntime takes this and exported audio front ends rely on it.
            x = x[..., None]
        if x.ndim != 3:
            raise ValueError(f"{op}: signal must have rank 3 ([batch, length, 1 or 2]) or 2 "
                             f"([batch, length], real), got shape {x.shape}")
        z, _ = _to_complex(op, x)  # [batch, signal_length]
        length = z.shape[1]
        step = _scalar_int(op, "frame_step", frame_step)
        if step < 1:
            raise ValueError(f"{op}: frame_step must be positive, got {step}")
        if window is not None:
            window = np.asarray(window)
            if window.ndim != 1:
                raise ValueError(f"{op}: window must be 1-D, got shape {window.shape}")
        if frame_length is not None:
            n = _scalar_int(op, "frame_length", frame_length)
            if window is not None and window.shape[0] != n:
                raise ValueError(
                    f"{op}: window length {window.shape[0]} differs from frame_length {n}"
                )
        else:
            n = length if window is None else window.shape[0]
        if not 1 <= n <= length:
            raise ValueError(f"{op}: frame length {n} must be in [1, {length}]")
        frames = (length - n) // step + 1
        index = np.arange(frames)[:, None] * step + np.arange(n)  # [frames, n]
        framed = z[:, index]  # [batch, frames, n]
        if window is not None:
            framed = framed * window.astype(z.real.dtype)
        y = np.fft.fft(framed, axis=-1)
        if self.onesided:
            y = y[..., : n // 2 + 1]
        return (_from_complex(y, x.dtype),)


# ------------------------------------------------------------- MelWeightMatrix


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return 700.0 * (np.power(10.0, mel / 2595.0) - 1.0)


@registry.register("MelWeightMatrix", since=17)
class MelWeightMatrix(Kernel):
    """Triangular mel filterbank weights, ``[dft_length // 2 + 1, num_mel_bins]``.

    The ``num_mel_bins + 2`` band edges are spaced on the mel scale from the lower edge in
    steps of ``(mel(upper) - mel(lower)) / (num_mel_bins + 2)`` (the convention of the ONNX
    conformance data, which stops one step short of the upper edge) and mapped to bins
    ``floor((dft_length + 1) * hz / sample_rate)``; band ``i`` rises linearly from edge
    ``i`` to a peak of 1 at edge ``i + 1`` and falls back to 0 at edge ``i + 2``.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        code = info.attr("output_datatype", 1)
        try:
            self.out_dtype = np_dtype(code)
        except (KeyError, TypeError, ValueError):
            self.out_dtype = None
        if self.out_dtype is None or self.out_dtype not in FLOAT_TYPES:
            raise InvalidGraph(
                f"{_node(info)}: output_datatype {code!r} is not a float tensor type"
            )

    def compute(self, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        op = self.info.op_type
        bands = _scalar_int(op, "num_mel_bins", num_mel_bins)
        n = _scalar_int(op, "dft_length", dft_length)
        rate = _scalar_int(op, "sample_rate", sample_rate)
        low = _scalar_float(op, "lower_edge_hertz", lower_edge_hertz)
        high = _scalar_float(op, "upper_edge_hertz", upper_edge_hertz)
        if bands < 1 or n < 1 or rate <= 0:
            raise ValueError(
                f"{op}: num_mel_bins, dft_length and sample_rate must be positive, "
                f"got {bands}, {n}, {rate}"
            )
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
        return (w.astype(self.out_dtype),)
