"""Tests every GPU provider package runs, under the simulated CuPy.

``onyxrt-cuda`` and ``onyxrt-rocm`` subclass :class:`GPUProviderTests` in their own test
folders (setting ``provider`` and ``hip``), so both are held to the same checks: the
core's provider conformance suite, outputs of real architectures against the CPU
provider, exact copy counts with device-bound inputs and outputs, ``gpu_mem_limit`` and
memory returning to baseline, and a session with a GPU, the simulated NPU and the CPU.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest

import onyxrt as ort
from onyxrt.discovery import reset_catalog
from onyxrt.testing import models
from onyxrt.testing.provider_suite import ProviderConformance

from . import simulated_cupy

__all__ = ["GPUProviderTests", "simulated_gpu"]

CPU = "CPUExecutionProvider"
NPU = "SimNPUExecutionProvider"


def simulated_gpu(hip: bool, **kwargs: Any) -> Iterator[Any]:
    """Install the simulated CuPy (fresh provider catalog before and after)."""
    with simulated_cupy.install(hip=hip, **kwargs) as sim:
        reset_catalog()
        try:
            yield sim
        finally:
            reset_catalog()


def _max_rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))), 1e-30))


_MODELS = {
    "resnet": lambda: models.resnet(depth_blocks=(2, 1), width=8, num_classes=10, image=32),
    "mobilenet_v2": lambda: models.mobilenet_v2(
        width_mult=0.5, num_classes=10, image=32, blocks=[(1, 16, 1, 1), (6, 24, 2, 2)]
    ),
    "bert": lambda: models.bert_encoder(layers=2, hidden=32, heads=4, intermediate=64, seq=8,
                                        vocab=50),
    "gpt2": lambda: models.gpt2(layers=2, hidden=32, heads=4, seq=8, vocab=50),
}


def _feeds(model: onnx.ModelProto, batch: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in model.graph.input:
        dims = [d.dim_value or batch for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            if "mask" in inp.name:
                mask = np.ones(dims, np.int64)
                mask[:, -2:] = 0
                feeds[inp.name] = mask
            else:
                feeds[inp.name] = rng.integers(0, 50, size=dims, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


class GPUProviderTests:
    """Subclass with ``provider`` and ``hip`` set; pytest collects ``Test*`` subclasses."""

    provider: ClassVar[str] = ""
    hip: ClassVar[bool] = False

    @pytest.fixture(autouse=True)
    def sim(self) -> Iterator[Any]:
        """Every test runs with the simulated CuPy installed."""
        yield from simulated_gpu(self.hip)

    def _session(self, model: onnx.ModelProto, providers: list[Any] | None = None, so: Any = None) -> Any:
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=providers or [self.provider, CPU])

    def _gpu(self, session: Any) -> Any:
        return next(p for p in session._providers if p.name == self.provider)

    # -- discovery ------------------------------------------------------------------------
    def test_usable_under_the_simulation_and_a_virtual_gpu(self) -> None:
        assert self.provider in ort.get_available_providers()
        devices = [d for d in ort.get_ep_devices() if d.ep_name == self.provider]
        assert devices and devices[0].device.type == "gpu" and devices[0].device.virtual

    def test_no_device_is_reported_with_the_drivers_message(self) -> None:
        with simulated_cupy.install(hip=self.hip, device_count=0):
            reset_catalog()
            from onyxrt.discovery import catalog

            status = catalog().status(self.provider)
            assert not status.usable
            assert "no usable device" in status.reason and "device is detected" in status.reason  # the driver's words
            assert self.provider not in ort.get_available_providers()
            with pytest.warns(ort.ProviderFallbackWarning, match="no usable device"):
                session = self._session(_MODELS["resnet"]())
            assert session.get_providers() == [CPU]
        reset_catalog()

    def test_the_other_cupy_build_is_named(self) -> None:
        with simulated_cupy.install(hip=not self.hip):
            reset_catalog()
            from onyxrt.discovery import catalog

            reason = catalog().status(self.provider).reason
            wanted = "HIP" if self.hip else "CUDA"
            assert f"needs the {wanted} build" in reason, reason
        reset_catalog()

    # -- results on real architectures --------------------------------------------------------
    @pytest.mark.parametrize("name", sorted(_MODELS))
    def test_matches_the_cpu_provider(self, name: str) -> None:
        model = _MODELS[name]()
        feeds = _feeds(model)
        expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
        session = self._session(model)
        report = session.placement
        on_gpu = report.nodes_by_provider().get(self.provider, [])
        assert len(on_gpu) > len(report.nodes) // 2, report  # nodes after the optimizer
        for node in report.nodes:  # what stays on CPU is shape computation or has no GPU kernel
            if node.provider == CPU:
                assert report.refusals_for(node.node), f"{node.node} on CPU without a reason"
        got = session.run(None, feeds)
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert _max_rel(a, b) < 1e-4, f"{name}: {_max_rel(a, b):.2e}"

    @pytest.mark.parametrize(("name", "fused"), [
        ("resnet", {"FusedConv"}), ("mobilenet_v2", {"FusedConv"}), ("bert", {"FusedMatMul", "Gelu"}),
        ("gpt2", {"FusedMatMul", "Gelu"}),
    ])
    def test_the_optimizers_fused_operators_run_on_the_gpu(self, name: str, fused: set[str]) -> None:
        # The GPU registers the ai.onyxrt kernels, so a [GPU, CPU] session is optimized like
        # a CPU one and the fused nodes land on the GPU (results: test_matches_the_cpu_provider).
        session = self._session(_MODELS[name]())
        on_gpu = {n.op_type for n in session.placement.nodes if n.provider == self.provider}
        assert fused <= on_gpu, on_gpu

    # -- copies --------------------------------------------------------------------------------
    def test_copies_per_run_are_exactly_the_predicted_ones(self, sim: Any) -> None:
        model = _MODELS["resnet"]()
        feeds = _feeds(model)
        session = self._session(model)
        report = session.placement
        gpu = self._gpu(session)
        predicted = len(report.copies_per_run)
        before = gpu.transfer.counts.host_device_copies
        session.run(None, feeds)
        assert gpu.transfer.counts.host_device_copies - before == predicted

        # Input and output bound on the device: their two copies disappear.
        binding = session.io_binding()
        device = "rocm" if self.hip else "cuda"
        x = ort.OrtValue.ortvalue_from_numpy(feeds["input"], device)
        binding.bind_ortvalue_input("input", x)
        binding.bind_output("logits", device)
        bound = {("input", "cpu"), ("logits", gpu.device.memory_space)}
        predicted_bound = sum(
            1 for c in report.copies_per_run
            if (c.value, c.src) not in bound
        )
        before = gpu.transfer.counts.host_device_copies
        session.run_with_iobinding(binding)
        assert gpu.transfer.counts.host_device_copies - before == predicted_bound
        (out,) = binding.get_outputs()
        assert out.device_name() == device
        expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
        assert _max_rel(out.numpy(), expected) < 1e-4

    def test_dlpack_in_and_out_without_copies(self, sim: Any) -> None:
        import sys

        cupy = sys.modules["cupy"]
        # the provider's probe (its test kernel copies a few values) runs before counting
        assert self.provider in ort.get_available_providers()
        device = cupy.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
        copies = (sim.h2d, sim.d2h)
        value = ort.OrtValue.from_dlpack(device)
        assert value.device_name() == ("rocm" if self.hip else "cuda")
        assert value.shape() == [2, 3] and (sim.h2d, sim.d2h) == copies  # adopted in place
        back = cupy.from_dlpack(value)
        assert back.data.ptr == device.data.ptr and (sim.h2d, sim.d2h) == copies
        np.testing.assert_array_equal(value.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))

    # -- memory ------------------------------------------------------------------------------
    def test_gpu_mem_limit_is_enforced_and_memory_returns_to_baseline(self, sim: Any) -> None:
        from onyxrt.errors import OutOfMemory

        model = _MODELS["resnet"]()
        feeds = _feeds(model, batch=8)
        baseline = sim.bytes_in_use()
        limited = None
        with pytest.raises(OutOfMemory) as err:  # at creation (weights) or at run (activations)
            limited = self._session(model, [(self.provider, {"gpu_mem_limit": 64 * 1024}), CPU])
            limited.run(None, feeds)
        assert "limit 65536 bytes" in str(err.value) and "requested" in str(err.value)
        del err, limited
        gc.collect()
        assert sim.bytes_in_use() == baseline

        session = self._session(model)
        session.run(None, feeds)
        stats = session.memory_stats()[self.provider]
        assert stats["peak_in_use"] > 0 and stats["reserved"] >= stats["in_use"]
        assert session.release_cached_memory() >= 0
        del session
        gc.collect()
        assert sim.bytes_in_use() == baseline

    # -- several accelerators ------------------------------------------------------------------
    def test_gpu_npu_and_cpu_in_one_session(self) -> None:
        from onyxrt.discovery import catalog

        if NPU not in catalog().names():
            pytest.skip("onyxrt-simnpu is not installed in this environment")
        model = _MODELS["bert"]()
        feeds = _feeds(model, batch=1)
        so = ort.SessionOptions()
        so.add_free_dimension_override_by_name("batch", 1)
        expected = ort.InferenceSession(model.SerializeToString(), so).run(None, feeds)[0]
        session = self._session(model, [(NPU, {"precision": "fp32"}), self.provider, CPU], so)
        used = session.placement.providers_used
        assert set(used) == {NPU, self.provider, CPU}, session.placement
        spaces = {c.src for c in session.placement.copies} | {c.dst for c in session.placement.copies}
        assert "simnpu:0" in spaces and self._gpu(session).device.memory_space in spaces
        (got,) = session.run(None, feeds)
        assert _max_rel(got, expected) < 1e-4


    def test_gpu_first_with_npu_pinned_nodes(self) -> None:
        """[GPU, SimNPU, CPU] in that priority: the GPU takes what it can, the NPU the nodes
        pinned to it, the CPU shape computation — three memory spaces in one run."""
        from onyxrt.discovery import catalog

        if NPU not in catalog().names():
            pytest.skip("onyxrt-simnpu is not installed in this environment")
        model = _MODELS["bert"]()
        feeds = _feeds(model, batch=1)
        so = ort.SessionOptions()
        so.add_free_dimension_override_by_name("batch", 1)
        expected = ort.InferenceSession(model.SerializeToString(), so).run(None, feeds)[0]
        so.add_session_config_entry("session.pin_nodes", f"LayerNormalization={NPU}")
        session = self._session(model, [self.provider, (NPU, {"precision": "fp32"}), CPU], so)
        report = session.placement
        assert report.providers_used == (self.provider, NPU, CPU), report
        layer_norms = [n for n in report.nodes if n.op_type == "LayerNormalization"]
        assert layer_norms and all(n.provider == NPU for n in layer_norms)
        gpu_npu = [c for c in report.copies_per_run if {c.src_provider, c.dst_provider} == {self.provider, NPU}]
        assert gpu_npu, "GPU <-> NPU copies (through the host) are in the report"
        (got,) = session.run(None, feeds)
        assert _max_rel(got, expected) < 1e-4


class GPUConformance(ProviderConformance):
    """The core's provider conformance suite, under the simulated CuPy."""

    hip: ClassVar[bool] = False

    @pytest.fixture(autouse=True)
    def sim(self) -> Iterator[Any]:
        """Every test runs with the simulated CuPy installed."""
        yield from simulated_gpu(self.hip)
