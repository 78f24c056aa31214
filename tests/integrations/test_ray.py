"""Batch inference on Ray Data (onyxrt.integrations.ray): nox -s ray.

The unit tests call OnyxPredictor directly; the others start a local Ray cluster with 2
CPUs and a small object store (shared machines), once for the module, and shut it down.
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs ray[data]: pip install 'onyxrt[ray]' (nox -s ray)")
pa = pytest.importorskip("pyarrow", reason="needs pyarrow (installed with ray[data])")
import pyarrow.parquet as pq  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import onyxrt as ort  # noqa: E402
from onyxrt.errors import ProviderUnavailable  # noqa: E402
from onyxrt.integrations.ray import (  # noqa: E402
    CUDA,
    BatchInferenceError,
    ColumnShapeError,
    ColumnTypeError,
    OnyxPredictor,
    RowCountMismatch,
    run_inference,
)
from onyxrt.testing import models  # noqa: E402

ROWS = 10_000
IMAGE = (3, 32, 32)
CPU_ONLY = {"intra_op_num_threads": 1}  # one core per worker: 1 vs 2 workers compares fairly


def small_cnn(batch: int | str = "batch") -> bytes:
    return models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32, batch=batch).SerializeToString()


def picker() -> bytes:
    """A model that fails on bad data: GatherElements with an index column out of range."""
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["x", "idx"], ["picked"], axis=1)],
        "picker",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch", 1])],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, ["batch", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model.SerializeToString()


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, *IMAGE)).astype(np.float32)


def write_parquet(folder: Path, columns: dict[str, pa.Array], files: int) -> Path:
    """Write a table as ``files`` Parquet files (Ray reads each as its own block)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(columns)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i:03d}.parquet")
    return folder


def flat_images(x: np.ndarray) -> pa.Array:
    """Images as Parquet fixed-size lists of floats (how flattened tensors usually land)."""
    per_row = int(np.prod(x.shape[1:]))
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), per_row)


# --------------------------------------------------------------------------- unit tests


def test_fixed_batch_model_is_chunked_and_padded_rows_dropped() -> None:
    x = images(10)
    symbolic = OnyxPredictor(small_cnn(), session_options=CPU_ONLY)
    fixed = OnyxPredictor(small_cnn(batch=4), session_options=CPU_ONLY)
    assert (symbolic.fixed_batch, fixed.fixed_batch) == (None, 4)

    want = symbolic({"input": x})["logits"]
    got = fixed({"id": np.arange(10), "input": x})
    assert got["logits"].shape == (10, 10)  # 4 + 4 + 2 (padded to 4, padding dropped)
    assert fixed.stats.runs == 3 and fixed.stats.rows == 10
    np.testing.assert_allclose(got["logits"], want, rtol=0, atol=1e-6)
    assert list(got["id"]) == list(range(10))  # the id column passes through


def test_flattened_rows_and_list_columns_are_reshaped_to_the_model_rows() -> None:
    x = images(6)
    p = OnyxPredictor(small_cnn(), input_columns={"input": "image"}, output_columns={"logits": "scores"})
    want = p({"image": x})["scores"]
    flat = x.reshape(6, -1)
    np.testing.assert_array_equal(p({"image": flat})["scores"], want)
    per_row = np.empty(6, dtype=object)  # what Ray Data makes of a Parquet list column
    per_row[:] = list(flat)
    out = p({"image": per_row, "label": np.arange(6)})
    np.testing.assert_array_equal(out["scores"], want)
    assert sorted(out) == ["label", "scores"]  # the image column is consumed, the label kept

    with pytest.raises(ColumnShapeError, match=r"rows of shape \[100\].*flattened rows of 3072"):
        p({"image": flat[:, :100]})


def test_wrong_dtype_names_the_column_and_both_types() -> None:
    p = OnyxPredictor(small_cnn(), input_columns={"input": "image"})
    with pytest.raises(ColumnTypeError) as info:
        p({"image": images(2).astype(np.float64)})
    message = str(info.value)
    assert "'image'" in message and "float64" in message and "tensor(float)" in message
    assert isinstance(info.value, ort.errors.InvalidInput)


def test_worker_without_gpu_uses_the_requested_providers() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort.ProviderFallbackWarning)
        p = OnyxPredictor(small_cnn(), providers=["CPUExecutionProvider"])
    assert p.gpu_ids == [] and [n for n, _ in p.providers_requested] == ["CPUExecutionProvider"]


def test_worker_given_a_gpu_puts_cuda_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a map_batches actor with num_gpus=1 sees (no GPU on this machine).
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])
    with pytest.warns(ort.ProviderFallbackWarning, match=CUDA):
        p = OnyxPredictor(small_cnn(), providers=["CPUExecutionProvider"])
    assert p.gpu_ids == [0]
    assert [n for n, _ in p.providers_requested] == [CUDA, "CPUExecutionProvider"]
    assert p.stats.providers_requested[0] == CUDA
    assert p.stats.fallbacks and p.stats.fallbacks[0].startswith(CUDA)  # the fallback policy applied
    assert p.session.get_providers() == ["CPUExecutionProvider"]
    # Options given for CUDA travel with it to the front.
    with pytest.warns(ort.ProviderFallbackWarning):
        p = OnyxPredictor(small_cnn(), providers=["CPUExecutionProvider", (CUDA, {"device_id": 0})])
    assert p.providers_requested[0] == (CUDA, {"device_id": 0})

    with pytest.raises(ProviderUnavailable, match=CUDA):  # strict mode: an error instead
        OnyxPredictor(small_cnn(), config_entries={"session.strict_providers": "1"})


def picker_batch(ids: np.ndarray, bad: list[int]) -> dict[str, np.ndarray]:
    """A batch for picker(): the rows whose id is in ``bad`` hold an index out of range."""
    idx = np.where(np.isin(ids, bad), 9, 0).astype(np.int64)[:, None]
    return {"id": ids, "x": np.ones((len(ids), 4), np.float32), "idx": idx}


def named_ids(text: str) -> set[int] | tuple[int, int]:
    """The ids a message's ``id 500..549, 1200..1249`` names (or ``(lo, hi)`` for the
    ``id 3..1999 in 57 separate runs`` form)."""
    if " in " in text:
        lo, hi = text.split(" in ")[0].split("..")
        return int(lo), int(hi)
    ids: set[int] = set()
    for part in text.split(", "):
        lo, _, hi = part.partition("..")
        ids.update(range(int(lo), int(hi or lo) + 1))
    return ids


def test_a_failing_run_names_the_batch_and_the_row() -> None:
    p = OnyxPredictor(picker(), id_column="id")
    p(picker_batch(np.arange(4), bad=[]))
    with pytest.raises(BatchInferenceError, match=r"batch 1 of worker \S+ \(4 rows; id 10\.\.13\) failed at "
                       r"row id=12 \(it fails when run alone\): KernelError: .*GatherElements"):
        p(picker_batch(np.arange(10, 14), bad=[12]))


def test_a_batch_in_any_order_is_named_by_its_id_set() -> None:
    # Ray Data may hand a batch made of pieces of several blocks, in any order.
    p = OnyxPredictor(picker(), id_column="id")
    ids = np.concatenate([np.arange(1200, 1250), np.arange(500, 550)])
    with pytest.raises(BatchInferenceError, match=r"\(100 rows; id 500\.\.549, 1200\.\.1249\) failed at row id=1234 "):
        p(picker_batch(ids, bad=[1234]))
    # Many separate runs: the span and how many runs; the failing rows by their ids.
    ids = np.random.default_rng(0).permutation(2000)[:100]
    with pytest.raises(BatchInferenceError) as info:
        p(picker_batch(ids, bad=[int(ids[70]), int(ids[3])]))
    first, second = sorted([int(ids[70]), int(ids[3])])
    assert f"id {ids.min()}..{ids.max()} in " in str(info.value), info.value
    assert f"failed at rows id={first}, {second} (each fails when run alone)" in str(info.value), info.value
    # Without an id column: positions in the batch, and how to get ids.
    p = OnyxPredictor(picker())
    with pytest.raises(BatchInferenceError, match=r"pass id_column= to name its rows\) failed at row #7 of the batch"):
        p({k: v for k, v in picker_batch(np.arange(20), bad=[7]).items() if k != "id"})


def test_the_search_for_failing_rows_is_bounded_and_says_what_it_found(monkeypatch: pytest.MonkeyPatch) -> None:
    p = OnyxPredictor(picker(), id_column="id")
    with pytest.raises(BatchInferenceError, match=r"failed at rows id=0\.\.9 \(each fails when run alone; "
                       r"the search stopped after 10 rows\)"):
        p(picker_batch(np.arange(100), bad=list(range(100))))
    runs = p.stats.runs

    real = p.session.run

    def too_big(names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if len(feeds["x"]) > 60:  # a batch that fails only as a whole (e.g. out of memory)
            raise ort.errors.OutOfMemory("too many rows at once")
        return real(names, feeds)

    monkeypatch.setattr(p.session, "run", too_big)
    with pytest.raises(BatchInferenceError, match=r"failed \(neither half of it fails when run alone\): OutOfMemory"):
        p(picker_batch(np.arange(100), bad=[]))

    def rows_together(names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if {1, 2} <= set(feeds["x"][:, 0].tolist()):  # rows 1 and 2 fail only together
            raise ort.errors.KernelError("rows 1 and 2")
        return real(names, feeds)

    monkeypatch.setattr(p.session, "run", rows_together)
    batch = picker_batch(np.arange(100, 108), bad=[])
    batch["x"][:, 0] = np.arange(8)
    with pytest.raises(BatchInferenceError, match=r"failed \(no single row fails when run alone; the smallest failing "
                       r"part found: rows id=100\.\.103\): KernelError: rows 1 and 2"):
        p(batch)

    def bad_feed(names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise ort.errors.InvalidInput("input 'x' has the wrong shape")  # the same for every row

    monkeypatch.setattr(p.session, "run", bad_feed)
    before = p.stats.runs
    with pytest.raises(BatchInferenceError, match=r"\(100 rows; id 0\.\.99\) failed: InvalidInput: "):
        p(picker_batch(np.arange(100), bad=[]))
    assert p.stats.runs == before and runs < 40  # no search, and the bounded one was short


# --------------------------------------------------------------------------- on a Ray cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    logging.getLogger("ray").setLevel(logging.WARNING)  # keep failure reports readable
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    x = images(ROWS, seed=1)
    folder = write_parquet(tmp_path_factory.mktemp("images"),
                           {"id": pa.array(np.arange(ROWS)), "image": flat_images(x)}, files=10)
    return folder, x


def test_ray_outputs_equal_a_single_process_run_with_1_and_2_workers(
    cluster: None, image_dataset: tuple[Path, np.ndarray]
) -> None:
    folder, x = image_dataset
    model = small_cnn()
    t0 = time.perf_counter()
    sess = ort.InferenceSession(model, _options(), providers=["CPUExecutionProvider"])
    want = np.concatenate([sess.run(None, {"input": x[i : i + 256]})[0] for i in range(0, ROWS, 256)])
    single = ROWS / (time.perf_counter() - t0)

    results = {}
    for workers in (1, 2):
        # Half a CPU each so that 2 actors leave a CPU of the 2 for the Parquet reads.
        result = run_inference(ray.data.read_parquet(str(folder), override_num_blocks=20), model, workers=workers, batch_size=256,
                               num_cpus_per_worker=0.5, input_columns={"input": "image"}, id_column="id",
                               session_options=CPU_ONLY)
        out = result.dataset.to_pandas()
        assert result.rows == ROWS and len(out) == ROWS
        order = np.argsort(out["id"].to_numpy())
        assert (out["id"].to_numpy()[order] == np.arange(ROWS)).all()
        got = np.stack(out["logits"].to_numpy()[order])
        diff = float(np.abs(got - want).max())
        assert diff <= 1e-6, diff
        assert len(result.workers) == workers, result.workers
        assert sum(w.rows for w in result.workers) == ROWS
        assert all(w.providers == ["CPUExecutionProvider"] for w in result.workers), result.workers
        # Which actor takes which block is Ray Data's choice: on a loaded machine the first
        # actor up may take them all, so the rows per worker are printed, not asserted.
        results[workers] = (result, diff)

    print(f"\nsingle process (1 thread, batch 256): {single:.0f} rows/s")
    for workers, (result, diff) in results.items():
        compute = ROWS / (max(w.run_ms for w in result.workers) / 1e3)
        print(f"{workers} worker(s): {result.rows_per_second:.0f} rows/s end to end "
              f"({result.seconds:.1f} s incl. actor start), {compute:.0f} rows/s in session.run; "
              f"max |diff| vs single process {diff:g}")
        print("\n".join(result.summary_lines()[1:]))


def _options() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


@pytest.fixture(scope="module")
def picker_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 rows in 8 files; row id 1234 has an index the model cannot gather."""
    idx = np.zeros((2000, 1), np.int64)
    idx[1234] = 9
    return write_parquet(tmp_path_factory.mktemp("picker"), {
        "id": pa.array(np.arange(2000)),
        "x": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(2000 * 4, np.float32)), 4),
        "idx": pa.FixedSizeListArray.from_arrays(pa.array(idx.reshape(-1)), 1),
    }, files=8)


@pytest.fixture(scope="module")
def shuffled_picker_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """picker_dataset with its ids in random order: no batch holds consecutive ids."""
    ids = np.random.default_rng(2).permutation(2000)
    idx = np.where(ids == 1234, 9, 0).astype(np.int64)
    return write_parquet(tmp_path_factory.mktemp("shuffled-picker"), {
        "id": pa.array(ids),
        "x": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(2000 * 4, np.float32)), 4),
        "idx": pa.FixedSizeListArray.from_arrays(pa.array(idx), 1),
    }, files=8)


def test_a_batch_that_raises_surfaces_naming_the_batch_and_the_row(
    cluster: None, shuffled_picker_dataset: Path
) -> None:
    with pytest.raises(BatchInferenceError) as info:
        run_inference(ray.data.read_parquet(str(shuffled_picker_dataset), override_num_blocks=8), picker(),
                      workers=2, num_cpus_per_worker=0.5, batch_size=100, id_column="id")
    message = str(info.value)
    named = re.search(r"batch \d+ of worker \S+ \(\d+ rows; id ([^)]+)\) failed at row id=1234 "
                      r"\(it fails when run alone\): KernelError: .*GatherElements", message)
    assert named, message
    ids = named_ids(named[1])  # the batch named holds row 1234
    assert (ids[0] <= 1234 <= ids[1]) if isinstance(ids, tuple) else 1234 in ids, message


def test_bad_rows_in_a_list_column_name_the_row(cluster: None, tmp_path: Path) -> None:
    rows = [np.zeros(3 * 32 * 32, np.float32) for _ in range(600)]
    rows[321] = rows[321][:-1]
    folder = write_parquet(tmp_path / "ragged", {
        "id": pa.array(np.arange(600)), "image": pa.array(rows, type=pa.list_(pa.float32()))}, files=3)
    with pytest.raises(ColumnShapeError, match=r"id=321 with shape \(3071,\)"):
        run_inference(ray.data.read_parquet(str(folder), override_num_blocks=20), small_cnn(), input_columns={"input": "image"},
                      id_column="id", batch_size=100)


def test_actors_taking_every_cpu_are_warned_about(cluster: None) -> None:
    # An in-memory dataset needs no read task, so this job still finishes.
    ds = ray.data.from_items([{"id": i, "x": np.ones(4, np.float32), "idx": np.array([i % 4])} for i in range(40)])
    with pytest.warns(RuntimeWarning, match="reserve 2 of the cluster's 2 CPUs"):
        result = run_inference(ds, picker(), workers=2, batch_size=10, worker_column="onyxrt_worker")
    assert result.rows == 40
    assert set(result.dataset.unique("onyxrt_worker")) <= {w.worker for w in result.workers}


def test_row_count_check_catches_silently_dropped_rows(cluster: None, picker_dataset: Path) -> None:
    # Told to tolerate failed blocks, Ray Data finishes without the rows of the failed one.
    ctx = ray.data.DataContext.get_current()
    saved = ctx.max_errored_blocks
    ctx.max_errored_blocks = 1
    try:
        with pytest.raises(RowCountMismatch, match=r"for 2000 input rows: \d+ row\(s\) dropped") as info:
            run_inference(ray.data.read_parquet(str(picker_dataset), override_num_blocks=8), picker(), workers=1,
                          batch_size=100, id_column="id")
    finally:
        ctx.max_errored_blocks = saved
    ranges = re.findall(r"(\d+)\.\.(\d+)", str(info.value).split("missing:")[1])
    assert any(int(a) <= 1234 <= int(b) for a, b in ranges), str(info.value)  # the failed block's rows
