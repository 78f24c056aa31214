"""The compatibility shim (``onyxrt.compat``): unchanged onnxruntime code runs on onyxrt.

Each test runs in a child process: the shim changes ``sys.modules`` and
``sys.meta_path`` for the whole process, which must not leak into the other tests.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import onyxrt.compat
from onyxrt.compat import ONNXRUNTIME_API_VERSION

ONNXRUNTIME_INSTALLED = onyxrt.compat._real_onnxruntime_dir() is not None

# What a library written against onnxruntime does, unchanged: imports, options the way
# OCR libraries pass them, the capi exception classes, a run.
LIBRARY = '''
import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxruntime as ort
from onnxruntime.capi import _pybind_state as C
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument, NoSuchFile

ort.disable_telemetry_events()
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
sess = ort.InferenceSession(model.SerializeToString(), so,
                            providers=[("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})])
print("result", sess.run(None, {"x": np.array([-1.0, 2.0], np.float32)})[0].tolist())
try:
    sess.run(None, {"x": np.zeros(2, np.int64)})
except InvalidArgument as exc:
    print("caught InvalidArgument")
try:
    ort.InferenceSession("/no/such/file.onnx")
except NoSuchFile:
    print("caught NoSuchFile")
print("module", type(sess).__module__, ort.__version__, ort.__onyxrt_shim__)
'''


def _python(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def _assert_library_ran_on_onyxrt(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "result [0.0, 2.0]" in out
    assert "caught InvalidArgument" in out and "caught NoSuchFile" in out
    assert f"module onyxrt.session {ONNXRUNTIME_API_VERSION} True" in out


def test_install_makes_an_unchanged_library_run_on_onyxrt(tmp_path):
    (tmp_path / "library.py").write_text(LIBRARY)
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import onyxrt.compat; onyxrt.compat.install(); import library"
    _assert_library_ran_on_onyxrt(_python("-c", code))


def test_the_launcher_runs_a_script_a_module_and_code(tmp_path):
    script = tmp_path / "app.py"
    script.write_text(LIBRARY + "\nimport sys\nprint('argv', sys.argv[1:])\n")
    proc = _python("-m", "onyxrt.compat", str(script), "--flag", "value")
    _assert_library_ran_on_onyxrt(proc)
    assert "argv ['--flag', 'value']" in proc.stdout
    (tmp_path / "mymodule.py").write_text(LIBRARY)
    _assert_library_ran_on_onyxrt(_python("-m", "onyxrt.compat", "-m", "mymodule", cwd=tmp_path))
    _assert_library_ran_on_onyxrt(_python("-m", "onyxrt.compat", "-c", LIBRARY))
    exits = tmp_path / "exits.py"
    exits.write_text("import sys; sys.exit(3)")
    assert _python("-m", "onyxrt.compat", str(exits)).returncode == 3
    usage = _python("-m", "onyxrt.compat")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    missing = _python("-m", "onyxrt.compat", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "nope.py" in missing.stderr


def test_child_processes_of_a_shimmed_program_are_shimmed_too(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(LIBRARY)
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(f"""
        import subprocess, sys
        done = subprocess.run([sys.executable, {str(child)!r}], capture_output=True, text=True)
        sys.stdout.write(done.stdout); sys.stderr.write(done.stderr); sys.exit(done.returncode)
    """))
    _assert_library_ran_on_onyxrt(_python("-m", "onyxrt.compat", str(parent)))


def test_onyxrt_shim_command_runs_any_command_under_the_shim(tmp_path):
    (tmp_path / "app.py").write_text(LIBRARY)
    proc = _python("-m", "onyxrt", "shim", "--", sys.executable, str(tmp_path / "app.py"))
    _assert_library_ran_on_onyxrt(proc)
    path = _python("-m", "onyxrt", "shim", "--pythonpath")
    assert path.returncode == 0 and Path(path.stdout.strip()) == Path(onyxrt.compat.shim_pythonpath())
    assert (Path(path.stdout.strip()) / "onnxruntime" / "__init__.py").is_file()
    empty = _python("-m", "onyxrt", "shim")
    assert empty.returncode == 2 and "give a command" in empty.stderr
    failing = _python("-m", "onyxrt", "shim", "--", sys.executable, "-c", "raise SystemExit(5)")
    assert failing.returncode == 5


def test_the_shimmed_module_has_onnxruntimes_submodules_and_metadata():
    code = textwrap.dedent("""
        import importlib.metadata, importlib.util, sys
        import onyxrt, onyxrt.compat
        onyxrt.compat.install()
        import onnxruntime
        import onnxruntime.capi.onnxruntime_inference_collection as coll
        import onnxruntime.backend, onnxruntime.datasets
        from onnxruntime.capi import onnxruntime_pybind11_state as S
        assert coll.InferenceSession is onyxrt.InferenceSession
        assert S.Fail is onyxrt.capi.onnxruntime_pybind11_state.Fail
        assert onnxruntime.backend.prepare is onyxrt.backend.prepare
        assert onnxruntime.datasets.get_example("mul_1.onnx").endswith("mul_1.onnx")
        assert importlib.util.find_spec("onnxruntime") is not None
        assert onnxruntime.get_version_string() == onnxruntime.__version__
        assert onnxruntime.onyxrt_version == onyxrt.__version__
        print("dist", importlib.metadata.version("onnxruntime"))
        try:
            import onnxruntime.no_such_submodule
        except ModuleNotFoundError:
            print("unknown submodule refused")
        onyxrt.compat.uninstall()
        assert not onyxrt.compat.is_installed() and "onnxruntime" not in sys.modules
        print("ok")
    """)
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok" in proc.stdout and "unknown submodule refused" in proc.stdout
    real = importlib_version("onnxruntime") if ONNXRUNTIME_INSTALLED else ONNXRUNTIME_API_VERSION
    assert f"dist {real}" in proc.stdout  # an installed onnxruntime answers for itself


def importlib_version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


def test_package_metadata_answers_for_onnxruntime_when_it_is_not_installed():
    from onyxrt.compat import _OnnxruntimeFinder, _ShimDistribution

    assert _ShimDistribution().version == ONNXRUNTIME_API_VERSION
    assert _ShimDistribution().metadata["Name"] == "onnxruntime"
    code = textwrap.dedent("""
        import importlib.metadata, sys
        import onyxrt.compat
        # No other finder knows onnxruntime: the shim's distribution answers.
        class Nothing:
            @staticmethod
            def find_distributions(context=None):
                return iter(())
        sys.meta_path[:] = [m for m in sys.meta_path if not hasattr(m, "find_distributions")] + [Nothing]
        onyxrt.compat.install()
        print(importlib.metadata.version("onnxruntime"))
    """)
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == ONNXRUNTIME_API_VERSION
    assert list(_OnnxruntimeFinder().find_distributions(None)) == []


@pytest.mark.skipif(not ONNXRUNTIME_INSTALLED, reason="needs the onnxruntime wheel (a test dependency)")
def test_onnxruntime_tool_subpackages_load_from_an_installed_onnxruntime_over_onyxrt():
    code = textwrap.dedent("""
        import sys
        import onyxrt.compat
        onyxrt.compat.install()
        import onnxruntime.quantization
        assert sys.modules["onnxruntime"].__onyxrt_shim__
        assert onnxruntime.quantization.__file__.startswith(onyxrt.compat._real_onnxruntime_dir()[0])
        print("tool ok")
    """)
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tool ok" in proc.stdout


def test_tool_subpackages_without_onnxruntime_say_what_to_install():
    code = textwrap.dedent("""
        import onyxrt.compat
        onyxrt.compat._real_onnxruntime_dir = lambda: None  # as without the wheel
        onyxrt.compat.install()
        try:
            import onnxruntime.transformers
        except ImportError as exc:
            print("refused:", exc)
    """)
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused:" in proc.stdout and "pip install onnxruntime" in proc.stdout


@pytest.mark.skipif(not ONNXRUNTIME_INSTALLED, reason="needs the onnxruntime wheel (a test dependency)")
def test_installing_after_onnxruntime_was_imported_warns_and_later_imports_get_onyxrt():
    code = textwrap.dedent("""
        import warnings
        import onnxruntime as real
        import onyxrt.compat
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            onyxrt.compat.install()
        assert any(issubclass(w.category, onyxrt.compat.CompatWarning) for w in caught), caught
        import onnxruntime
        assert onnxruntime.__onyxrt_shim__ and not hasattr(real, "__onyxrt_shim__")
        onyxrt.compat.install()  # twice: harmless
        onyxrt.compat.uninstall()
        import onnxruntime as again
        assert not hasattr(again, "__onyxrt_shim__")
        print("ok")
    """)
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok" in proc.stdout
