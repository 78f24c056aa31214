"""The provider conformance suite: the contract every provider's tests subclass.

A provider package proves it honours the protocol by subclassing
:class:`ProviderConformance` in its own tests::

    from onyxrt.testing.provider_suite import ProviderConformance

    class TestMyAccelConformance(ProviderConformance):
        provider = "MyAccelExecutionProvider"
        options = {"device_id": 0}          # optional
        rtol, atol = 1e-2, 1e-3             # optional, e.g. for fp16 devices

pytest then runs every ``test_*`` method below against it: discovery and probe, devices,
the option schema, capability (claims and refusals name real nodes, with reasons),
kernels or compiled groups (outputs match ``onnx.reference``), data transfer round trips,
the allocator, run hooks and concurrent runs. The CPU provider passes the same suite.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ProviderConformance", "suite_model"]


def suite_model(opset: int = 17) -> onnx.ModelProto:
    """A small float32 model of common ops: MatMul → Add → Relu → Mul → Softmax, plus a
    node in a domain no provider implements fed by a separate branch, so capability must
    refuse something. The custom node is *not* on the output path; use
    :func:`_runnable_model` to run."""
    return _model(opset, with_custom=True)


def _model(opset: int, with_custom: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    s = numpy_helper.from_array(np.full(8, 0.5, np.float32), "s")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b"], ["add"], name="add"),
        helper.make_node("Relu", ["add"], ["relu"], name="relu"),
        helper.make_node("Mul", ["relu", "s"], ["mul"], name="mul"),
        helper.make_node("Softmax", ["mul"], ["y"], name="softmax", axis=-1),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])]
    opsets = [helper.make_opsetid("", opset)]
    if with_custom:
        nodes.append(helper.make_node("NoSuchOp", ["x"], ["z"], name="custom", domain="onyxrt.test"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8]))
        opsets.append(helper.make_opsetid("onyxrt.test", 1))
    graph = helper.make_graph(
        nodes, "suite", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        outputs, [w, b, s],
    )
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)}


class ProviderConformance:
    """Base class of a provider's conformance tests (not collected itself: no ``Test``
    prefix). Set ``provider``; override ``options``, ``rtol``/``atol``, ``transfer_dtypes``
    or ``model()``."""

    provider: ClassVar[str] = ""
    options: ClassVar[dict[str, Any]] = {}
    rtol: ClassVar[float] = 1e-5
    atol: ClassVar[float] = 1e-6
    #: The element types the data-transfer round trip moves; a provider whose memory
    #: cannot hold one (an array library without float16) leaves it out.
    transfer_dtypes: ClassVar[tuple[Any, ...]] = (np.float32, np.float16, np.int64, np.int32, np.bool_, np.uint8)

    # -- helpers -------------------------------------------------------------------------
    def model(self) -> onnx.ModelProto:
        """The model the suite runs; a provider may substitute one it supports better."""
        return _model(17, with_custom=False)

    def _catalog(self) -> Any:
        from onyxrt.discovery import catalog

        return catalog()

    def _instance(self) -> Any:
        cat = self._catalog()
        cls = cat.provider_class(self.provider)
        return cls(cls.option_schema.validate(self.provider, self.options))

    def _session(self, model: onnx.ModelProto | None = None) -> Any:
        import onyxrt

        providers: list[Any] = [(self.provider, dict(self.options))]
        if self.provider != "CPUExecutionProvider":
            providers.append("CPUExecutionProvider")
        return onyxrt.InferenceSession((model or self.model()).SerializeToString(), providers=providers)

    # -- discovery -----------------------------------------------------------------------
    def test_installed_usable_and_speaks_this_protocol(self) -> None:
        from onyxrt.protocol import SUPPORTED_PROTOCOL_VERSIONS

        cat = self._catalog()
        assert self.provider in cat.names(), f"{self.provider} is not installed"
        status = cat.status(self.provider)
        assert status.usable, f"{self.provider} is not usable: {status.reason}"
        assert status.package, "the spec must name its distribution"
        assert cat.specs[self.provider].protocol_version in SUPPORTED_PROTOCOL_VERSIONS
        assert cat.provider_class(self.provider).name == self.provider

    def test_probe_returns_a_probe_result(self) -> None:
        from onyxrt.protocol import ProbeResult

        result = self._catalog().provider_class(self.provider).probe()
        assert isinstance(result, ProbeResult)
        assert result.usable or result.reason, "an unusable probe must say why"

    def test_devices_are_described(self) -> None:
        from onyxrt.devices import DEVICE_TYPES, Device

        devices = list(self._instance().devices())
        assert devices, "a provider drives at least one device"
        for device in devices:
            assert isinstance(device, Device)
            assert device.type in DEVICE_TYPES
            assert isinstance(device.memory_space, str) and device.memory_space
        spec_types = self._catalog().specs[self.provider].device_types
        assert devices[0].type in spec_types, "ProviderSpec.device_types must name the device type"

    # -- options -------------------------------------------------------------------------
    def test_unknown_option_fails_with_a_suggestion(self) -> None:
        import pytest

        from onyxrt.errors import InvalidProviderOption
        from onyxrt.options import ProviderOptionWarning

        schema = self._catalog().provider_class(self.provider).option_schema
        names = sorted(schema.options)
        bad = (names[0] + "x") if names else "no_such_option"
        if schema.unknown == "warn":  # a tolerant schema (as onnxruntime's CPU provider)
            with pytest.warns(ProviderOptionWarning, match="unknown option"):
                assert bad not in schema.validate(self.provider, {bad: "1"})
        else:
            with pytest.raises(InvalidProviderOption, match="unknown option"):
                schema.validate(self.provider, {bad: "1"})
        with pytest.raises(InvalidProviderOption, match="unknown option"):  # strict mode, always
            schema.validate(self.provider, {bad: "1"}, strict=True)

    def test_effective_options_are_reported_as_strings(self) -> None:
        reported = self._session().get_provider_options()[self.provider]
        schema = self._catalog().provider_class(self.provider).option_schema
        assert set(reported) == {name for name, opt in schema.options.items() if not opt.no_effect}
        assert all(isinstance(v, str) for v in reported.values())

    # -- capability and results ------------------------------------------------------------
    def test_capability_names_real_nodes_and_explains_refusals(self) -> None:
        from onyxrt.graph import Graph
        from onyxrt.protocol import Capability, FusedClaim, NodeClaim

        model = suite_model()
        graph = Graph.from_proto(model.graph, {"": 17, "onyxrt.test": 1})
        capability = self._instance().get_capability(graph)
        assert isinstance(capability, Capability)
        names = {n.name for n in graph.nodes}
        claimed: set[str] = set()
        for claim in capability.claims:
            assert isinstance(claim, (NodeClaim, FusedClaim))
            members = {claim.node} if isinstance(claim, NodeClaim) else set(claim.nodes)
            assert members <= names, f"claims name unknown nodes: {members - names}"
            assert not (members & claimed), "a provider claims each node at most once"
            claimed |= members
        assert "custom" not in claimed, "no provider implements onyxrt.test::NoSuchOp"
        refused = {r.node: r for r in capability.refusals}
        assert "custom" in refused and refused["custom"].reason, "refusals carry a reason"

    def test_outputs_match_the_reference_evaluator(self) -> None:
        from onnx.reference import ReferenceEvaluator

        model = self.model()
        session = self._session(model)
        assert self.provider in session.placement.providers_used, (
            f"{self.provider} ran no node of the suite's model: {session.placement}"
        )
        feeds = _feeds()
        expected = ReferenceEvaluator(model).run(None, feeds)
        for got, want in zip(session.run(None, feeds), expected):
            np.testing.assert_allclose(got, want, rtol=self.rtol, atol=self.atol)

    def test_concurrent_runs_agree(self) -> None:
        session = self._session()
        feeds = _feeds()
        (reference,) = session.run(None, feeds)
        results: list[Any] = []
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                for _ in range(10):
                    results.append(session.run(None, feeds)[0])
            except BaseException as exc:  # collected and re-raised in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors[0]
        assert len(results) == 40
        for r in results:
            np.testing.assert_array_equal(r, reference)

    # -- memory ----------------------------------------------------------------------------
    def test_data_transfer_round_trips(self) -> None:
        provider = self._instance()
        device = provider.device
        if device.is_host:
            return  # host-memory providers have nothing to move
        from onyxrt.devices import Device

        host = Device("cpu", "host")
        transfer = provider.data_transfer()
        assert transfer.can_copy(host, device) and transfer.can_copy(device, host)
        for dtype in self.transfer_dtypes:
            data = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
            on_device = transfer.copy(data, host, device)
            shape, dt = provider.describe(on_device)
            assert tuple(shape) == data.shape and np.dtype(dt) == data.dtype
            back = transfer.copy(on_device, device, host)
            assert isinstance(back, np.ndarray)
            np.testing.assert_array_equal(back, data)

    def test_allocator_statistics(self) -> None:
        provider = self._instance()
        allocator = provider.allocator()
        if allocator is None:
            assert provider.memory_stats() is None
            assert provider.release_cached_memory() == 0
            return
        block = allocator.allocate(1000)
        stats = allocator.stats()
        assert stats.in_use >= 1000 and stats.peak_in_use >= stats.in_use
        allocator.free(block)
        assert allocator.stats().in_use == stats.in_use - block.size
        assert provider.release_cached_memory() >= 0

    # -- lifecycle ---------------------------------------------------------------------------
    def test_run_hooks_and_sync(self) -> None:
        provider = self._instance()
        provider.on_run_start(None)
        provider.on_run_end(None)
        provider.sync()
        assert isinstance(provider.supports_concurrent_runs(), bool)
