"""Splitting a graph between providers: priority, fused claims, cycles, pins, refusals.

The unit tests drive :class:`~onyxrt.partitioner.Partitioner` directly with fake
providers whose ``get_capability`` returns whatever claims a test needs. The last tests
install a compile-style provider as a plugin and run a real session through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort
from onyxrt.devices import Device
from onyxrt.errors import KernelError, NotImplementedOp, PartitionError
from onyxrt.graph import Graph
from onyxrt.partitioner import Partition, Partitioner
from onyxrt.protocol import (
    Capability,
    ExecutionProvider,
    FusedClaim,
    NodeClaim,
    Refusal,
)


class FakeProvider(ExecutionProvider):
    """Claims exactly what it is told to; can also refuse or blow up."""

    def __init__(
        self,
        name: str,
        claims: Sequence[str | tuple[str, ...]] = (),
        refusals: dict[str, str] | None = None,
        raises: Exception | None = None,
    ) -> None:
        super().__init__({})
        self.name = name  # type: ignore[misc]
        self._claims = [
            NodeClaim(c) if isinstance(c, str) else FusedClaim(tuple(c)) for c in claims
        ]
        self._refusals = [Refusal(n, why, "op") for n, why in (refusals or {}).items()]
        self._raises = raises
        self.asked = 0

    def devices(self) -> Sequence[Device]:
        return (Device("cpu", "fake"),)

    def get_capability(self, graph: Graph) -> Capability:
        self.asked += 1
        if self._raises is not None:
            raise self._raises
        return Capability(self._claims, self._refusals)


def everything(name: str, graph: Graph) -> FakeProvider:
    return FakeProvider(name, [n.name for n in graph.nodes])


def _graph(model: onnx.ModelProto) -> Graph:
    return Graph.from_proto(model.graph, {"": 17})


def _chain(n: int = 4) -> Graph:
    """x -> a -> b -> c -> ... (Relu nodes named a, b, c, ...), graph output = last."""
    names = "abcdefghij"[:n]
    values = ["x", *[f"v_{k}" for k in names]]
    nodes = [
        helper.make_node("Relu", [values[i]], [values[i + 1]], name=names[i]) for i in range(n)
    ]
    return _graph(make_model(nodes, [tensor("x", [2])], [tensor(values[-1], [2])]))


def _owner(partition: Partition, providers: Sequence[FakeProvider]) -> dict[str, str]:
    return {node: providers[i].name for node, i in partition.assignment.items()}


def _group_nodes(partition: Partition) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (u.group.name, tuple(n.name for n in u.group.nodes))
        for u in partition.units
        if u.group is not None
    ]


# -- priority ------------------------------------------------------------------------------


def test_first_provider_in_priority_order_wins():
    g = _chain(4)
    providers = [FakeProvider("A", ["b", "c"]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _owner(partition, providers) == {"a": "B", "b": "A", "c": "A", "d": "B"}


def test_priority_is_list_order_not_claim_order():
    g = _chain(3)
    providers = [FakeProvider("A", ["c", "b", "a"]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert set(_owner(partition, providers).values()) == {"A"}
    assert [u.node.name for u in partition.units] == ["a", "b", "c"]  # run in graph order


def test_second_single_claim_on_a_taken_node_is_ignored():
    g = _chain(2)
    providers = [FakeProvider("A", ["a", "a"]), FakeProvider("B", ["a", "b"])]
    partition = Partitioner(providers).partition(g)
    assert _owner(partition, providers) == {"a": "A", "b": "B"}
    assert len(partition.units) == 2


def test_refusals_of_nodes_that_ran_elsewhere_are_kept():
    g = _chain(2)
    providers = [
        FakeProvider("A", ["a"], refusals={"b": "no Relu for int8"}),
        FakeProvider("B", ["a", "b"], refusals={"a": "too slow"}),
    ]
    partition = Partitioner(providers).partition(g)
    reasons = [(r.node, r.provider, r.reason, r.op_type) for r in partition.refusals]
    # A's refusal of b is kept (b ran on B); B's refusal of a is dropped (A already had a).
    assert reasons == [("b", "A", "no Relu for int8", "Relu")]


def test_refusal_of_a_nonexistent_node_is_dropped():
    g = _chain(1)
    providers = [FakeProvider("A", ["a"], refusals={"ghost": "nope"})]
    assert Partitioner(providers).partition(g).refusals == []


# -- fused claims --------------------------------------------------------------------------


def test_fused_claim_becomes_one_unit_in_topological_order():
    g = _chain(4)
    providers = [FakeProvider("A", [("c", "b")]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _group_nodes(partition) == [("A_test_graph_0", ("b", "c"))]
    assert [len(u.nodes) for u in partition.units] == [1, 2, 1]
    (group,) = [u.group for u in partition.units if u.group is not None]
    assert group.inputs == ("v_a",)
    assert group.outputs == ("v_c",)  # v_b stays inside the group


def test_fused_group_outputs_include_values_read_outside_and_graph_outputs():
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Neg", ["r"], ["n"], name="neg"),
            helper.make_node("Abs", ["r"], ["side"], name="abs"),  # reads r outside
        ],
        [tensor("x", [2])],
        [tensor("n", [2]), tensor("side", [2])],
    )
    g = _graph(model)
    providers = [FakeProvider("A", [("relu", "neg")]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    (group,) = [u.group for u in partition.units if u.group is not None]
    assert group.inputs == ("x",)
    assert set(group.outputs) == {"r", "n"}


def test_fused_claim_overlapping_a_taken_node_is_rejected_whole():
    g = _chain(4)
    providers = [
        FakeProvider("A", ["b"]),
        FakeProvider("B", [("a", "b", "c")]),
        everything("C", g),
    ]
    partition = Partitioner(providers).partition(g)
    assert _owner(partition, providers) == {"a": "C", "b": "A", "c": "C", "d": "C"}
    assert _group_nodes(partition) == []
    by_b = {r.node: r for r in partition.refusals if r.provider == "B"}
    assert set(by_b) == {"a", "c"}  # b was not B's to refuse: A already had it
    for r in by_b.values():
        assert "fused claim rejected" in r.reason
        assert "already assigned: ['b']" in r.reason
        assert r.category == "policy"


def test_two_overlapping_fused_claims_from_one_provider_first_wins():
    g = _chain(4)
    providers = [FakeProvider("A", [("a", "b"), ("b", "c")]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _group_nodes(partition) == [("A_test_graph_0", ("a", "b"))]
    assert _owner(partition, providers)["c"] == "B"


def test_fused_claim_whose_contraction_makes_a_cycle_is_rejected():
    g = _chain(3)  # a -> b -> c
    providers = [FakeProvider("A", [("a", "c")]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _group_nodes(partition) == []
    assert set(_owner(partition, providers).values()) == {"B"}
    reasons = {r.node: r.reason for r in partition.refusals if r.provider == "A"}
    assert set(reasons) == {"a", "c"}
    assert all("cycle" in why for why in reasons.values())


def test_cycle_through_an_earlier_fused_group_is_found():
    """a -> b and c -> d with {b, c} fused: then {a, d} would be a -> [b c] -> d -> cycle."""
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["va"], name="a"),
            helper.make_node("Relu", ["va"], ["vb"], name="b"),
            helper.make_node("Relu", ["x"], ["vc"], name="c"),
            helper.make_node("Relu", ["vc"], ["vd"], name="d"),
        ],
        [tensor("x", [2])],
        [tensor("vb", [2]), tensor("vd", [2])],
    )
    g = _graph(model)
    # without the earlier group, {a, d} is fine (no path between them)
    alone = Partitioner([FakeProvider("P", [("a", "d")]), everything("C", g)]).partition(g)
    assert _group_nodes(alone) == [("P_test_graph_0", ("a", "d"))]

    providers = [
        FakeProvider("N", [("b", "c")]),
        FakeProvider("P", [("a", "d")]),
        everything("C", g),
    ]
    partition = Partitioner(providers).partition(g)
    assert _group_nodes(partition) == [("N_test_graph_0", ("b", "c"))]
    assert _owner(partition, providers) == {"a": "C", "b": "N", "c": "N", "d": "C"}
    assert any("cycle" in r.reason for r in partition.refusals if r.provider == "P")
    # and what was accepted can actually be scheduled
    order = [tuple(n.name for n in u.nodes) for u in partition.units]
    assert order.index(("a",)) < order.index(("b", "c")) < order.index(("d",))


def test_claim_on_a_nonexistent_node_is_ignored():
    g = _chain(2)
    providers = [FakeProvider("A", ["ghost", "a"]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _owner(partition, providers) == {"a": "A", "b": "B"}
    assert "ghost" not in partition.assignment


def test_fused_claim_naming_a_nonexistent_node_is_rejected_whole():
    g = _chain(2)
    providers = [FakeProvider("A", [("a", "ghost")]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _owner(partition, providers) == {"a": "B", "b": "B"}
    (refusal,) = [r for r in partition.refusals if r.provider == "A"]
    assert refusal.node == "a"
    assert "do not exist" in refusal.reason and "'ghost'" in refusal.reason


def test_fused_claim_naming_a_node_twice_is_rejected():
    g = _chain(2)
    providers = [FakeProvider("A", [("a", "b", "a")]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _group_nodes(partition) == []
    assert any("twice" in r.reason for r in partition.refusals if r.provider == "A")


def test_empty_fused_claim_cannot_be_made():
    with pytest.raises(ValueError, match="at least one node"):
        FusedClaim(())


def test_group_names_count_up():
    g = _chain(5)
    providers = [FakeProvider("A", [("a", "b"), ("d", "e")]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert _group_nodes(partition) == [
        ("A_test_graph_0", ("a", "b")),
        ("A_test_graph_1", ("d", "e")),
    ]


# -- failing providers and unclaimed nodes -------------------------------------------------


def test_provider_whose_get_capability_raises_is_skipped_with_a_refusal(caplog):
    g = _chain(2)
    broken = FakeProvider("Broken", raises=RuntimeError("driver crashed"))
    providers = [FakeProvider("A", ["a"]), broken, everything("C", g)]
    with caplog.at_level("WARNING", logger="onyxrt.partitioner"):
        partition = Partitioner(providers).partition(g)
    assert _owner(partition, providers) == {"a": "A", "b": "C"}
    refusals = [
        (r.node, r.reason, r.category) for r in partition.refusals if r.provider == "Broken"
    ]
    # only nodes still free when Broken was asked are refused by it
    assert refusals == [("b", "get_capability raised RuntimeError: driver crashed", "other")]
    assert "driver crashed" in caplog.text


def test_unclaimed_node_is_not_implemented_listing_every_reason():
    g = _chain(3)
    providers = [
        FakeProvider("A", ["a"], refusals={"b": "no kernel for Relu(int4)"}),
        FakeProvider("B", ["a", "c"], refusals={"b": "Relu disabled by policy"}),
        FakeProvider("Broken", raises=ValueError("boom")),
    ]
    with pytest.raises(NotImplementedOp) as err:
        Partitioner(providers).partition(g)
    message = str(err.value)
    assert "node 'b' (Relu)" in message
    assert "A: no kernel for Relu(int4)" in message
    assert "B: Relu disabled by policy" in message
    assert "Broken: get_capability raised ValueError: boom" in message
    assert "'a'" not in message and "'c'" not in message


def test_unclaimed_node_nobody_refused_says_so():
    g = _chain(2)
    with pytest.raises(NotImplementedOp, match="node 'b' .*no provider claimed it"):
        Partitioner([FakeProvider("A", ["a"])]).partition(g)


def test_many_unclaimed_nodes_are_summarised():
    g = _chain(10)
    with pytest.raises(NotImplementedOp) as err:
        Partitioner([FakeProvider("A", ["a"])]).partition(g)
    message = str(err.value)
    assert "node 'j'" in message and "node 'a'" not in message
    g12 = _graph(
        make_model(
            [helper.make_node("Relu", ["x"], [f"y{i}"], name=f"n{i}") for i in range(12)],
            [tensor("x", [2])],
            [tensor(f"y{i}", [2]) for i in range(12)],
        )
    )
    with pytest.raises(NotImplementedOp, match=r"\(and 2 more\)"):
        Partitioner([FakeProvider("A")]).partition(g12)


def test_every_provider_is_asked_once():
    g = _chain(3)
    providers = [FakeProvider("A", ["a"]), everything("B", g)]
    Partitioner(providers).partition(g)
    assert [p.asked for p in providers] == [1, 1]


# -- pins ----------------------------------------------------------------------------------


def _mixed() -> Graph:
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r1"], name="relu_1"),
            helper.make_node("Neg", ["r1"], ["n1"], name="neg_1"),
            helper.make_node("Relu", ["n1"], ["r2"], name="relu_2"),
            helper.make_node("Neg", ["r2"], ["y"], name="neg_2"),
        ],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )
    return _graph(model)


def test_pin_by_node_name_overrides_priority():
    g = _mixed()
    providers = [everything("A", g), everything("B", g)]
    partition = Partitioner(providers, pins={"relu_2": "B"}).partition(g)
    assert _owner(partition, providers) == {
        "relu_1": "A",
        "neg_1": "A",
        "relu_2": "B",
        "neg_2": "A",
    }


def test_pin_by_op_type_pins_every_node_of_that_op():
    g = _mixed()
    providers = [everything("A", g), everything("B", g)]
    partition = Partitioner(providers, pins={"Neg": "B"}).partition(g)
    assert _owner(partition, providers) == {
        "relu_1": "A",
        "neg_1": "B",
        "relu_2": "A",
        "neg_2": "B",
    }
    assert partition.partitions == 4


def test_pin_to_a_provider_not_in_the_session_is_a_partition_error():
    g = _mixed()
    with pytest.raises(PartitionError) as err:
        Partitioner([everything("A", g)], pins={"relu_1": "Missing"}).partition(g)
    assert "'relu_1'" in str(err.value) and "'Missing'" in str(err.value)
    assert "A" in str(err.value)  # what is in the session


def test_pinned_node_its_provider_does_not_claim_is_not_implemented():
    g = _mixed()
    providers = [everything("A", g), FakeProvider("B", ["relu_1"])]
    with pytest.raises(NotImplementedOp) as err:
        Partitioner(providers, pins={"neg_2": "B"}).partition(g)
    assert "node 'neg_2'" in str(err.value)
    assert "pinned to B, which did not claim it" in str(err.value)


def test_fused_claim_over_a_node_pinned_elsewhere_is_rejected():
    g = _mixed()
    providers = [FakeProvider("A", [("relu_1", "neg_1")]), everything("B", g)]
    partition = Partitioner(providers, pins={"neg_1": "B"}).partition(g)
    assert _group_nodes(partition) == []
    assert partition.assignment["relu_1"] == 1
    reasons = [r.reason for r in partition.refusals if r.provider == "A"]
    assert reasons and all("pinned to another provider: ['neg_1']" in r for r in reasons)


def test_pin_naming_no_node_changes_nothing():
    g = _mixed()
    providers = [everything("A", g), everything("B", g)]
    partition = Partitioner(providers, pins={"Conv": "B"}).partition(g)
    assert set(_owner(partition, providers).values()) == {"A"}


# -- partition count -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_nodes", "expected"),
    [
        ("abcde", 1),
        ("ab", 2),
        ("ace", 5),
        ("abde", 3),
        ("", 1),
    ],
)
def test_partition_count_along_a_chain(a_nodes, expected):
    g = _chain(5)
    providers = [FakeProvider("A", list(a_nodes)), everything("B", g)]
    assert Partitioner(providers).partition(g).partitions == expected


def test_fused_group_counts_as_one_partition_with_its_neighbours_on_the_same_provider():
    g = _chain(4)
    providers = [FakeProvider("A", [("b", "c"), "d"]), everything("B", g)]
    partition = Partitioner(providers).partition(g)
    assert partition.partitions == 2  # [a] on B, then [b c] + d on A


# -- end to end: a compile-style provider as an installed plugin ---------------------------

FUSE_PLUGIN = """
from onyxrt.devices import Device
from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.kernels import Kernel
from onyxrt.protocol import Capability, ExecutionProvider, FusedClaim, Refusal

COMPILED = []


class AddReluKernel(Kernel):
    def __init__(self, group):
        self.group = group
        self.weights = group.constant_inputs()

    def compute(self, x):  # constants are baked in at compile: compute gets runtime inputs
        if x.shape[0] == 0:
            raise ValueError("the device cannot take an empty batch")
        return (__import__("numpy").maximum(x + self.weights["w"], 0),)


class FuseExecutionProvider(ExecutionProvider):
    name = "FuseExecutionProvider"
    vendor = "onyxrt tests"

    def devices(self):
        return (Device("npu", "onyxrt tests", virtual=True),)

    def get_capability(self, graph):
        by_op = {n.op_type: n.name for n in graph.nodes}
        claims = []
        if "Add" in by_op and "Relu" in by_op:
            claims.append(FusedClaim((by_op["Add"], by_op["Relu"])))
        refusals = [Refusal(n.name, "only Add+Relu is fused", "op") for n in graph.nodes
                    if n.op_type not in ("Add", "Relu")]
        return Capability(claims, refusals)

    def compile(self, subgraphs):
        COMPILED.extend(subgraphs)
        return [AddReluKernel(g) for g in subgraphs]


@hookimpl
def onyxrt_providers():
    return [ProviderSpec("FuseExecutionProvider", lambda: FuseExecutionProvider, priority=60,
                         device_types=("npu",))]
"""


@pytest.fixture
def fuse_model() -> onnx.ModelProto:
    """y = Relu(x + w) * w; Add+Relu go to the fusing provider, Mul to CPU."""
    return make_model(
        [
            helper.make_node("Add", ["x", "w"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["r"], name="relu"),
            helper.make_node("Mul", ["r", "w"], ["y"], name="mul"),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
        {"w": np.array([1.0, -2.0, 3.0], np.float32)},
    )


def _fuse_session(plugin_site: Any, model: onnx.ModelProto) -> ort.InferenceSession:
    plugin_site.add_distribution(
        "onyxrt-fuse", {"fuse": "fuse_plugin"}, {"fuse_plugin": FUSE_PLUGIN}
    )
    return ort.InferenceSession(
        model.SerializeToString(), providers=["FuseExecutionProvider", "CPUExecutionProvider"]
    )


def test_compile_style_provider_runs_its_fused_group(plugin_site, fuse_model):
    sess = _fuse_session(plugin_site, fuse_model)
    w = np.array([1.0, -2.0, 3.0], np.float32)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, np.maximum(x + w, 0) * w, rtol=1e-6)

    report = sess.placement
    (group,) = report.groups
    assert group.name == "FuseExecutionProvider_test_graph_0"
    assert group.provider == "FuseExecutionProvider"
    assert group.nodes == ("add", "relu")
    assert group.inputs == ("x", "w")
    assert group.outputs == ("r",)
    assert report.nodes_by_provider() == {
        "FuseExecutionProvider": ["add", "relu"],
        "CPUExecutionProvider": ["mul"],
    }
    assert {n.node: n.group for n in report.nodes} == {
        "add": "FuseExecutionProvider_test_graph_0",
        "relu": "FuseExecutionProvider_test_graph_0",
        "mul": None,
    }
    assert [(r.node, r.provider, r.reason) for r in report.refusals_for("mul")] == [
        ("mul", "FuseExecutionProvider", "only Add+Relu is fused")
    ]
    assert (
        "fused group FuseExecutionProvider_test_graph_0 on FuseExecutionProvider: 2 nodes"
        in str(report)
    )


def test_compile_receives_the_group_with_its_constant_weights(plugin_site, fuse_model):
    _fuse_session(plugin_site, fuse_model)
    import fuse_plugin  # the fake distribution's module, imported by discovery

    (group,) = fuse_plugin.COMPILED
    assert [n.name for n in group.nodes] == ["add", "relu"]
    np.testing.assert_array_equal(group.constant_inputs()["w"], [1.0, -2.0, 3.0])
    assert "x" not in group.constant_inputs()


def test_fused_kernel_failure_is_a_kernel_error_naming_the_group(plugin_site, fuse_model):
    sess = _fuse_session(plugin_site, fuse_model)
    with pytest.raises(KernelError) as err:
        sess.run(None, {"x": np.zeros((0, 3), np.float32)})
    message = str(err.value)
    assert "'FuseExecutionProvider_test_graph_0'" in message
    assert "on FuseExecutionProvider" in message
    assert "empty batch" in message
    # The kernel's inputs are the group's runtime inputs; the constant w was baked in.
    assert "x: float32[0, 3]" in message and "w:" not in message


def test_pinning_through_session_config_keeps_a_node_out_of_the_group(plugin_site, fuse_model):
    plugin_site.add_distribution(
        "onyxrt-fuse", {"fuse": "fuse_plugin"}, {"fuse_plugin": FUSE_PLUGIN}
    )
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.pin_nodes", "Relu=CPUExecutionProvider")
    sess = ort.InferenceSession(
        fuse_model.SerializeToString(),
        opts,
        providers=["FuseExecutionProvider", "CPUExecutionProvider"],
    )
    assert sess.placement.groups == ()
    assert set(sess.placement.nodes_by_provider()) == {"CPUExecutionProvider"}
    x = np.ones((1, 3), np.float32)
    w = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x + w, 0) * w)


SILENT_PLUGIN = FUSE_PLUGIN.replace(
    'return (__import__("numpy").maximum(x + self.weights["w"], 0),)', "return ()"
)


def test_fused_kernel_returning_too_few_outputs_is_an_error(plugin_site):
    assert SILENT_PLUGIN != FUSE_PLUGIN
    plugin_site.add_distribution(
        "onyxrt-fuse", {"fuse": "fuse_plugin"}, {"fuse_plugin": SILENT_PLUGIN}
    )
    model = make_model(  # the fused group's output is the graph output
        [
            helper.make_node("Add", ["x", "w"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
        {"w": np.array([1.0, -2.0, 3.0], np.float32)},
    )
    sess = ort.InferenceSession(
        model.SerializeToString(), providers=["FuseExecutionProvider", "CPUExecutionProvider"]
    )
    with pytest.raises((KernelError, ort.errors.ProviderError)) as err:
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert "FuseExecutionProvider_test_graph_0" in str(err.value)


def test_later_providers_see_what_is_taken_or_pinned_elsewhere():
    """get_capability is told which nodes belong to higher-priority providers (and pins),
    so a compile-style provider can group free nodes only."""
    g = _chain(4)
    seen: dict[str, dict[str, str | None]] = {}

    class Watcher(FakeProvider):
        def get_capability(self, graph: Graph) -> Capability:
            seen[self.name] = {n.name: graph.assigned_provider(n.name) for n in graph.nodes}
            return super().get_capability(graph)

    first = Watcher("First", ["a", "b", "c"])
    second = Watcher("Second", ["d"])
    cpu = Watcher("CPU", ["a", "b", "c", "d"])
    Partitioner([first, second, cpu], pins={"c": "CPU"}).partition(g)
    assert seen["First"] == {"a": None, "b": None, "c": "CPU", "d": None}
    assert seen["Second"] == {"a": "First", "b": "First", "c": "CPU", "d": None}
    assert seen["CPU"] == {"a": "First", "b": "First", "c": None, "d": "Second"}
    assert g.assigned == {}  # cleared after partitioning
