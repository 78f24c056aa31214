"""The GPU check without a GPU (CI, this machine): benchmarks/gpu_check.py says why, from the
CUDA provider's own probe, and exits with status 2 before running anything; its install plan
(the CUDA major the driver supports, what to install, the offline pip commands) and the
``nox -s gpu`` session that follows it, with pip and the device stood in for."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
SKIP_ALL = "--skip=tests,library,conformance,exports,timing"


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plan() -> types.ModuleType:
    return _load("gpu_check_under_test", SCRIPT)


def _skip_on_a_gpu_machine() -> None:
    from onyxrt.discovery import catalog

    if "CUDAExecutionProvider" in catalog().available():  # pragma: no cover - a GPU machine
        pytest.skip("a usable CUDA device is present: the check would run")


# -- the script without a device --------------------------------------------------------


@pytest.mark.parametrize("args", [[], [SKIP_ALL, "--dry-run"]], ids=["every-phase", "dry-run"])
def test_without_a_usable_gpu_it_says_why_and_exits_2(args):
    _skip_on_a_gpu_machine()
    started = time.monotonic()
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    said = out.stderr.strip().splitlines()[-1]
    assert said.startswith("gpu_check: no usable GPU here — ")
    assert len(said.split("— ", 1)[1]) > 10, said  # the probe's reason, not an empty one
    assert time.monotonic() - started < 60  # it stops before any phase


# -- which CUDA major the driver supports ----------------------------------------------


def _no_nvidia_smi(*args, **kwargs):
    raise FileNotFoundError("nvidia-smi")


class _FakeLibcuda:
    def __init__(self, version: int | None):
        self.version = version

    def cuDriverGetVersion(self, pointer):  # noqa: N802 - the CUDA driver API's name
        if self.version is None:
            return 100  # CUDA_ERROR_NO_DEVICE
        pointer._obj.value = self.version
        return 0


NVIDIA_SMI_HEADER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159                Driver Version: 580.159        CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
"""


def test_the_cuda_major_comes_from_nvidia_smi_first(plan, monkeypatch):
    monkeypatch.setattr(plan.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, NVIDIA_SMI_HEADER, ""))
    monkeypatch.setattr(plan.ctypes, "CDLL", lambda name: _FakeLibcuda(12040))
    assert plan.driver_cuda_major() == (13, "nvidia-smi: CUDA Version 13.0")


def test_without_nvidia_smi_libcuda_says_the_cuda_major(plan, monkeypatch):
    monkeypatch.setattr(plan.subprocess, "run", _no_nvidia_smi)
    monkeypatch.setattr(plan.ctypes, "CDLL", lambda name: _FakeLibcuda(12040))
    assert plan.driver_cuda_major() == (12, "libcuda cuDriverGetVersion: 12040")
    monkeypatch.setattr(plan.ctypes, "CDLL", lambda name: _FakeLibcuda(13000))
    assert plan.driver_cuda_major()[0] == 13


def test_without_a_driver_the_cuda_major_is_12_and_says_so(plan, monkeypatch):
    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(plan.subprocess, "run", _no_nvidia_smi)
    monkeypatch.setattr(plan.ctypes, "CDLL", no_library)
    major, found = plan.driver_cuda_major()
    assert major == 12 and "by default" in found
    # a libcuda whose call fails (no device) is no answer either
    monkeypatch.setattr(plan.ctypes, "CDLL", lambda name: _FakeLibcuda(None))
    assert plan.driver_cuda_major()[0] == 12


def test_a_newer_driver_gets_the_cuda13_extra_an_older_one_a_reason(plan):
    assert [plan.cuda_extra_major(m) for m in (12, 13, 14)] == [12, 13, 13]
    with pytest.raises(ValueError, match="CUDA 11.*update the driver"):
        plan.cuda_extra_major(11)


# -- what is installed, online and offline -----------------------------------------------


def test_the_requirements_pick_cupy_and_onnxruntime_gpu_by_cuda_major(plan):
    twelve = plan.install_requirements(12, ["pytest>=8"])
    assert twelve[:5] == [".", "./plugins/ops", "./plugins/cpu", "./plugins/gpu", "./plugins/cuda[cuda12]"]
    assert "pytest>=8" in twelve and twelve[-1] == "onnxruntime-gpu[cuda,cudnn]==1.26.0"
    thirteen = plan.install_requirements(13)
    assert "./plugins/cuda[cuda13]" in thirteen and thirteen[-1] == "onnxruntime-gpu[cuda,cudnn]==1.31.1"
    with pytest.raises(ValueError, match="CUDA 11"):
        plan.install_requirements(11)
    # the extras named are onyxrt-cuda's own
    import tomllib

    extras = tomllib.loads((ROOT / "plugins/cuda/pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(extras) == [f"cuda{m}" for m in plan.CUDA_MAJORS]


def test_offline_pip_reads_only_the_wheel_folder(plan, tmp_path):
    assert plan.pip_install_args(["a", "b"]) == ["a", "b"]
    assert plan.pip_install_args(["a"], tmp_path) == ["--no-index", "--find-links", str(tmp_path), "a"]
    # the download command fills the folder with the build backends too (the checkout's
    # packages are built from it offline)
    download = plan.pip_download_command(["./plugins/cuda[cuda12]"], "wheels")
    assert download[:6] == ["python", "-m", "pip", "download", "-d", "wheels"]
    assert "hatchling>=1.27" in download and "setuptools>=77" in download


def _stand_in_wheel(folder: Path, name: str, version: str = "1.0") -> None:
    dist_info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{name}.py", "HERE = True\n")
        wheel.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist_info}/RECORD", "")


def test_the_offline_pip_command_installs_from_a_stand_in_wheel_folder(plan, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _stand_in_wheel(wheels, "standin_gpu_check")
    # pip with no configuration (this machine's may name extra indexes or wheel folders)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(tmp_path / "site")]
    out = subprocess.run([*pip, *plan.pip_install_args(["standin_gpu_check"], wheels)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "site" / "standin_gpu_check.py").is_file()
    # a requirement missing from the folder fails at once: no index is asked
    out = subprocess.run([*pip, *plan.pip_install_args(["not_in_the_folder"], wheels)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode != 0 and "No matching distribution" in out.stderr


def test_print_requirements_tells_how_to_fill_the_wheel_folder(plan):
    requirements = plan.install_requirements(13, ["pytest>=8"])
    text = plan.describe_install(13, "nvidia-smi: CUDA Version 13.0", requirements, "3.11")
    lines = text.splitlines()
    assert all(r in lines for r in requirements)
    download = next(line for line in lines if " pip download " in line)
    assert shlex.split(download) == plan.pip_download_command(requirements)
    assert "nox -s gpu -- --wheels DIR --cuda 13" in lines


# -- the nox session, with nox, pip and the device stood in for --------------------------


class _CommandFailed(Exception):
    def __init__(self, reason=None, *, return_code=None):
        super().__init__(reason)
        self.return_code = return_code


def _fake_nox() -> types.ModuleType:
    fake = types.ModuleType("nox")

    def session(func=None, **kwargs):
        return func if func is not None else (lambda f: f)

    fake.session = session
    fake.parametrize = lambda *a, **k: (lambda f: f)
    fake.options = types.SimpleNamespace()
    fake.Session = object
    fake.command = types.SimpleNamespace(CommandFailed=_CommandFailed)
    return fake


class _Session:
    """Records what the session installs; runs gpu_check.py for real (no GPU here)."""

    def __init__(self, posargs):
        self.posargs = posargs
        self.installed: list[str] = []
        self.ran: list[tuple[str, ...]] = []
        self.logs: list[str] = []

    def install(self, *args):
        self.installed += args

    def run(self, *args, **kwargs):
        self.ran.append(args)
        if args[:2] == ("python", str(SCRIPT)):
            out = subprocess.run([sys.executable, *args[1:]], capture_output=True, text=True, timeout=120)
            self.output = out.stdout + out.stderr
            if out.returncode:
                raise _CommandFailed(f"Returned code {out.returncode}", return_code=out.returncode)

    def log(self, message):
        self.logs.append(message)

    def error(self, message):
        raise RuntimeError(message)


@pytest.fixture
def noxfile(monkeypatch):
    monkeypatch.setitem(sys.modules, "nox", _fake_nox())
    return _load("noxfile_under_test", ROOT / "noxfile.py")


def test_nox_gpu_offline_installs_from_the_folder_then_exits_2_without_a_gpu(noxfile, tmp_path):
    _skip_on_a_gpu_machine()
    session = _Session(["--wheels", str(tmp_path), "--cuda", "12", SKIP_ALL])
    with pytest.raises(SystemExit) as stopped:
        noxfile.gpu(session)
    assert stopped.value.code == 2
    assert session.installed[:3] == ["--no-index", "--find-links", str(tmp_path)]
    assert "./plugins/cuda[cuda12]" in session.installed and "pytest>=8" in session.installed
    assert any(r.startswith("onnxruntime-gpu") for r in session.installed)
    assert session.ran[-1] == ("python", str(SCRIPT), SKIP_ALL)  # its own options go through
    assert "no usable GPU here" in session.output
    assert "no usable GPU" in session.logs[-1]


def test_nox_gpu_print_requirements_installs_nothing(noxfile, capsys):
    session = _Session(["--print-requirements", "--cuda", "13"])
    noxfile.gpu(session)
    assert session.installed == [] and session.ran == []
    assert "./plugins/cuda[cuda13]" in capsys.readouterr().out.splitlines()


def test_nox_gpu_refuses_a_missing_wheel_folder(noxfile, tmp_path):
    with pytest.raises(RuntimeError, match="no such folder"):
        noxfile.gpu(_Session(["--wheels", str(tmp_path / "missing"), "--cuda", "12"]))


def test_the_exports_phase_times_a_model_plainly_and_as_a_cuda_graph(plan, tmp_path):
    """The exports phase's measurement of one model file, on the simulated CuPy (no GPU):
    both runs, the graph replayed, its output the plain run's, the copies back counted."""
    from onyxrt.testing.models import resnet
    from onyxrt_gpu.testing.provider_tests import simulated_gpu

    path = tmp_path / "tiny_resnet.onnx"
    path.write_bytes(resnet(depth_blocks=(1,), width=8, num_classes=10, image=16).SerializeToString())
    installed = simulated_gpu(hip=False)
    next(installed)
    try:
        row = plan._time_export(str(path), 3)
    finally:
        installed.close()
    assert row["model"] == "tiny_resnet" and row["plain_ms"] > 0 and row["graph_ms"] > 0
    assert row["replays"] >= 3 and row["graph_failures"] == 0 and row["graph_vs_plain_max_abs"] == 0
    assert row["copies_to_host"] == 1  # the output
    assert row["cuda_vs_cpu_max_abs"] < 1e-3
