"""magika (Google's file-type detector): its bundled standard_v3_3 model on files of a dozen
types, one at a time (``identify_bytes``) and as one batch (``identify_paths``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import magika
import synthetic
from harness import Close, Driver, Exact, Prepared

driver = Driver("magika", distribution="magika")

# Labels are argmaxes over the model's softmax: exact. Scores are those softmax
# probabilities, float32 in [0, 1]: 1e-4 absolute is ~100x the float32 reordering noise
# of a different summation order, and far below what moves a label.
PROBABILITY_ATOL = 1e-4
#: Where identify_paths reads the files from (removed when the process exits).
SCRATCH = tempfile.TemporaryDirectory(prefix="ecosystem-magika-")


def _outputs(results: list[magika.types.MagikaResult]) -> dict[str, Exact | Close]:
    return {
        "dl_labels": Exact([str(r.prediction.dl.label) for r in results]),
        "output_labels": Exact([str(r.prediction.output.label) for r in results]),
        "scores": Close([r.prediction.score for r in results], atol=PROBABILITY_ATOL),
    }


@driver.case("identify_bytes: standard_v3_3", models=["magika/models/standard_v3_3/model.onnx"],
             compared="model label, output label (exact); score (atol 1e-4)")
def identify_bytes() -> Prepared:
    m = magika.Magika()
    files = synthetic.sample_files()
    return Prepared(synthetic.digest(*files.values()),
                    lambda: _outputs([m.identify_bytes(data) for data in files.values()]))


@driver.case("identify_paths (batch): standard_v3_3", models=["magika/models/standard_v3_3/model.onnx"],
             compared="model label, output label (exact); score (atol 1e-4)")
def identify_paths() -> Prepared:
    m = magika.Magika()
    files = synthetic.sample_files()
    folder = Path(SCRATCH.name)
    paths = []
    for name, data in files.items():
        paths.append(folder / name.replace(".", "_"))  # no extension to go by
        paths[-1].write_bytes(data)
    return Prepared(synthetic.digest(*files.values()), lambda: _outputs(m.identify_paths(paths)))


if __name__ == "__main__":
    driver.main()
