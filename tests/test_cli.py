"""The ``onyxrt`` command-line tool, run as ``python -m onyxrt`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

import onyxrt as ort
from onyxrt.cli import EXIT_FAILURE, main
from onyxrt.discovery import ProviderCatalog, catalog, reset_catalog
from onyxrt.testing import models

SIMNPU = "SimNPUExecutionProvider"
CPU = "CPUExecutionProvider"

needs_simnpu = pytest.mark.skipif(
    SIMNPU not in catalog().available(), reason="onyxrt-simnpu is not installed or not usable"
)


def cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONYXRT_CLI_TRACEBACK", "ONYXRT_PROGRESS")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "onyxrt", *args], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cli") / "tiny_cnn.onnx"
    onnx.save(models.tiny_cnn(), str(path))
    return str(path)


@pytest.fixture(scope="module")
def resnet_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cli") / "resnet.onnx"
    onnx.save(models.resnet(depth_blocks=(1, 1), width=8, image=32), str(path))
    return str(path)


def assert_no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


# --------------------------------------------------------------------------- providers


def test_providers_text_lists_every_installed_provider() -> None:
    proc = cli("providers")
    assert proc.returncode == 0, proc.stderr
    cat = catalog()
    for name in cat.names():
        assert name in proc.stdout
        status = cat.status(name)
        if not status.usable:
            assert status.reason in proc.stdout
            assert status.fix in proc.stdout
    assert "state: usable" in proc.stdout
    assert "device: cpu:0" in proc.stdout


def test_providers_json_matches_catalog() -> None:
    proc = cli("providers", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    cat = catalog()
    assert [p["name"] for p in data["providers"]] == cat.names()
    for entry in data["providers"]:
        status = cat.status(entry["name"])
        assert entry["state"] == status.state
        assert entry["package"] == status.package
        assert entry["protocol_version"] == status.protocol_version
        if status.usable:
            assert entry["devices"], entry
    cpu = next(p for p in data["providers"] if p["name"] == CPU)
    assert cpu["devices"][0]["virtual"] is False
    assert data["plugin_failures"] == [
        {"entry_point": f.entry_point, "package": f.package, "error": f.error}
        for f in cat.failures
    ]


@needs_simnpu
def test_providers_flags_virtual_devices() -> None:
    data = json.loads(cli("providers", "--format", "json").stdout)
    npu = next(p for p in data["providers"] if p["name"] == SIMNPU)
    assert npu["devices"][0]["virtual"] is True
    assert "[virtual]" in cli("providers").stdout


#: Each provider's probe status, computed in a fresh process as the CLI's is: some details
#: depend on what the process has loaded (the CPU provider's thread detail names every BLAS
#: library loaded, and this test process may hold scipy's beside numpy's).
_STATUSES = """
import json
from onyxrt.cli import EXIT_FAILURE, main
from onyxrt.discovery import ProviderCatalog, catalog, reset_catalog
cat = catalog()
print(json.dumps({n: [cat.status(n).details, cat.status(n).usable, cat.status(n).fix] for n in cat.names()}))
"""


def test_doctor_shows_probe_details_and_fixes() -> None:
    proc = cli("doctor")
    assert proc.returncode == 0, proc.stderr
    assert f"onyxrt {ort.__version__}" in proc.stdout
    statuses = json.loads(subprocess.run([sys.executable, "-c", _STATUSES], capture_output=True, text=True,
                                         check=True).stdout)
    assert set(statuses) == set(catalog().names())
    for name, (details, usable, fix) in statuses.items():
        assert name in proc.stdout
        for key, value in details.items():
            assert f"{key}: {value}" in proc.stdout
        if not usable and fix:
            assert f"fix: {fix}" in proc.stdout


#: The CLI in a process where onyxrt-cpu's compiled module cannot be imported: what a
#: numpy-only install of onyxrt-cpu (no C compiler, or ONYXRT_CPU_PURE=1) looks like.
_WITHOUT_COMPILED_MODULE = """
import sys
sys.modules["onyxrt_cpu._native"] = None
from onyxrt.cli import main
sys.exit(main(sys.argv[1:]))
"""

_REINSTALL = "pip install --force-reinstall --no-cache-dir --no-deps onyxrt-cpu"


def _cpu_block(text: str) -> str:
    """The lines of ``text`` from the CPU provider's header to the next provider's."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if CPU in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "")),
               len(lines))
    return "\n".join(lines[start:end])


def test_providers_says_which_cpu_build_is_installed() -> None:
    from onyxrt_cpu import native

    compiled = _cpu_block(cli("providers").stdout)
    assert ("(compiled build)" in compiled) is native.AVAILABLE
    pure = subprocess.run([sys.executable, "-c", _WITHOUT_COMPILED_MODULE, "providers"],
                          capture_output=True, text=True, timeout=300)
    assert pure.returncode == 0, pure.stderr
    block = _cpu_block(pure.stdout)
    assert "numpy-only build" in block and "compiled build" not in block
    data = json.loads(subprocess.run([sys.executable, "-c", _WITHOUT_COMPILED_MODULE, "providers",
                                      "--format", "json"], capture_output=True, text=True,
                                     timeout=300).stdout)
    cpu = next(p for p in data["providers"] if p["name"] == CPU)
    assert "numpy-only build" in cpu["description"]


def test_doctor_advice_for_the_numpy_only_build_bypasses_pips_wheel_cache() -> None:
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_COMPILED_MODULE, "doctor"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    kernels = next(line for line in _cpu_block(proc.stdout).splitlines() if "kernels:" in line)
    # A plain reinstall takes the numpy-only wheel pip cached: the advice must skip the cache.
    assert "numpy kernels only" in kernels and _REINSTALL in kernels


@pytest.fixture
def no_providers() -> Iterator[None]:
    """A catalog of no plugins at all, as in an environment where none is installed."""
    reset_catalog(ProviderCatalog(entry_points=[]))
    yield
    reset_catalog()


def test_providers_without_any_provider_says_how_to_get_one(
    no_providers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["providers"]) == EXIT_FAILURE
    out, err = capsys.readouterr()
    assert out == ""
    assert "no execution provider is installed" in err and "pip install onyxrt-cpu" in err
    assert "pip install onyxrt" in err
    assert main(["providers", "--format", "json"]) == EXIT_FAILURE
    out, err = capsys.readouterr()
    assert json.loads(out)["providers"] == [] and "no execution provider is installed" in err


def test_doctor_without_any_provider_says_how_to_get_one(
    no_providers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor"]) == EXIT_FAILURE
    out, _ = capsys.readouterr()
    assert "no execution provider is installed" in out and "pip install onyxrt-cpu" in out


def test_providers_and_doctor_when_onyxrt_plugins_excludes_every_plugin() -> None:
    env = {"ONYXRT_PLUGINS": "no-such-plugin"}
    proc = cli("providers", env_extra=env)
    assert proc.returncode == EXIT_FAILURE
    assert "no execution provider is available" in proc.stderr
    assert "ONYXRT_PLUGINS='no-such-plugin' excluded" in proc.stderr
    assert "excluded: cpu (onyxrt-cpu)" in proc.stdout
    proc = cli("doctor", env_extra=env)
    assert proc.returncode == EXIT_FAILURE
    assert "no execution provider is available" in proc.stdout
    assert_no_traceback(proc)


# --------------------------------------------------------------------------- explain


def test_explain_text_is_the_placement_report(cnn_path: str) -> None:
    proc = cli("explain", cnn_path)
    assert proc.returncode == 0, proc.stderr
    sess = ort.InferenceSession(cnn_path, providers=[CPU])
    assert proc.stdout.strip() == str(sess.placement).strip()


@needs_simnpu
def test_explain_json_equals_session_placement(resnet_path: str) -> None:
    proc = cli("explain", resnet_path, "--providers", f"{SIMNPU},{CPU}", "--dim", "batch=1",
               "--format", "json")
    assert proc.returncode == 0, proc.stderr
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 1)
    sess = ort.InferenceSession(resnet_path, so, providers=[SIMNPU, CPU])
    expected = json.loads(json.dumps(sess.placement.to_dict()))
    got = json.loads(proc.stdout)
    assert got == expected
    assert got["groups"] and got["copies"]
    assert all(c["nbytes"] is not None for c in got["copies"])  # batch fixed: sizes known


@needs_simnpu
def test_explain_html_is_self_contained(cnn_path: str, tmp_path: Path) -> None:
    out = tmp_path / "placement.html"
    proc = cli("explain", cnn_path, "--providers", f"{SIMNPU},{CPU}", "--dim", "batch=1",
               "--format", "html", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert '<svg id="placement-graph"' in page and SIMNPU in page
    # Scripts and styles inline; nothing fetched from anywhere.
    assert "http://" not in page and "https://" not in page
    assert page.count("<script") == 1 and "<script>" in page and " src=" not in page
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 1)
    sess = ort.InferenceSession(cnn_path, so, providers=[SIMNPU, CPU])
    for node in sess.placement.nodes:
        assert f'data-node="{node.node}"' in page
    # The copies of 'input' onto the NPU (3136 bytes) and of the result back (40 bytes),
    # marked on their edges.
    assert page.count('class="edge copy"') == len(sess.placement.copies_per_run) == 2
    assert "⇄ 3.1 KiB" in page and "⇄ 40 B" in page


def test_explain_with_provider_option(cnn_path: str) -> None:
    proc = cli("explain", cnn_path, "--option", "CPUExecutionProvider.nonexistent_key=1")
    assert proc.returncode == 2
    assert "nonexistent_key" in proc.stderr
    assert_no_traceback(proc)


# --------------------------------------------------------------------------- errors


def test_missing_model_file_exits_2(tmp_path: Path) -> None:
    for command in ("explain", "run", "bench"):
        proc = cli(command, str(tmp_path / "missing.onnx"))
        assert proc.returncode == 2, (command, proc.stderr)
        assert "model file not found" in proc.stderr
        assert_no_traceback(proc)


def test_invalid_model_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    proc = cli("run", str(bad))
    assert proc.returncode == 2
    # ModelNotParsed: the InvalidModel (and onnxruntime's InvalidProtobuf) for bytes
    # that are not an ONNX protobuf.
    assert "ModelNotParsed" in proc.stderr and "not a valid ONNX model" in proc.stderr
    assert_no_traceback(proc)


def test_unknown_provider_exits_2(cnn_path: str) -> None:
    proc = cli("explain", cnn_path, "--providers", "NoSuchExecutionProvider,CPUExecutionProvider")
    assert proc.returncode == 2
    assert "NoSuchExecutionProvider" in proc.stderr and "not installed" in proc.stderr
    assert_no_traceback(proc)


def test_uninstalled_known_provider_names_its_package_not_a_similar_name(cnn_path: str) -> None:
    # Excluded (or absent where onyxrt-cuda is not installed): either way not usable here.
    proc = cli("explain", cnn_path, "--providers", "CUDAExecutionProvider",
               env_extra={"ONYXRT_PLUGINS": "-onyxrt-cuda"})
    assert proc.returncode == 2
    assert "CUDAExecutionProvider is not installed" in proc.stderr and "onyxrt-cuda" in proc.stderr
    assert "Did you mean" not in proc.stderr
    proc = cli("explain", cnn_path, "--providers", "TensorrtExecutionProvider")
    assert proc.returncode == 2 and "onyxrt has no TensorrtExecutionProvider yet" in proc.stderr
    proc = cli("explain", cnn_path, "--providers", "CPUExecutonProvider")
    assert proc.returncode == 2 and "Did you mean 'CPUExecutionProvider'?" in proc.stderr
    assert_no_traceback(proc)


def test_bad_arguments_exit_2(cnn_path: str) -> None:
    assert cli().returncode == 2
    assert cli("run", cnn_path, "--dim", "batch").returncode == 2
    assert cli("run", cnn_path, "--option", "nodot=1").returncode == 2
    proc = cli("explain", cnn_path, "--option", f"{SIMNPU}.precision=fp32")
    assert proc.returncode == 2 and "not in the provider list" in proc.stderr


# --------------------------------------------------------------------------- run


def test_run_random_inputs_and_save(cnn_path: str, tmp_path: Path) -> None:
    proc = cli("run", cnn_path, "--dim", "batch=3", "--save", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "probabilities: float32 (3, 10) mean=" in proc.stdout
    saved = np.load(tmp_path / "out" / "probabilities.npy")
    assert saved.shape == (3, 10)
    np.testing.assert_allclose(saved.sum(axis=1), 1.0, rtol=1e-5)


def test_run_with_given_input(cnn_path: str, tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((2, 1, 28, 28)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = cli("run", cnn_path, "--input", f"input={tmp_path / 'x.npy'}", "--save",
               str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    expected = ort.InferenceSession(cnn_path).run(None, {"input": x})[0]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "probabilities.npy"), expected)


def test_run_bad_input_exits_2(cnn_path: str, tmp_path: Path) -> None:
    proc = cli("run", cnn_path, "--input", f"nope={tmp_path / 'x.npy'}")
    assert proc.returncode == 2 and "no input 'nope'" in proc.stderr
    proc = cli("run", cnn_path, "--input", f"input={tmp_path / 'missing.npy'}")
    assert proc.returncode == 2 and "cannot read" in proc.stderr
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 5, 5), np.float32))
    proc = cli("run", cnn_path, "--input", f"input={tmp_path / 'wrong.npy'}")
    assert proc.returncode == 2 and "InvalidInput" in proc.stderr
    assert_no_traceback(proc)


def test_run_json(cnn_path: str, tmp_path: Path) -> None:
    proc = cli("run", cnn_path, "--dim", "batch=2", "--format", "json",
               "--save", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the whole of stdout is one object
    assert data["providers_used"] == [CPU]
    (out,) = data["outputs"]
    assert out["name"] == "probabilities"
    assert out["dtype"] == "float32" and out["shape"] == [2, 10]
    saved = np.load(tmp_path / "out" / "probabilities.npy")
    assert out["mean"] == pytest.approx(float(saved.mean()))
    assert out["min"] == pytest.approx(float(saved.min()))
    assert out["max"] == pytest.approx(float(saved.max()))
    assert data["saved"] == [str(tmp_path / "out" / "probabilities.npy")]
    assert data["run_time_ms"] > 0


def test_run_int64_inputs_get_small_non_negative_values(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"], name="gather")],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4])],
        [onnx.numpy_helper.from_array(table, "table")],
    )
    path = tmp_path / "gather.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    proc = cli("run", str(path), "--dim", "n=5")
    assert proc.returncode == 0, proc.stderr
    assert "out: float32 (5, 4)" in proc.stdout


# --------------------------------------------------------------------------- bench


def test_bench_json(resnet_path: str) -> None:
    proc = cli("bench", resnet_path, "--runs", "5", "--warmup", "1", "--dim", "batch=1",
               "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    lat = data["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    assert data["throughput_per_s"] > 0
    ops = [o["op"] for o in data["top_ops"]]
    assert "Conv" in ops or "NchwcConv" in ops  # NchwcConv: the layout pass (compiled kernels on)
    assert sum(o["share"] for o in data["top_ops"]) == pytest.approx(1.0, abs=1e-2)


def test_bench_text(cnn_path: str) -> None:
    proc = cli("bench", cnn_path, "--runs", "3", "--warmup", "0")
    assert proc.returncode == 0, proc.stderr
    assert "latency ms: p50" in proc.stdout and "throughput:" in proc.stdout
    assert "top operators by time" in proc.stdout and "Conv" in proc.stdout


def test_bench_progress_on_stderr(cnn_path: str) -> None:
    # 10 runs + 2 warm-up + 11 profiled = 23 steps; stderr is a pipe: plain lines.
    proc = cli("bench", cnn_path, "--runs", "10", "--warmup", "2", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # progress never reaches stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith("bench:")]
    assert 1 < len(lines) <= 10
    assert lines[-1].startswith("bench: 100% (23/23, ")
    quiet = cli("bench", cnn_path, "--runs", "10", "--warmup", "2",
                env_extra={"ONYXRT_PROGRESS": "0"})
    assert quiet.returncode == 0, quiet.stderr
    assert "bench:" not in quiet.stderr


# --------------------------------------------------------------------------- parity


def test_parity_same_provider_passes(cnn_path: str) -> None:
    proc = cli("parity", cnn_path, "--providers", CPU, "--vs", CPU, "--rtol", "0", "--atol", "0")
    assert proc.returncode == 0, proc.stderr
    assert "max abs diff 0.000e+00" in proc.stdout and "parity ok" in proc.stdout


@needs_simnpu
def test_parity_fp16_npu_fails_tight_tolerance(cnn_path: str) -> None:
    proc = cli("parity", cnn_path, "--providers", f"{SIMNPU},{CPU}", "--vs", CPU,
               "--option", f"{SIMNPU}.precision=fp16", "--dim", "batch=1",
               "--rtol", "1e-7", "--atol", "0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"A: {SIMNPU}" in proc.stdout
    assert "FAIL" in proc.stdout and "max rel diff" in proc.stdout


@needs_simnpu
def test_parity_fp16_npu_passes_generous_tolerance(cnn_path: str) -> None:
    proc = cli("parity", cnn_path, "--providers", f"{SIMNPU},{CPU}", "--vs", CPU,
               "--option", f"{SIMNPU}.precision=fp16", "--dim", "batch=1",
               "--rtol", "5e-2", "--atol", "1e-3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"A: {SIMNPU}" in proc.stdout and "parity ok" in proc.stdout


def test_parity_json_pass(cnn_path: str) -> None:
    proc = cli("parity", cnn_path, "--providers", CPU, "--vs", CPU, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["failed"] == 0
    assert data["a"]["providers_used"] == [CPU] and data["b"]["providers"] == [CPU]
    assert (data["rtol"], data["atol"]) == (1e-3, 1e-5)
    (out,) = data["outputs"]
    assert out["name"] == "probabilities" and out["ok"] is True
    assert out["max_abs"] == 0.0 and out["max_rel"] == 0.0 and out["mismatched"] == 0


@needs_simnpu
def test_parity_json_fail_keeps_exit_code_1(cnn_path: str) -> None:
    proc = cli("parity", cnn_path, "--providers", f"{SIMNPU},{CPU}", "--vs", CPU,
               "--option", f"{SIMNPU}.precision=fp16", "--dim", "batch=1",
               "--rtol", "1e-7", "--atol", "0", "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["failed"] == 1
    assert data["a"]["providers_used"] == [SIMNPU]
    (out,) = data["outputs"]
    assert out["ok"] is False and out["max_abs"] > 0 and out["max_rel"] > 1e-7
    assert 0 < out["mismatched"] <= out["size"] == 10


def test_parity_unknown_provider_exits_2(cnn_path: str) -> None:
    proc = cli("parity", cnn_path, "--providers", "NoSuchExecutionProvider", "--vs", CPU)
    assert proc.returncode == 2
    assert "NoSuchExecutionProvider" in proc.stderr
    assert_no_traceback(proc)


def test_help_and_provider_reports_point_at_docs_not_source_files():
    """Users read docs, not the package's source: no ``something.py`` in --help, in the
    providers report or in doctor's probe details (they name docs/*.md instead)."""
    import re

    source_file = re.compile(r"\b[\w/]+\.py\b")
    for args in (["--help"], ["providers", "--format", "json"], ["doctor"]):
        out = cli(*args)
        assert out.returncode == 0, out.stderr
        assert not source_file.findall(out.stdout), (args, source_file.findall(out.stdout))
