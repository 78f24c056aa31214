"""SimNPU on a ResNet-style and a BERT-style model: placement, accuracy, device time, cache.

    python benchmarks/simnpu_report.py

For each model, with providers [SimNPU, CPU] (batch fixed to 1: NPUs need static
shapes): fused groups, CPU nodes, partitions, copies per run with bytes, the max relative
error against the CPU provider, the simulated NPU time from the profile, and session
creation with a cold and a warm compile cache (medians of 3).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import onyxrt as ort
from onyxrt.testing import models

NPU, CPU = "SimNPUExecutionProvider", "CPUExecutionProvider"


def _feeds(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if name == "resnet":
        return {"input": rng.standard_normal((1, 3, 128, 128)).astype(np.float32)}
    mask = np.ones((1, 64), np.int64)
    mask[:, 48:] = 0
    return {"input_ids": rng.integers(0, 1000, (1, 64), dtype=np.int64), "attention_mask": mask}


def _options(prefix: str | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 1)
    if prefix:
        so.enable_profiling = True
        so.profile_file_prefix = prefix
    return so


def report(name: str, model, tmp: Path) -> None:
    data = model.SerializeToString()
    feeds = _feeds(name)
    (expected,) = ort.InferenceSession(data).run(None, feeds)
    session = ort.InferenceSession(data, _options(str(tmp / name)), providers=[NPU, CPU])
    placement = session.placement
    (got,) = session.run(None, feeds)
    rel = float(np.max(np.abs(got.astype(np.float64) - expected)) / np.max(np.abs(expected)))
    events = json.loads(Path(session.end_profiling()).read_text())
    device_us = sum(e["args"].get("device_time_us", 0) for e in events if e.get("cat") == "Node")
    host_us = sum(e["dur"] for e in events if e.get("cat") == "Node")
    by_provider = placement.nodes_by_provider()
    print(f"== {name}: {len(model.graph.node)} nodes")
    print(f"  fused NPU groups: {len(placement.groups)} "
          f"({', '.join(str(len(g.nodes)) for g in placement.groups)} nodes)")
    print(f"  CPU nodes: {len(by_provider.get(CPU, []))} "
          f"({', '.join(sorted({n.op_type for n in placement.nodes if n.provider == CPU}))})")
    print(f"  partitions: {placement.partitions}")
    copies = placement.copies_per_run
    print(f"  copies per run: {len(copies)}, {sum(c.nbytes or 0 for c in copies)} bytes")
    print(f"  max relative error vs CPU (fp16): {rel:.2e}")
    print(f"  one run: simulated NPU time {device_us:.0f} us; host time of all steps {host_us:.0f} us")
    cache_dir = tmp / f"{name}-cache"
    cold, warm = [], []
    for _ in range(3):
        for f in cache_dir.glob("*"):
            f.unlink()
        t0 = time.perf_counter()
        ort.InferenceSession(data, _options(), providers=[(NPU, {"cache_dir": str(cache_dir)}), CPU])
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ort.InferenceSession(data, _options(), providers=[(NPU, {"cache_dir": str(cache_dir)}), CPU])
        warm.append(time.perf_counter() - t0)
    print(f"  session creation: cold cache {statistics.median(cold) * 1e3:.0f} ms, "
          f"warm cache {statistics.median(warm) * 1e3:.0f} ms")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report("resnet", models.resnet(depth_blocks=(2, 2, 2, 2), width=32, image=128), Path(tmp))
        report("bert", models.bert_encoder(layers=2, hidden=256, heads=4, intermediate=1024,
                                           seq=64, vocab=1000), Path(tmp))


if __name__ == "__main__":
    main()
