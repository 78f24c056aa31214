"""Score a Parquet dataset of images with onyxrt on Ray Data, end to end.

    pip install "onyxrt[ray]"
    python docs/examples/ray_batch_inference.py --rows 10000 --workers 2

It builds a small ResNet (3x32x32 images, 10 classes) with onyxrt's model builders,
writes ``--rows`` random images to a temporary folder as Parquet (flattened to lists of
3072 floats, as images usually land in Parquet), scores them on a pool of Ray actors with
one onyxrt session each, checks that every row came back, and prints the throughput and
what each worker did. Pass ``--address auto`` to use a running cluster instead of a local
one (the model then travels as bytes; the temporary folder must be visible to every node).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from onyxrt.integrations.ray import run_inference
from onyxrt.testing import models


def write_images(folder: Path, rows: int, files: int = 10) -> None:
    """``rows`` random 3x32x32 float32 images, with an ``id`` column, in ``files`` files."""
    rng = np.random.default_rng(0)
    per_file = -(-rows // files)
    for i, start in enumerate(range(0, rows, per_file)):
        n = min(per_file, rows - start)
        flat = rng.standard_normal(n * 3 * 32 * 32).astype(np.float32)
        table = pa.table({
            "id": pa.array(np.arange(start, start + n)),
            "image": pa.FixedSizeListArray.from_arrays(pa.array(flat), 3 * 32 * 32),
        })
        pq.write_table(table, folder / f"part-{i:03d}.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2, help="actors, one session each")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--gpus-per-worker", type=float, default=0,
                        help="reserve GPUs per actor; its session then puts CUDA first")
    parser.add_argument("--address", default=None, help="a running cluster (default: start a local one)")
    args = parser.parse_args()

    if args.address:
        ray.init(address=args.address)
    else:  # a small local cluster: 2 CPUs, a small object store
        ray.init(num_cpus=max(2, args.workers), object_store_memory=200 * 1024**2, include_dashboard=False)
    model = models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32).SerializeToString()

    with tempfile.TemporaryDirectory(prefix="onyxrt-ray-example-") as tmp:
        folder = Path(tmp) / "images"
        folder.mkdir()
        t0 = time.perf_counter()
        write_images(folder, args.rows)
        print(f"wrote {args.rows} images to {folder} in {time.perf_counter() - t0:.1f} s")

        # Several blocks per worker: Ray Data hands a whole block to one actor.
        ds = ray.data.read_parquet(str(folder), override_num_blocks=4 * args.workers)
        result = run_inference(
            ds,
            model,
            workers=args.workers,
            batch_size=args.batch_size,
            num_gpus_per_worker=args.gpus_per_worker,
            input_columns={"input": "image"},  # model input <- column (flat rows are reshaped)
            output_columns={"logits": "logits"},
            id_column="id",  # names the rows of a failed batch, lists dropped rows
            providers=["CPUExecutionProvider"],
            session_options={"intra_op_num_threads": 1},  # one core per actor
        )
        print(result)  # rows, seconds, rows/s, then one line per worker
        for worker in result.workers:
            print(f"placement on {worker.worker}:", *worker.placement, sep="\n  ")

        first = result.dataset.take(3)
        for row in sorted(first, key=lambda r: r["id"]):
            print(f"id {row['id']}: class {int(np.argmax(row['logits']))}")
    ray.shutdown()


if __name__ == "__main__":
    main()
