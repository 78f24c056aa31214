"""3x3 stride-1 convolutions by Winograd's F(2x2, 3x3) (Lavin & Gray, 2015).

Each 2x2 tile of the output is ``A^T [U . V] A`` where ``U = G g G^T`` is the 3x3 filter
transformed to 4x4 (once per weight) and ``V = B^T d B`` the tile's 4x4 input patch
transformed the same way. Summed over input channels, the 16 elementwise products become
16 GEMMs of ``(M, C) x (C, tiles)``: 16 * M * C * (OH * OW / 4) multiply-adds where im2col
does 9 * M * C * OH * OW, 2.25x fewer, on GEMMs BLAS runs about as fast. The transforms
are compiled (``onyxrt_cpu.native``): the input one replaces im2col and the output one
also applies the bias, the residual and the activation of a FusedConv.

Used for float32, group 1, 3x3 kernels, stride 1, dilation 1 with at least
:data:`MIN_CHANNELS` input and output channels and about :data:`MIN_TILES` output tiles
(below that the transforms cost more than the GEMMs save); the rounding error stays at a few float32 ulps of the sums' magnitude
(the transform matrices hold only 0, ±1 and ±0.5).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import native
from ._spatial import scratch

__all__ = ["MIN_CHANNELS", "applicable", "transform_filters", "convolve"]

#: Input and output channels below which im2col stays faster (measured on ResNet/MobileNet
#: layer shapes).
MIN_CHANNELS = 32
#: Output tiles (2x2) below which it does: 16 GEMMs with so few columns run far below
#: BLAS's peak (ResNet-50's 7x7 layers, 16 tiles, gain nothing).
MIN_TILES = 36

_F32 = np.dtype(np.float32)

# G (4x3): the filter transform.
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def applicable(
    x: np.ndarray,
    wp: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
) -> bool:
    """Whether a convolution of ``x`` by packed weights ``wp`` (g, M, C*taps) runs here."""
    return (
        native.ENABLED
        and x.dtype == np.float32
        and x.ndim == 4
        and kernel == (3, 3)
        and strides == (1, 1)
        and dilations == (1, 1)
        and wp.shape[0] == 1
        and x.shape[1] >= MIN_CHANNELS
        and wp.shape[1] >= MIN_CHANNELS
        and x.shape[0] * ((x.shape[2] + 1) // 2) * ((x.shape[3] + 1) // 2) >= MIN_TILES
    )


def transform_filters(wp: np.ndarray) -> np.ndarray:
    """Packed 3x3 weights (1, M, C*9) → U (16, M, C) float32, computed in float64."""
    m, k = wp.shape[1:]
    g = wp.reshape(m, k // 9, 3, 3).astype(np.float64)
    u = np.einsum("ai,mcij,bj->abmc", _G, g, _G)
    return np.ascontiguousarray(u.reshape(16, m, k // 9), dtype=np.float32)


def convolve(
    x: np.ndarray,
    u: np.ndarray,
    out_shape: tuple[int, ...],
    pads_begin: tuple[int, ...],
    finish: tuple[Any, ...] | None = None,
) -> tuple[np.ndarray, bool]:
    """The convolution of ``x`` (N, C, H, W) with transformed filters ``u`` into a fresh
    (N, M, *out_shape) array, and whether ``finish`` = (bias, z, act, p0, p1) was applied
    on the way out: it is when bias (M values or None) and z (the output's shape or None)
    are C-contiguous float32."""
    x = np.ascontiguousarray(x)
    n, c, _, _ = x.shape
    m = u.shape[1]
    oh, ow = out_shape
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    geometry = native.window_geometry(x.shape, (3, 3), out_shape, (1, 1), pads_begin, (1, 1))
    tiles = n * th * tw
    v = scratch("winograd_v", (16, c, tiles), _F32)
    native.winograd_input(x, v, geometry)
    products = scratch("winograd_products", (16, m, tiles), _F32)
    np.matmul(u, v, out=products)
    y = np.empty((n, m, oh, ow), dtype=np.float32)
    applied = finish is not None and native.epilogue_ready(y.shape, finish[0], finish[1])
    bias, z, act, p0, p1 = finish if applied else (None, None, native.ACT_NONE, 0.0, 0.0)
    native.winograd_output(products, y, geometry, m, bias, z, act, p0, p1)
    return y, applied

