"""Writing the optimized model (``SessionOptions.optimized_model_filepath``).

The optimizer creates initializers (folded constants, fused weights) whose bytes it keeps
as arrays beside the model; they are filled in before saving. With onnxruntime's session
config keys ``session.optimized_model_external_initializers_file_name`` (a file name,
written beside the model) and ``..._min_size_in_bytes`` (default 1024), initializers of
at least that size go to that external-data file instead of the model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from .errors import InvalidArgument
from .session_options import OPTIMIZED_EXTERNAL_FILE_KEY, OPTIMIZED_EXTERNAL_MIN_SIZE_KEY

__all__ = ["save_optimized_model", "fill_created_weights", "discard_stale_file"]

#: onnxruntime's default for session.optimized_model_external_initializers_min_size_in_bytes.
DEFAULT_MIN_EXTERNAL_BYTES = 1024


def fill_created_weights(proto: onnx.ModelProto, arrays: Mapping[str, np.ndarray]) -> None:
    """Give the initializers a session holds as name, type and dims only (the optimizer's
    creations, the big weights of its skeleton model) their bytes from ``arrays``."""
    for tensor in proto.graph.initializer:
        if tensor.name in arrays and not tensor.raw_data:
            tensor.raw_data = np.ascontiguousarray(arrays[tensor.name]).tobytes()


def discard_stale_file(path: str) -> None:
    """Remove an external-data file left by an earlier save: onnx appends to an existing
    one, so saving twice would grow it."""
    if os.path.exists(path):
        os.remove(path)


def save_optimized_model(proto: onnx.ModelProto, arrays: Mapping[str, np.ndarray], options: Any) -> None:
    """Save ``proto`` to ``options.optimized_model_filepath`` with the optimizer's
    created weights filled in, large ones external when the config asks for it."""
    path = options.optimized_model_filepath
    fill_created_weights(proto, arrays)
    entries = options.config_entries()
    location = entries.get(OPTIMIZED_EXTERNAL_FILE_KEY, "")
    if not location:
        onnx.save_model(proto, path)
        return
    if os.path.isabs(location) or os.path.dirname(location):
        raise InvalidArgument(
            f"{OPTIMIZED_EXTERNAL_FILE_KEY} must be a file name (written beside the model), got {location!r}"
        )
    raw_min = entries.get(OPTIMIZED_EXTERNAL_MIN_SIZE_KEY, str(DEFAULT_MIN_EXTERNAL_BYTES))
    try:
        min_size = int(raw_min)
    except ValueError:
        raise InvalidArgument(f"{OPTIMIZED_EXTERNAL_MIN_SIZE_KEY} must be an integer, got {raw_min!r}") from None
    discard_stale_file(os.path.join(os.path.dirname(os.path.abspath(path)), location))
    # onnx moves the bytes out of the proto it saves: save a copy, the session goes on
    # with ``proto``.
    saved = onnx.ModelProto()
    saved.CopyFrom(proto)
    onnx.save_model(saved, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=max(min_size, 0), convert_attribute=False)
