"""The Chrome-trace profiler: ``enable_profiling`` / ``profile_file_prefix`` /
``end_profiling``, in onnxruntime's trace format (compared with onnxruntime's own trace
where the two should agree)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort

CPU = "CPUExecutionProvider"
TOY = "ToyDeviceExecutionProvider"


def _options(prefix: Path) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(prefix)
    return so


def _x(n: int = 2) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32)


def _load_trace(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _profile_twice(model: onnx.ModelProto, source, tmp_path: Path, **kwargs):
    sess = ort.InferenceSession(source, _options(tmp_path / "prof"), **kwargs)
    for n in (2, 5):
        sess.run(None, {"x": _x(n)})
    path = sess.end_profiling()
    return sess, path, _load_trace(path)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def test_trace_file_has_session_and_node_events(tmp_path, add_relu_model):
    model_path = tmp_path / "model.onnx"
    onnx.save_model(add_relu_model, model_path)
    sess, path, events = _profile_twice(add_relu_model, str(model_path), tmp_path)

    assert Path(path).is_file()
    assert Path(path).parent == tmp_path
    assert Path(path).name.startswith("prof_") and path.endswith(".json")
    assert isinstance(events, list) and events
    for ev in events:
        assert ev["ph"] == "X"
        assert _number(ev["ts"]) and _number(ev["dur"]) and ev["dur"] >= 0
        assert {"cat", "pid", "tid", "name", "args"} <= set(ev)

    session = [ev["name"] for ev in events if ev["cat"] == "Session"]
    assert session.count("model_loading_uri") == 1
    assert session.count("session_initialization") == 1
    assert session.count("model_run") == 2

    nodes = [ev for ev in events if ev["cat"] == "Node"]
    assert [ev["name"] for ev in nodes] == ["add_kernel_time", "relu_kernel_time"] * 2
    for ev, batch in zip(nodes, (2, 2, 5, 5)):
        args = ev["args"]
        assert args["provider"] == CPU
        assert args["op_name"] == {"add_kernel_time": "Add", "relu_kernel_time": "Relu"}[ev["name"]]
        assert [list(d.values())[0] for d in args["output_type_shape"]] == [[batch, 3]]
        shapes = [list(d.values())[0] for d in args["input_type_shape"]]
        if args["op_name"] == "Add":
            assert shapes == [[batch, 3], [3]]
        else:
            assert shapes == [[batch, 3]]
        assert args["output_size"] == str(batch * 3 * 4)


def test_bytes_source_records_model_loading_array(tmp_path, add_relu_model):
    _, _, events = _profile_twice(add_relu_model, add_relu_model.SerializeToString(), tmp_path)
    names = [ev["name"] for ev in events if ev["cat"] == "Session"]
    assert "model_loading_array" in names and "model_loading_uri" not in names


def test_session_events_are_in_order_and_node_events_lie_within_runs(tmp_path, add_relu_model):
    _, _, events = _profile_twice(add_relu_model, add_relu_model, tmp_path)
    by_name = {}
    for ev in events:
        by_name.setdefault(ev["name"], []).append(ev)
    (load,) = by_name["model_loading_array"]
    (init,) = by_name["session_initialization"]
    runs = sorted(by_name["model_run"], key=lambda ev: ev["ts"])
    assert load["ts"] <= init["ts"] <= runs[0]["ts"] <= runs[1]["ts"]
    slack = 1.0  # microseconds of rounding
    for ev in events:
        if ev["cat"] != "Node":
            continue
        assert any(
            run["ts"] - slack <= ev["ts"] and ev["ts"] + ev["dur"] <= run["ts"] + run["dur"] + slack
            for run in runs
        ), ev


def test_node_event_names_match_the_placement(tmp_path):
    model = make_model(
        [
            helper.make_node("Add", ["x", "w"], ["a"], name="first_add"),
            helper.make_node("Relu", ["a"], ["r"], name="the_relu"),
            helper.make_node("Softmax", ["r"], ["y"], name="softmax_node", axis=-1),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
        {"w": np.array([1.0, -2.0, 3.0], np.float32)},
    )
    sess, _, events = _profile_twice(model, model, tmp_path)
    node_events = [ev for ev in events if ev["cat"] == "Node"]
    placed = {n.node: (n.op_type, n.provider) for n in sess.placement.nodes}
    names = [ev["name"].removesuffix("_kernel_time") for ev in node_events]
    assert names == [n.node for n in sess.placement.nodes] * 2
    for ev in node_events:
        node = ev["name"].removesuffix("_kernel_time")
        assert (ev["args"]["op_name"], ev["args"]["provider"]) == placed[node]


def test_device_nodes_name_their_provider(toy_provider, tmp_path):
    model = make_model(
        [
            helper.make_node("Add", ["x", "w"], ["a"], name="add"),
            helper.make_node("Softmax", ["a"], ["y"], name="softmax", axis=-1),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
        {"w": np.array([1.0, -2.0, 3.0], np.float32)},
    )
    sess, _, events = _profile_twice(model, model, tmp_path, providers=[TOY, CPU])
    assert sess.placement.nodes_by_provider() == {TOY: ["add"], CPU: ["softmax"]}
    providers = {
        ev["name"]: ev["args"]["provider"]
        for ev in events
        if ev["cat"] == "Node" and ev["args"]["op_name"] != "Memcpy"
    }
    assert providers == {"add_kernel_time": TOY, "softmax_kernel_time": CPU}
    shapes = [ev["args"]["output_type_shape"] for ev in events if ev["name"] == "add_kernel_time"]
    assert [list(s[0].values())[0] for s in shapes] == [[2, 3], [5, 3]]


def test_device_nodes_report_their_output_size(toy_provider, tmp_path, add_relu_model):
    _, _, events = _profile_twice(add_relu_model, add_relu_model, tmp_path, providers=[TOY, CPU])
    relu = [ev["args"] for ev in events if ev["name"] == "relu_kernel_time"]
    assert [(a["provider"], a["output_size"]) for a in relu] == [(TOY, "24"), (TOY, "60")]
    assert [a["activation_size"] for a in relu] == ["24", "60"]


def _ort_trace(model: onnx.ModelProto, tmp_path: Path) -> list[dict]:
    so = onnxruntime.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "ort")
    sess = onnxruntime.InferenceSession(model.SerializeToString(), so, providers=[CPU])
    sess.run(None, {"x": _x()})
    return _load_trace(sess.end_profiling())


def _node_args(events: list[dict]) -> dict[str, dict]:
    return {ev["name"]: ev["args"] for ev in events if ev["cat"] == "Node"}


def test_node_sizes_match_onnxruntime(tmp_path, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, _options(tmp_path / "ours"))
    sess.run(None, {"x": _x()})
    ours = _node_args(_load_trace(sess.end_profiling()))
    theirs = _node_args(_ort_trace(add_relu_model, tmp_path))
    keys = ("activation_size", "parameter_size", "output_size")
    assert {n: {k: a[k] for k in keys} for n, a in ours.items()} == {
        n: {k: a[k] for k in keys} for n, a in theirs.items()
    }


def test_type_shapes_match_onnxruntime(tmp_path, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, _options(tmp_path / "ours"))
    sess.run(None, {"x": _x()})
    ours = _node_args(_load_trace(sess.end_profiling()))
    theirs = _node_args(_ort_trace(add_relu_model, tmp_path))
    keys = ("op_name", "provider", "input_type_shape", "output_type_shape")
    assert {n: {k: a[k] for k in keys} for n, a in ours.items()} == {
        n: {k: a[k] for k in keys} for n, a in theirs.items()
    }


def test_end_profiling_without_profiling_returns_empty_string(tmp_path, add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    sess.run(None, {"x": _x()})
    assert sess.end_profiling() == ""


def test_end_profiling_twice_writes_one_file(tmp_path, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, _options(tmp_path / "prof"))
    sess.run(None, {"x": _x()})
    first = sess.end_profiling()
    assert first
    sess.run(None, {"x": _x()})
    assert sess.end_profiling() == ""
    assert [p.name for p in tmp_path.iterdir()] == [Path(first).name]


def test_sessions_sharing_a_prefix_write_separate_files(tmp_path, add_relu_model):
    paths = []
    for _ in range(2):
        sess = ort.InferenceSession(add_relu_model, _options(tmp_path / "shared"))
        sess.run(None, {"x": _x()})
        paths.append(sess.end_profiling())
    assert paths[0] != paths[1]
    for path in paths:
        runs = [ev for ev in _load_trace(path) if ev["name"] == "model_run"]
        assert len(runs) == 1
