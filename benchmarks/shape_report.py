"""Shape computations in real exports, and what the NPU takes, with the free dimensions fixed.

    python benchmarks/shape_report.py exports/            # the files benchmarks/real_exports.py wrote
    python benchmarks/shape_report.py exports/ --dim batch=1 --dim seq=128

For each model: the shape-computation nodes (Shape, Size and the nodes computing only
from them) before and after onyxrt's optimizer, and with providers [SimNPU, CPU] the nodes
on the NPU out of all, the partitions and the copies per run; then one run on the CPU
against the unoptimized session (max relative difference). Free dimensions are fixed by
``add_free_dimension_override_by_name`` (``--dim``; default batch=1, seq=128).
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx

import onyxrt as ort

NPU, CPU = "SimNPUExecutionProvider", "CPUExecutionProvider"


def shape_nodes(model: onnx.ModelProto) -> int:
    """Shape/Size nodes and every node whose inputs all come from shape computations or
    constants (the subgraphs that compute shapes at run time)."""
    constants = {t.name for t in model.graph.initializer}
    computed: set[str] = set()
    count = 0
    for node in model.graph.node:
        from_shapes = node.op_type in ("Shape", "Size") or (
            node.input and all(not i or i in computed or i in constants for i in node.input)
            and any(i in computed for i in node.input))
        if from_shapes:
            computed.update(o for o in node.output if o)
            count += 1
    return count


def _options(dims: dict[str, int], level: ort.GraphOptimizationLevel, path: str = "") -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    for name, value in dims.items():
        so.add_free_dimension_override_by_name(name, value)
    if path:
        so.optimized_model_filepath = path
    return so


def _feeds(model: onnx.ModelProto, dims: dict[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in model.graph.input:
        tt = inp.type.tensor_type
        shape = [d.dim_value or dims.get(d.dim_param, 1) for d in tt.shape.dim]
        if tt.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = np.ones(shape, np.int64) if "mask" in inp.name else rng.integers(0, 1000, shape)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def report(path: Path, dims: dict[str, int]) -> None:
    model = onnx.load(str(path), load_external_data=False)
    with tempfile.TemporaryDirectory() as tmp:
        optimized_path = str(Path(tmp) / "optimized.onnx")
        cpu = ort.InferenceSession(str(path), _options(dims, ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                                       optimized_path), providers=[CPU])
        optimized = onnx.load(optimized_path, load_external_data=False)
    npu = ort.InferenceSession(str(path), _options(dims, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
                               providers=[NPU, CPU])
    placement = npu.placement
    on_npu = len(placement.nodes_by_provider().get(NPU, []))
    feeds = _feeds(model, dims)
    plain = ort.InferenceSession(str(path), _options(dims, ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                                 providers=[CPU])
    (want,), (got,) = plain.run(None, feeds)[:1], cpu.run(None, feeds)[:1]
    rel = float(np.max(np.abs(got.astype(np.float64) - want)) / max(float(np.max(np.abs(want))), 1e-30))
    print(f"{path.stem}: {len(model.graph.node)} nodes, shape computation {shape_nodes(model)} -> "
          f"{shape_nodes(optimized)} nodes ({len(optimized.graph.node)} left); "
          f"NPU {on_npu}/{len(placement.nodes)} nodes, {placement.partitions} partitions, "
          f"{len(placement.copies_per_run)} copies per run; optimized vs plain {rel:.1e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    dims = {"batch": 1, "seq": 128}
    dims.update({k: int(v) for k, v in (d.split("=", 1) for d in args.dim)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in sorted(args.folder.glob("*.onnx")):
            report(path, dims)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
