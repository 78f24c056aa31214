"""``onyxrt.datasets``: the example models of onnxruntime's ``onnxruntime.datasets``
(documentation snippets call ``get_example("sigmoid.onnx")``).

onyxrt ships no model files: ``mul_1.onnx`` (``Y = X * W``, W the 3x2 matrix 1..6) and
``sigmoid.onnx`` (Sigmoid over a 3x4x5 tensor) are built on first use into a cache folder
(``ONYXRT_CACHE_DIR``, else ``~/.cache/onyxrt``) and their paths returned.
``logreg_iris.onnx`` is a scikit-learn model converted with skl2onnx: it needs the
ai.onnx.ml operators, so it is not built here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["get_example", "EXAMPLES"]


def _mul_1() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(1, 7, dtype=np.float32).reshape(3, 2), "W")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "W"], ["Y"], name="mul_1")], "mul test",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=3,
                             producer_name="onyxrt.datasets")


def _sigmoid() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"])], "sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=3,
                             producer_name="onyxrt.datasets")


#: The examples onyxrt can build, by file name.
EXAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {"mul_1.onnx": _mul_1, "sigmoid.onnx": _sigmoid}


def _cache_dir() -> Path:
    root = os.environ.get("ONYXRT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "onyxrt")
    return Path(root) / "examples"


def get_example(name: str) -> str:
    """The absolute path of example model ``name`` (built on first use)."""
    build = EXAMPLES.get(name)
    if build is None:
        extra = (" logreg_iris.onnx is a scikit-learn model (ai.onnx.ml operators) that onyxrt "
                 "does not ship." if name == "logreg_iris.onnx" else "")
        raise FileNotFoundError(f"Unable to find example {name!r}; onyxrt has {sorted(EXAMPLES)}.{extra}")
    path = _cache_dir() / name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        onnx.save_model(build(), str(partial))
        os.replace(partial, path)  # atomic: a concurrent reader never sees half a file
    return str(path)
