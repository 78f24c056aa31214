"""With the real CuPy installed but no GPU (CI): the probe says so, and sessions follow the
fallback policy. Real-GPU tests are marked ``gpu`` and skip themselves without a device
(run them on a GPU machine with ``pytest -m gpu plugins/cuda/tests``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHECK = textwrap.dedent(
    """
    import json, warnings
    import onyxrt as ort
    from onyxrt.discovery import catalog
    from onyxrt.testing.models import tiny_cnn
    status = catalog().status("CUDAExecutionProvider")
    model = tiny_cnn().SerializeToString()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = ort.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.add_session_config_entry("session.strict_providers", "1")
    try:
        ort.InferenceSession(model, so, providers=["CUDAExecutionProvider"])
        strict = "no error"
    except ort.errors.ProviderUnavailable as exc:
        strict = str(exc)
    print(json.dumps({
        "usable": status.usable, "reason": status.reason, "fix": status.fix,
        "all": ort.get_all_providers(), "available": ort.get_available_providers(),
        "warnings": [str(w.message) for w in caught], "providers": session.get_providers(),
        "strict": strict,
    }))
    """
)


def _real_cupy_state() -> str:
    """'absent', 'no-device' or 'device' for the real cupy in this interpreter."""
    probe = subprocess.run(
        [sys.executable, "-c",
         "import cupy\ntry:\n  n = cupy.cuda.runtime.getDeviceCount()\n  print('device' if n else 'no-device')\n"
         "except Exception:\n  print('no-device')"],
        capture_output=True, text=True, timeout=120,
    )
    if probe.returncode != 0:
        return "absent"
    return probe.stdout.strip()


STATE = _real_cupy_state()


@pytest.mark.skipif(STATE != "no-device", reason=f"needs the real cupy without a GPU (here: {STATE})")
def test_real_cupy_without_a_device_is_reported_and_falls_back():
    import json

    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["usable"] is False
    assert "cupy is installed but there is no usable device" in result["reason"]
    assert "CUDAExecutionProvider" in result["all"]
    assert "CUDAExecutionProvider" not in result["available"]
    assert result["providers"] == ["CPUExecutionProvider"]
    assert any("no usable device" in w for w in result["warnings"])
    assert "CUDAExecutionProvider was requested but cannot be used" in result["strict"]


@pytest.mark.gpu
@pytest.mark.skipif(STATE != "device", reason=f"needs a real NVIDIA GPU (here: {STATE})")
def test_real_gpu_matches_cpu():
    import numpy as np

    import onyxrt as ort
    from onyxrt.testing.models import resnet

    model = resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32).SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(model).run(None, {"input": x})[0]
    # use_tf32 is on by default (as in onnxruntime): float32 GEMMs then round their operands
    # to TF32 on Ampere and newer, about 1e-3 from float32; "0" gives full float32.
    for options, tolerance in (({"use_tf32": "0"}, 1e-4), ({}, 1e-2)):
        session = ort.InferenceSession(
            model, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"])
        assert "CUDAExecutionProvider" in session.placement.providers_used
        got = session.run(None, {"input": x})[0]
        assert np.max(np.abs(got - expected)) / np.max(np.abs(expected)) < tolerance, options


@pytest.mark.gpu
@pytest.mark.skipif(STATE != "device", reason=f"needs a real NVIDIA GPU (here: {STATE})")
def test_real_gpu_cuda_graph_replays_match_plain_runs():
    """enable_cuda_graph=1 on a device: the second run of a shape is captured, later runs
    replay it (one launch); every run equals the plain session's, also when the inputs
    change between replays, for two shapes and for outputs kept on the device."""
    import numpy as np

    import onyxrt as ort
    from onyxrt.testing.models import bert_encoder, resnet

    cases = [
        (resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32), lambda rng, n: {
            "input": rng.standard_normal((n, 3, 32, 32)).astype(np.float32)}),
        (bert_encoder(layers=2, hidden=64, heads=4), None),
    ]
    for model, make in cases:
        blob = model.SerializeToString()
        options = {"use_tf32": "0"}
        plain = ort.InferenceSession(blob, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"])
        graph = ort.InferenceSession(
            blob, providers=[("CUDAExecutionProvider", {**options, "enable_cuda_graph": "1"}), "CPUExecutionProvider"])
        replay = graph._plan.graph_replay
        assert replay is not None
        rng = np.random.default_rng(0)
        for n in (1, 2):
            for _ in range(4):
                if make is not None:
                    feeds = make(rng, n)
                else:
                    feeds = {}
                    for arg in plain.get_inputs():
                        shape = [d if isinstance(d, int) else n for d in arg.shape]
                        feeds[arg.name] = (rng.integers(0, 2, size=shape) if "int" in arg.type
                                           else rng.standard_normal(shape)).astype(
                                               np.int64 if "int" in arg.type else np.float32)
                want = plain.run(None, feeds)
                got = graph.run(None, feeds)
                for w, g in zip(want, got):
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        assert replay.failures == 0 and replay.captures == 2 and replay.replays >= 6
        # Outputs kept on the device are copies: the next replay does not overwrite them.
        binding = graph.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        for out in graph.get_outputs():
            binding.bind_output(out.name, "cuda")
        graph.run_with_iobinding(binding)
        first = [v.numpy() for v in binding.get_outputs()]
        kept = binding.get_outputs()
        graph.run(None, {k: v * 0 + (v if v.dtype.kind == "i" else 1) for k, v in feeds.items()})
        for value, before in zip(kept, first):
            np.testing.assert_array_equal(value.numpy(), before)
