"""Broken provider plugins: every fault is isolated or reported as a typed error.

The rule a user can rely on:

* a provider that fails while the session is being **created** (probe, get_capability,
  kernel creation, compile, copying weights to its device) is left out of the session
  with a ``ProviderFallbackWarning`` giving the reason, recorded in ``session.fallbacks``,
  and the other providers take its nodes; with ``session.strict_providers=1`` it is a
  ``ProviderUnavailable`` error instead;
* a provider that fails during a **run** (compute, wrong number of outputs,
  on_run_start/on_run_end, data transfer) makes that run raise a typed error
  (``KernelError`` or ``ProviderError``) naming the node, the provider and its package;
  the session stays usable for the next run.

The misbehaving provider is ``tests/faulty_provider.py``, installed as the fake
distribution ``onyxrt-faulty``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
from faulty_provider import FAULTS, FAULTY_PLUGIN, NAME, RELEASE
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort
from onyxrt.discovery import catalog, reset_catalog
from onyxrt.errors import KernelError, OnyxError, ProviderError, ProviderUnavailable
from onyxrt.session import ProviderFallbackWarning
from onyxrt.session_options import PIN_NODES_KEY, STRICT_PROVIDERS_KEY

CPU = "CPUExecutionProvider"
PACKAGE = "onyxrt-faulty"
W = np.array([1.0, -2.0, 3.0], np.float32)


@pytest.fixture
def faulty(plugin_site):
    """Install onyxrt-faulty; faults cleared before and after each test."""
    FAULTS.clear()
    RELEASE.clear()
    plugin_site.add_distribution(PACKAGE, {"faulty": "faulty_plugin"}, {"faulty_plugin": FAULTY_PLUGIN})
    yield FAULTS
    FAULTS.clear()
    RELEASE.set()  # lets a hung probe thread finish


@pytest.fixture
def model():
    """y = Relu(x + w) * w: three nodes the faulty provider can run."""
    return make_model(
        [
            helper.make_node("Add", ["x", "w"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["r"], name="relu"),
            helper.make_node("Mul", ["r", "w"], ["y"], name="mul"),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
        {"w": W},
    )


def _x(n: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x + W, 0) * W


def _strict() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_session_config_entry(STRICT_PROVIDERS_KEY, "1")
    return so


def _session_falls_back(model, faults: set[str], reason: str) -> ort.InferenceSession:
    """Create a session with the faulty provider first; it must be left out with a warning
    naming it, its package and ``reason``, and the session must compute correctly on CPU."""
    FAULTS.update(faults)
    with pytest.warns(ProviderFallbackWarning) as record:
        sess = ort.InferenceSession(model, providers=[NAME, CPU])
    message = " ".join(str(w.message) for w in record if w.category is ProviderFallbackWarning)
    assert NAME in message and PACKAGE in message and reason in message, message
    assert "strict_providers" in message  # says how to make it an error
    assert sess.get_providers() == [CPU]
    assert [f.provider for f in sess.fallbacks] == [NAME]
    assert reason in sess.fallbacks[0].reason
    x = _x()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)
    return sess


def _strict_fails(model, faults: set[str], reason: str) -> None:
    FAULTS.clear()
    FAULTS.update(faults)
    with pytest.raises(ProviderUnavailable) as err:
        ort.InferenceSession(model, _strict(), providers=[NAME, CPU])
    message = str(err.value)
    assert NAME in message and PACKAGE in message and reason in message, message


# -- creation-time faults: left out with a warning, or an error in strict mode ------------


def test_healthy_faulty_provider_runs_every_node(faulty, model):
    """The baseline the fault tests depart from."""
    sess = ort.InferenceSession(model, providers=[NAME, CPU])
    assert {n.provider for n in sess.placement.nodes} == {NAME}
    x = _x()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


def test_probe_that_raises_marks_the_provider_unusable(faulty, model):
    faulty.add("probe_raises")
    status = catalog().status(NAME)
    assert not status.usable
    assert PACKAGE in status.reason and "symbol lookup error" in status.reason
    assert NAME not in ort.get_available_providers()
    _session_falls_back(model, set(), "symbol lookup error")
    _strict_fails(model, {"probe_raises"}, "symbol lookup error")


def test_probe_that_calls_sys_exit_marks_the_provider_unusable(faulty, model):
    """SystemExit from plugin code is that plugin's failure, not the end of the program."""
    faulty.add("probe_exits")
    status = catalog().status(NAME)
    assert not status.usable
    assert status.reason == f"{PACKAGE} failed to load or probe: SystemExit: libfaulty.so: fatal driver error, exiting"
    assert NAME not in ort.get_available_providers()
    _session_falls_back(model, set(), "SystemExit")
    _strict_fails(model, {"probe_exits"}, "SystemExit")


def test_probe_that_hangs_is_cut_off_after_the_timeout(faulty, model, monkeypatch):
    monkeypatch.setenv("ONYXRT_PROBE_TIMEOUT_S", "0.5")
    reset_catalog()
    faulty.add("probe_hangs")
    start = time.perf_counter()
    available = ort.get_available_providers()
    assert time.perf_counter() - start < 5.0  # bounded, not the probe's 60 s
    assert NAME not in available and CPU in available
    status = catalog().status(NAME)
    assert not status.usable
    assert status.reason == f"{NAME} (from {PACKAGE}) probe did not finish within 0.5 s"
    assert "ONYXRT_PROBE_TIMEOUT_S" in status.fix
    _session_falls_back(model, set(), "probe did not finish within 0.5 s")


def test_probe_timeout_setting_must_be_a_positive_number(faulty, monkeypatch):
    monkeypatch.setenv("ONYXRT_PROBE_TIMEOUT_S", "soon")
    reset_catalog()
    with pytest.raises(ort.errors.InvalidArgument, match="ONYXRT_PROBE_TIMEOUT_S"):
        catalog().status(NAME)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("capability_raises", "get_capability raised KeyError"),
        ("capability_returns_none", "get_capability returned NoneType"),
        ("create_kernel_raises", "no free kernel slots"),
        ("compile_raises", "compiler crashed"),
        ("compile_wrong_count", "compile returned 0 kernels for 1 groups"),
        ("transfer_to_device_raises", "DMA engine timeout"),  # the weight w is copied at creation
    ],
)
def test_creation_failure_leaves_the_provider_out_with_a_warning(faulty, model, fault, reason):
    _session_falls_back(model, {fault}, reason)
    _strict_fails(model, {fault}, reason)


def test_the_next_provider_takes_over_from_a_failed_one(faulty, model, toy_provider):
    faulty.add("compile_raises")
    with pytest.warns(ProviderFallbackWarning, match="compiler crashed"):
        sess = ort.InferenceSession(model, providers=[NAME, "ToyDeviceExecutionProvider", CPU])
    assert sess.get_providers() == ["ToyDeviceExecutionProvider", CPU]
    assert {n.provider for n in sess.placement.nodes} == {"ToyDeviceExecutionProvider"}
    x = _x()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


def test_claims_on_nodes_that_do_not_exist_are_ignored(faulty, model):
    faulty.add("claims_unknown_nodes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = ort.InferenceSession(model, providers=[NAME, CPU])
    assert {n.provider for n in sess.placement.nodes} == {NAME}
    x = _x()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


def test_overlapping_fused_claims_keep_the_first_and_reject_the_rest(faulty, model):
    faulty.add("fused_overlap")
    sess = ort.InferenceSession(model, providers=[NAME, CPU])
    owner = {n.node: n.provider for n in sess.placement.nodes}
    assert owner == {"add": NAME, "relu": NAME, "mul": CPU}
    assert [g.nodes for g in sess.placement.groups] == [("add", "relu")]
    refusal = next(r for r in sess.placement.refusals if r.node == "mul" and r.provider == NAME)
    assert "already assigned" in refusal.reason and "relu" in refusal.reason
    x = _x()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


def test_fused_claim_on_a_node_pinned_elsewhere_is_rejected_whole(faulty, model):
    faulty.add("fused_all")
    so = ort.SessionOptions()
    so.add_session_config_entry(PIN_NODES_KEY, f"add={CPU}")
    sess = ort.InferenceSession(model, so, providers=[NAME, CPU])
    assert {n.provider for n in sess.placement.nodes} == {CPU}
    reasons = {r.node: r.reason for r in sess.placement.refusals if r.provider == NAME}
    assert set(reasons) == {"add", "relu", "mul"}
    assert all("pinned to another provider" in r and "add" in r for r in reasons.values())
    x = _x()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


# -- run-time faults: a typed error naming node, provider and package; the session lives --


def _run_fails(sess, error_type, *fragments: str) -> None:
    # try/except rather than pytest.raises: its ExceptionInfo keeps the traceback (and the
    # run's device buffers) alive in a cycle, and the tests check that nothing is kept.
    try:
        sess.run(None, {"x": _x()})
    except OnyxError as exc:
        assert type(exc) is error_type, repr(exc)
        message = str(exc)
    else:
        pytest.fail(f"the run did not raise {error_type.__name__}")
    for fragment in (NAME, PACKAGE, *fragments):
        assert fragment in message, message


def _still_works(sess) -> None:
    FAULTS.clear()
    for seed in range(3):
        x = _x(seed=seed)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


def _arena_in_use(sess) -> int:
    return int(sess.memory_stats()[NAME]["in_use"] or 0)


@pytest.mark.parametrize(
    ("fault", "error_type", "fragments"),
    [
        ("compute_raises", KernelError, ("node 'add' (Add)", "RuntimeError: device fault")),
        ("compute_too_few", ProviderError, ("node 'add' (Add)", "returned 0 value(s)", "1 output(s)")),
        ("compute_returns_none", ProviderError, ("node 'add' (Add)", "returned NoneType")),
        ("run_start_raises", ProviderError, ("on_run_start", "device lost before the run")),
        ("run_end_raises", ProviderError, ("on_run_end", "device lost after the run")),
        ("transfer_to_device_raises", KernelError, ("Memcpy_x_cpu_to_faulty:0", "DMA engine timeout")),
        ("transfer_to_host_raises", ProviderError, ("output 'y'", "DMA engine timeout")),
    ],
)
def test_run_failure_is_a_typed_error_and_the_session_stays_usable(faulty, model, fault, error_type, fragments):
    sess = ort.InferenceSession(model, providers=[NAME, CPU])
    x = _x()
    sess.run(None, {"x": x})  # warm the arena
    baseline = _arena_in_use(sess)
    faulty.add(fault)
    for _ in range(3):  # repeatable, and nothing accumulates
        _run_fails(sess, error_type, *fragments)
    assert _arena_in_use(sess) == baseline
    _still_works(sess)
    assert _arena_in_use(sess) == baseline


def test_extra_trailing_values_from_a_kernel_are_ignored(faulty, model):
    """Kernels may return optional outputs the node leaves out (LayerNormalization's mean)."""
    sess = ort.InferenceSession(model, providers=[NAME, CPU])
    faulty.add("compute_too_many")
    x = _x()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


def test_run_error_wins_over_a_failing_on_run_end(faulty, model):
    sess = ort.InferenceSession(model, providers=[NAME, CPU])
    faulty.update({"compute_raises", "run_end_raises"})
    _run_fails(sess, KernelError, "device fault")
    _still_works(sess)


def test_run_failure_in_parallel_mode_is_typed_too(faulty, model):
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    sess = ort.InferenceSession(model, so, providers=[NAME, CPU])
    for fault, error_type in (("compute_raises", KernelError), ("compute_too_few", ProviderError)):
        FAULTS.add(fault)
        _run_fails(sess, error_type, "node 'add' (Add)")
        _still_works(sess)


def test_every_fault_surfaces_as_an_onyx_error(faulty, model):
    """No fault lets a foreign exception type escape session creation or a run."""
    creation = ["capability_raises", "capability_returns_none", "create_kernel_raises",
                "transfer_to_device_raises", "claims_unknown_nodes", "fused_overlap"]
    run = ["compute_raises", "compute_too_few", "compute_returns_none",
           "run_start_raises", "run_end_raises", "transfer_to_host_raises"]
    for fault in creation + run:
        FAULTS.clear()
        if fault in creation:
            FAULTS.add(fault)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ProviderFallbackWarning)
                for so in (ort.SessionOptions(), _strict()):
                    try:
                        sess = ort.InferenceSession(model, so, providers=[NAME, CPU])
                    except OnyxError:
                        continue
            FAULTS.add(fault)
            sess.run(None, {"x": _x()})
        except OnyxError:
            pass


def test_only_providers_with_their_own_run_hooks_are_called_per_run():
    """The protocol's on_run_start/on_run_end do nothing: a run skips providers that keep
    them, and calls those that define them (on the class or the instance)."""
    from faulty_provider import SerialExecutionProvider

    from onyxrt.plan import _has_run_hooks
    from onyxrt_cpu.provider import CPUExecutionProvider

    cpu = CPUExecutionProvider()
    assert not _has_run_hooks(cpu)
    assert _has_run_hooks(SerialExecutionProvider())
    cpu.on_run_end = lambda run_options: None
    assert _has_run_hooks(cpu)
