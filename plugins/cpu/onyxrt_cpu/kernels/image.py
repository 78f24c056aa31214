"""CPU kernels: image decoding (ImageDecoder).

Decoding JPEG, PNG, BMP, TIFF, WebP, JPEG 2000 and the other formats ONNX names is what
Pillow exists for; writing decoders here would serve nobody. Pillow is an optional
dependency (``pip install 'onyxrt-cpu[image]'``): without it, building an ImageDecoder
kernel fails with that instruction, naming the node.
"""

from __future__ import annotations

import io

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry

_FORMATS = ("RGB", "BGR", "Grayscale")


@registry.register("ImageDecoder", since=20)
class ImageDecoder(Kernel):
    """Decode an encoded image (uint8 bytes) to uint8 HWC in RGB, BGR or grayscale."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.pixel_format = str(info.attr("pixel_format", "RGB"))
        if self.pixel_format not in _FORMATS:
            raise InvalidGraph(
                f"ImageDecoder node {info.node_name!r}: pixel_format must be one of {_FORMATS}, "
                f"got {self.pixel_format!r}"
            )
        try:
            import PIL.Image
        except ImportError:
            raise NotImplementedError(
                "ImageDecoder needs Pillow to decode images: pip install 'onyxrt-cpu[image]'"
            ) from None
        self.image = PIL.Image

    def compute(self, encoded):
        data = np.asarray(encoded, dtype=np.uint8).tobytes()
        with self.image.open(io.BytesIO(data)) as img:
            if self.pixel_format == "Grayscale":
                return (np.asarray(img.convert("L"), dtype=np.uint8)[..., np.newaxis],)
            rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
        return (np.ascontiguousarray(rgb[..., ::-1]) if self.pixel_format == "BGR" else rgb,)
