"""Hostile external data and model files (issue 19, items 1-5): tensors hidden in function
bodies and other attributes, check-then-open races, sizes checked before reading, files
that are not regular files, and OS errors from path handling.

Cases that would hang or exhaust memory on a regression (a FIFO, /dev/zero, a 16 GiB
sparse file) run in a child process with a timeout and an address-space cap, so a
regression fails the test instead of freezing the runner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.errors import InvalidModel, ModelFileNotFound, UnsafeExternalData
from onyxrt.loader import load_model

B = np.array([1.0, 2.0, 3.0], np.float32)
SECRET = np.array([41.0, 42.0, 43.0], np.float32)


def _external(name: str, array: np.ndarray, location: str, **extra: str) -> onnx.TensorProto:
    t = numpy_helper.from_array(array, name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, **extra}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def _const_add_model(value: onnx.TensorProto) -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Constant", [], ["c"], name="const", value=value),
            helper.make_node("Add", ["x", "c"], ["y"], name="add"),
        ],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )


def _function_model(value: onnx.TensorProto) -> onnx.ModelProto:
    """y = AddConst(x): a model-local function whose body holds a Constant."""
    body = [
        helper.make_node("Constant", [], ["k"], value=value),
        helper.make_node("Add", ["a", "k"], ["b"]),
    ]
    fn = helper.make_function("local", "AddConst", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("AddConst", ["x"], ["y"], name="call", domain="local")],
        "g",
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
        ir_version=9,
    )


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """(model folder holding good data, a folder outside it holding a secret)."""
    model_dir, outside = tmp_path / "model", tmp_path / "outside"
    model_dir.mkdir()
    outside.mkdir()
    (model_dir / "data.bin").write_bytes(B.tobytes())
    (outside / "secret.bin").write_bytes(SECRET.tobytes())
    return model_dir, outside


def _save(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _run(path, opts=None) -> np.ndarray:
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": np.zeros(3, np.float32)})[0]


# -- 2. every tensor of the model goes through the checked reader ---------------------------


def test_external_constant_in_a_function_body_is_read_from_the_model_folder(folders, monkeypatch, tmp_path):
    model_dir, _ = folders
    path = _save(_function_model(_external("k", B, "data.bin")), model_dir)
    (tmp_path / "data.bin").write_bytes(SECRET.tobytes())  # the same name in the cwd
    monkeypatch.chdir(tmp_path)
    np.testing.assert_array_equal(_run(str(path)), B)


@pytest.mark.parametrize("location", ["../outside/secret.bin", "/etc/hostname", "sub/../../outside/secret.bin"])
def test_escaping_constant_in_a_function_body_is_refused_naming_it(folders, location):
    model_dir, _ = folders
    path = _save(_function_model(_external("k", B, location)), model_dir)
    with pytest.raises(UnsafeExternalData) as err:
        _run(str(path))
    message = str(err.value)
    assert "in function 'local:AddConst'" in message and repr(location) in message


def test_external_sparse_tensor_attribute_is_checked(folders):
    model_dir, _ = folders
    values = _external("v", SECRET, "../outside/secret.bin")
    indices = numpy_helper.from_array(np.array([0, 1, 2], np.int64), "i")
    sparse = helper.make_sparse_tensor(values, indices, [3])
    model = make_model(
        [
            helper.make_node("Constant", [], ["c"], name="sparse_const", sparse_value=sparse),
            helper.make_node("Add", ["x", "c"], ["y"], name="add"),
        ],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    with pytest.raises(UnsafeExternalData, match="sparse_const"):
        _run(str(_save(model, model_dir)))


def test_external_tensor_in_training_info_and_function_defaults_are_checked(folders):
    model_dir, _ = folders
    model = _const_add_model(_external("c", B, "data.bin"))
    info = model.training_info.add()
    info.initialization.CopyFrom(
        helper.make_graph([], "init", [], [], [_external("t", SECRET, "../outside/secret.bin")])
    )
    with pytest.raises(UnsafeExternalData, match=r"training_info\[0\]"):
        load_model(_save(model, model_dir))
    fn_model = _function_model(numpy_helper.from_array(B, "k"))
    fn_model.functions[0].attribute_proto.append(
        helper.make_attribute("w", _external("w", SECRET, "../outside/secret.bin"))
    )
    with pytest.raises(UnsafeExternalData, match="default of attribute 'w'"):
        load_model(_save(fn_model, model_dir))


def test_a_tensor_left_external_is_an_error_never_a_read_from_the_cwd(folders, monkeypatch):
    """Defense in depth: a tensor still marked external where weights are read (here a
    caller bypassing the loader) is an error, not onnx's read relative to the cwd."""
    from onyxrt.graph import tensor_array

    model_dir, _ = folders
    monkeypatch.chdir(model_dir)
    with pytest.raises(ValueError, match="not loaded"):
        tensor_array(_external("c", B, "data.bin"))


# -- 1. no folder: bytes of a model whose Constant names a file in the cwd ------------------


def test_bytes_model_with_external_constant_does_not_read_the_cwd(folders, monkeypatch):
    model_dir, _ = folders
    monkeypatch.chdir(model_dir)
    model = _function_model(_external("k", B, "data.bin"))
    with pytest.raises(UnsafeExternalData, match="no folder"):
        _run(model.SerializeToString())
    with pytest.raises(UnsafeExternalData, match="no folder"):
        _run(model)


# -- 3. check-then-open races ---------------------------------------------------------------


def _swap_dir_for_link(folder: Path, target: Path) -> None:
    os.rename(folder, folder.with_name(folder.name + ".real"))
    folder.symlink_to(target, target_is_directory=True)


def test_folder_swapped_for_a_symlink_right_before_the_open_is_refused(folders, monkeypatch):
    """The swap lands between every check onyxrt could make on the path and the open:
    what is opened is checked, so the secret is refused, not returned."""
    model_dir, outside = folders
    sub = model_dir / "sub"
    sub.mkdir()
    (sub / "secret.bin").write_bytes(B.tobytes())
    path = _save(_const_add_model(_external("c", B, "sub/secret.bin")), model_dir)
    real_open = os.open

    def swapping_open(file, flags, *args, **kwargs):
        if str(file).endswith("sub/secret.bin") and not sub.is_symlink():
            _swap_dir_for_link(sub, outside)
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swapping_open)
    with pytest.raises(UnsafeExternalData) as err:
        _run(str(path))
    assert str(outside / "secret.bin") in str(err.value)  # names where it really led


def test_racing_folder_swaps_never_leak_and_never_escape_untyped(folders):
    """A thread flips sub/ between a real folder and a symlink out of the model's folder
    while the model loads 300 times: each load returns the good data or a typed error."""
    model_dir, outside = folders
    sub, real = model_dir / "sub", model_dir / "sub.real"
    real.mkdir()
    (real / "secret.bin").write_bytes(B.tobytes())
    sub.symlink_to(real, target_is_directory=True)
    path = _save(_const_add_model(_external("c", B, "sub/secret.bin")), model_dir)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            for target in (outside, real):
                tmp = model_dir / "sub.tmp"
                tmp.symlink_to(target, target_is_directory=True)
                os.replace(tmp, sub)

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    outcomes = {"good": 0, "refused": 0}
    try:
        for _ in range(300):
            try:
                loaded = load_model(path)
            except (UnsafeExternalData, InvalidModel):
                outcomes["refused"] += 1
                continue
            value = numpy_helper.to_array(loaded.proto.graph.node[0].attribute[0].t)
            np.testing.assert_array_equal(value, B)  # never SECRET
            outcomes["good"] += 1
    finally:
        stop.set()
        flipper.join()
    assert outcomes["good"] + outcomes["refused"] == 300


# -- 4. sizes before reading; regular files only --------------------------------------------


def _child(code: str, timeout: float = 60, memory_gib: int = 3) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child with an address-space cap; a hang is a timeout."""
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({memory_gib} << 30, {memory_gib} << 30))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )


def _refusal_in_child(path: Path, error: str) -> str:
    """The message of the ``error`` creating a session on ``path`` raises in a child (a
    hang is a timeout, not a frozen runner)."""
    done = _child(
        f"""
        import onyxrt as ort
        from onyxrt.errors import {error}
        try:
            ort.InferenceSession({str(path)!r}, providers=["CPUExecutionProvider"])
        except {error} as exc:
            print("refused:", exc)
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout, done.stdout
    return done.stdout


def test_huge_sparse_data_file_beside_a_small_tensor_reads_only_the_tensor(folders):
    model_dir, _ = folders
    with open(model_dir / "huge.bin", "wb") as fh:
        fh.write(B.tobytes())
        fh.truncate(16 << 30)  # 16 GiB, sparse: no disk used
    path = _save(_const_add_model(_external("c", B, "huge.bin")), model_dir)  # no length
    done = _child(
        f"""
        import numpy as np, onyxrt as ort
        s = ort.InferenceSession({str(path)!r}, providers=["CPUExecutionProvider"])
        print(s.run(None, {{"x": np.zeros(3, np.float32)}})[0].tolist())
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[1.0, 2.0, 3.0]"


def test_declared_length_must_match_the_shape(folders):
    model_dir, _ = folders
    path = _save(_const_add_model(_external("c", B, "data.bin", length="4")), model_dir)
    with pytest.raises(UnsafeExternalData, match=r"length 4 does not match the 12 bytes"):
        _run(str(path))


def test_fifo_as_external_data_is_refused_without_blocking(folders):
    model_dir, _ = folders
    os.mkfifo(model_dir / "pipe.bin")
    path = _save(_const_add_model(_external("c", B, "pipe.bin", length="12")), model_dir)
    refused = _refusal_in_child(path, "UnsafeExternalData")
    assert "FIFO" in refused and "'c'" in refused


def test_symlink_to_dev_zero_as_external_data_is_refused(folders):
    model_dir, _ = folders
    (model_dir / "zero.bin").symlink_to("/dev/zero")
    path = _save(_const_add_model(_external("c", B, "zero.bin")), model_dir)
    with pytest.raises(UnsafeExternalData, match="/dev/zero"):
        _run(str(path))


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder_link"])
def test_model_path_that_is_not_a_regular_file_is_refused_quickly(tmp_path, kind):
    path = tmp_path / "model.onnx"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(tmp_path, target_is_directory=True)
    assert str(path) in _refusal_in_child(path, "InvalidModel")


# -- 5. OS errors from path handling are typed and name the tensor and the path --------------


def test_external_location_too_long_is_typed(folders):
    model_dir, _ = folders
    location = "a" * 5000 + ".bin"
    path = _save(_const_add_model(_external("c", B, location)), model_dir)
    with pytest.raises(UnsafeExternalData) as err:
        _run(str(path))
    assert "'c'" in str(err.value) and "too long" in str(err.value)


def test_external_location_through_a_symlink_loop_is_typed(folders):
    model_dir, _ = folders
    (model_dir / "loop_a").symlink_to(model_dir / "loop_b")
    (model_dir / "loop_b").symlink_to(model_dir / "loop_a")
    path = _save(_const_add_model(_external("c", B, "loop_a/data.bin")), model_dir)
    with pytest.raises(UnsafeExternalData) as err:
        _run(str(path))
    assert "'c'" in str(err.value) and "loop_a/data.bin" in str(err.value)


def test_model_path_errors_are_typed(tmp_path):
    with pytest.raises(InvalidModel, match="too long"):
        ort.InferenceSession(str(tmp_path / ("m" * 5000)), providers=["CPUExecutionProvider"])
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(InvalidModel, match="symbolic links"):
        ort.InferenceSession(str(tmp_path / "a"), providers=["CPUExecutionProvider"])
    with pytest.raises(ModelFileNotFound):
        ort.InferenceSession(str(tmp_path / "absent.onnx"), providers=["CPUExecutionProvider"])


# -- onnxruntime's rule for symlinked models (Hugging Face's cache) -------------------------


def _hf_cache(tmp_path: Path, data_dir: str) -> Path:
    """tmp/blobs/guid1 (the model), tmp/<data_dir>/guid2 (its data), and
    snapshots/v/{model.onnx, data.bin} linking to them, as huggingface_hub lays out."""
    blobs, data, snap = tmp_path / "blobs", tmp_path / data_dir, tmp_path / "snapshots" / "v"
    for d in (blobs, data, snap):
        d.mkdir(parents=True, exist_ok=True)
    (data / "guid2").write_bytes(B.tobytes())
    (blobs / "guid1").write_bytes(_const_add_model(_external("c", B, "data.bin")).SerializeToString())
    (snap / "model.onnx").symlink_to(blobs / "guid1")
    (snap / "data.bin").symlink_to(data / "guid2")
    return snap / "model.onnx"


@pytest.mark.parametrize("data_dir", ["blobs", "blobs/data"])
def test_hugging_face_cache_layout_loads(tmp_path, data_dir):
    np.testing.assert_array_equal(_run(str(_hf_cache(tmp_path, data_dir))), B)


def test_symlinked_data_outside_both_model_folders_is_refused(tmp_path):
    with pytest.raises(UnsafeExternalData, match="outside"):
        _run(str(_hf_cache(tmp_path, "elsewhere")))
