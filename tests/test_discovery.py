"""Discovery through entry points, with fake distributions on sys.path."""

from __future__ import annotations

import numpy as np
import pytest
from toy_provider import TOY_PLUGIN

import onyxrt as ort
from onyxrt.discovery import catalog

BROKEN_PLUGIN = """
raise ImportError("libmyaccel.so.3: cannot open shared object file")
"""

UNUSABLE_PLUGIN = """
from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.protocol import ProbeResult
from toy_provider import ToyDeviceExecutionProvider

class NoDeviceProvider(ToyDeviceExecutionProvider):
    name = "NoDeviceExecutionProvider"

    @classmethod
    def probe(cls):
        return ProbeResult(False, "no NoDevice card found (driver said: device 0 absent)",
                           fix="plug in the card")

@hookimpl
def onyxrt_providers():
    return [ProviderSpec("NoDeviceExecutionProvider", lambda: NoDeviceProvider, priority=80,
                         device_types=("npu",))]
"""

OLD_PROTOCOL_PLUGIN = """
from onyxrt.hookspecs import ProviderSpec, hookimpl
from toy_provider import ToyDeviceExecutionProvider

@hookimpl
def onyxrt_providers():
    return [ProviderSpec("FutureExecutionProvider", lambda: ToyDeviceExecutionProvider,
                         protocol_version=99)]
"""


def test_cpu_provider_comes_from_its_entry_point():
    assert "CPUExecutionProvider" in ort.get_available_providers()
    assert ort.get_available_providers()[-1] == "CPUExecutionProvider"
    assert catalog().specs["CPUExecutionProvider"].package == "onyxrt-cpu"


def test_third_party_provider_found_through_entry_point(plugin_site):
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    available = ort.get_available_providers()
    from model_helpers import assert_priority_order

    assert "ToyDeviceExecutionProvider" in available
    assert_priority_order(available)
    assert available[-1] == "CPUExecutionProvider"
    spec = catalog().specs["ToyDeviceExecutionProvider"]
    assert (spec.package, spec.package_version) == ("onyxrt-toy", "1.0")
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "ToyDeviceExecutionProvider"]
    assert devices and devices[0].device.type == "npu" and devices[0].device.virtual


def test_plugin_failing_to_import_is_isolated_and_reported(plugin_site):
    plugin_site.add_distribution("onyxrt-broken", {"broken": "broken_plugin"}, {"broken_plugin": BROKEN_PLUGIN})
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    assert "ToyDeviceExecutionProvider" in ort.get_available_providers()
    failures = catalog().failures
    assert len(failures) == 1
    assert failures[0].package == "onyxrt-broken"
    assert "libmyaccel.so.3" in failures[0].error


def test_unusable_provider_is_listed_but_not_available(plugin_site):
    plugin_site.add_distribution("onyxrt-nodev", {"nodev": "nodev_plugin"}, {"nodev_plugin": UNUSABLE_PLUGIN})
    assert "NoDeviceExecutionProvider" in ort.get_all_providers()
    assert "NoDeviceExecutionProvider" not in ort.get_available_providers()
    status = catalog().status("NoDeviceExecutionProvider")
    assert not status.usable and "device 0 absent" in status.reason and status.fix == "plug in the card"
    listed = [d for d in ort.get_ep_devices() if d.ep_name == "NoDeviceExecutionProvider"]
    assert listed[0].state == "not usable" and "device 0 absent" in listed[0].reason


def test_requesting_an_unusable_provider_warns_with_the_reason_and_runs_on_cpu(plugin_site, add_relu_model):
    plugin_site.add_distribution("onyxrt-nodev", {"nodev": "nodev_plugin"}, {"nodev_plugin": UNUSABLE_PLUGIN})
    with pytest.warns(ort.ProviderFallbackWarning, match="device 0 absent"):
        sess = ort.InferenceSession(add_relu_model.SerializeToString(),
                                    providers=["NoDeviceExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.fallbacks[0].provider == "NoDeviceExecutionProvider"
    assert "plug in the card" in sess.fallbacks[0].fix


def test_duplicate_provider_name_is_recorded_naming_both_packages_and_one_is_kept(plugin_site):
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    plugin_site.add_distribution("onyxrt-toy-fork", {"toyfork": "toy_fork_plugin"}, {"toy_fork_plugin": TOY_PLUGIN})
    assert "ToyDeviceExecutionProvider" in ort.get_available_providers()
    assert catalog().specs["ToyDeviceExecutionProvider"].package == "onyxrt-toy"  # first by name
    (failure,) = catalog().failures
    assert failure.package == "onyxrt-toy-fork" and failure.entry_point == "toyfork"
    assert "'onyxrt-toy' (kept" in failure.error and "'onyxrt-toy-fork' (ignored)" in failure.error
    assert "ONYXRT_PLUGINS=-<package>" in failure.fix


def test_protocol_version_mismatch_is_reported_not_loaded(plugin_site):
    plugin_site.add_distribution("onyxrt-future", {"future": "future_plugin"}, {"future_plugin": OLD_PROTOCOL_PLUGIN})
    assert "FutureExecutionProvider" not in ort.get_all_providers()
    (failure,) = catalog().failures
    assert "protocol version 99" in failure.error and failure.package == "onyxrt-future"


def test_environment_variable_restricts_plugins(plugin_site, monkeypatch):
    plugin_site.add_distribution("onyxrt-broken", {"broken": "broken_plugin"}, {"broken_plugin": BROKEN_PLUGIN})
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    monkeypatch.setenv("ONYXRT_PLUGINS", "cpu,onyxrt-toy")
    from onyxrt.discovery import reset_catalog

    reset_catalog()
    assert ort.get_available_providers() == ["ToyDeviceExecutionProvider", "CPUExecutionProvider"]
    assert catalog().failures == []  # the broken plugin was never imported
    monkeypatch.setenv("ONYXRT_PLUGINS", "-toy")
    reset_catalog()
    assert "ToyDeviceExecutionProvider" not in ort.get_all_providers()
    assert any("toy" in e for e in catalog().excluded)


def test_two_provider_placement_with_copies(plugin_site):
    """A second device with its own memory: nodes split, copies inserted and counted."""
    from model_helpers import make_model, tensor
    from onnx import helper

    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    w = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    model = make_model(
        [
            helper.make_node("Add", ["x", "w"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["r"], name="relu"),
            helper.make_node("Softmax", ["r"], ["s"], name="softmax", axis=-1),
            helper.make_node("Mul", ["s", "w"], ["y"], name="mul"),
        ],
        [tensor("x", [2, 4])],
        [tensor("y", [2, 4])],
        {"w": w},
    )
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["ToyDeviceExecutionProvider", "CPUExecutionProvider"])
    report = sess.placement
    assert report.nodes_by_provider() == {
        "ToyDeviceExecutionProvider": ["add", "relu", "mul"],
        "CPUExecutionProvider": ["softmax"],
    }
    assert report.partitions == 3
    per_run = [(c.value, c.src, c.dst, c.nbytes) for c in report.copies_per_run]
    assert per_run == [
        ("x", "cpu", "toy:0", 32),
        ("r", "toy:0", "cpu", 32),
        ("s", "cpu", "toy:0", 32),
        ("y", "toy:0", "cpu", 32),
    ]
    assert [(c.value, c.per_run) for c in report.copies if not c.per_run] == [("w", False)]
    refused = report.refusals_for("softmax")
    assert refused and refused[0].provider == "ToyDeviceExecutionProvider"

    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    r = np.maximum(x + w, 0)
    e = np.exp(r - r.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True) * w, rtol=1e-6)
    toy = sess._providers[0]
    assert (toy.transfer.to_device, toy.transfer.to_host) == (1 + 2, 2)  # w once; x, s; r, y


def test_host_inputs_of_a_device_kernel_are_not_copied(plugin_site):
    """A device kernel that declares host_inputs gets them from host memory, uncopied."""
    from model_helpers import make_model, tensor
    from onnx import TensorProto, helper

    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
        ],
        [tensor("x", [2, 6]), tensor("shape", [2], TensorProto.INT64)],
        [tensor("y", None)],
    )
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["ToyDeviceExecutionProvider", "CPUExecutionProvider"])
    assert sess.placement.nodes_by_provider() == {"ToyDeviceExecutionProvider": ["relu", "reshape"]}
    assert [c.value for c in sess.placement.copies_per_run] == ["x", "y"]  # not 'shape'
    x = np.arange(12, dtype=np.float32).reshape(2, 6) - 6
    (y,) = sess.run(None, {"x": x, "shape": np.array([3, 4], np.int64)})
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(3, 4))


# -- requesting a provider that is not installed --------------------------------------


@pytest.fixture
def cpu_only_catalog():
    """A catalog of onyxrt-cpu's entry point alone: no other provider is installed (not
    excluded, simply absent), whatever this environment has."""
    import importlib.metadata

    from onyxrt.discovery import ProviderCatalog, reset_catalog
    from onyxrt.hookspecs import ENTRY_POINT_GROUP

    eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "cpu"]
    reset_catalog(ProviderCatalog(entry_points=eps))
    yield catalog()
    reset_catalog()


def _fallback_message(model, name):
    with pytest.warns(ort.ProviderFallbackWarning) as record:
        ort.InferenceSession(model.SerializeToString(), providers=[name, "CPUExecutionProvider"])
    return str(record[0].message)


def test_uninstalled_onyxrt_provider_names_its_package_not_a_similar_name(cpu_only_catalog, add_relu_model):
    message = _fallback_message(add_relu_model, "CUDAExecutionProvider")
    assert "CUDAExecutionProvider is not installed" in message
    assert "pip install 'onyxrt-cuda[cuda12]' (CUDA 12)" in message
    assert "pip install 'onyxrt-cuda[cuda13]' (CUDA 13)" in message
    assert "Did you mean" not in message
    message = _fallback_message(add_relu_model, "ROCMExecutionProvider")
    assert "pip install onyxrt-rocm" in message and "Did you mean" not in message
    assert "pip install onyxrt-simnpu" in cpu_only_catalog.suggest("SimNPUExecutionProvider")


def test_onnxruntime_provider_onyxrt_lacks_says_so(cpu_only_catalog, add_relu_model):
    for name in ("TensorrtExecutionProvider", "OpenVINOExecutionProvider", "DmlExecutionProvider",
                 "CoreMLExecutionProvider", "QNNExecutionProvider"):
        message = _fallback_message(add_relu_model, name)
        assert f"onyxrt has no {name} yet" in message and "Did you mean" not in message


def test_misspelt_provider_name_gets_did_you_mean(cpu_only_catalog, add_relu_model):
    message = _fallback_message(add_relu_model, "CPUExecutonProvider")
    assert "Did you mean 'CPUExecutionProvider'?" in message
    # A misspelling of a known provider that is not installed: the name, and how to get it.
    hint = cpu_only_catalog.suggest("CUDAExecutonProvider")
    assert "Did you mean 'CUDAExecutionProvider'?" in hint and "onyxrt-cuda" in hint
    assert cpu_only_catalog.suggest("NoSuchExecutionProvider") == ""


def test_missing_provider_in_strict_mode_still_raises_and_set_providers_keeps_onnxruntimes_split(
    cpu_only_catalog, add_relu_model
):
    from onyxrt.errors import ProviderUnavailable

    so = ort.SessionOptions()
    so.add_session_config_entry("session.strict_providers", "1")
    with pytest.raises(ProviderUnavailable, match=r"onyxrt-cuda\[cuda12\]") as err:
        ort.InferenceSession(add_relu_model.SerializeToString(), so, providers=["CUDAExecutionProvider"])
    assert "Did you mean" not in str(err.value)
    sess = ort.InferenceSession(add_relu_model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.warns(ort.ProviderFallbackWarning, match="onyxrt-cuda"):
        sess.set_providers(["CUDAExecutionProvider"])  # known name: a warning, as onnxruntime
    with pytest.raises(ProviderUnavailable, match="Unknown Provider Type"):
        sess.set_providers(["CPUExecutonProvider"])  # unknown name: an error, as onnxruntime


def test_provider_whose_package_is_excluded_says_so(plugin_site, monkeypatch):
    from onyxrt.discovery import reset_catalog

    # A stand-in for onyxrt-cuda, so that the exclusion is recorded on any machine (never
    # imported: excluded plugins are not).
    plugin_site.add_distribution("onyxrt-cuda", {"cuda": "stand_in_cuda_plugin"}, {"stand_in_cuda_plugin": BROKEN_PLUGIN})
    monkeypatch.setenv("ONYXRT_PLUGINS", "-onyxrt-cuda")
    reset_catalog()
    hint = catalog().suggest("CUDAExecutionProvider")
    assert "onyxrt-cuda provides it, but ONYXRT_PLUGINS excludes that package" in hint
    assert "Did you mean" not in hint
