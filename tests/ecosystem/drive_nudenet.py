"""nudenet (a YOLOv8 body-part detector): its bundled 320n.onnx through
``NudeDetector.detect`` and ``detect_batch`` on drawn images (a cartoon figure it fires on,
a drawn face, shapes). The model's input has dynamic batch, height and width."""

from __future__ import annotations

import numpy as np
import synthetic
from harness import Close, Driver, Exact, Prepared
from nudenet import NudeDetector

driver = Driver("nudenet", distribution="nudenet")

MODEL = "nudenet/320n.onnx"
# Classes are argmaxes: exact. Boxes are ints the library makes with int() after NMS:
# exact. Scores are sigmoid outputs in [0, 1]: 1e-4 absolute is ~100x float32
# summation-order noise and well below the 0.2/0.25 thresholds' sensitivity.
PROBABILITY_ATOL = 1e-4


def _images() -> list[np.ndarray]:
    images = [synthetic.figure_image(), synthetic.face_image(), synthetic.shapes_image()]
    # BGR arrays, as cv2.imread gives them; one of them mirrored and not square
    arrays = [np.ascontiguousarray(np.asarray(i)[:, :, ::-1]) for i in images]
    arrays.append(np.ascontiguousarray(arrays[0][40:, ::-1]))
    return arrays


def _outputs(detections: list[list[dict]]) -> dict[str, Exact | Close]:
    return {"classes": Exact([[d["class"] for d in image] for image in detections]),
            "boxes": Exact([[d["box"] for d in image] for image in detections]),
            "scores": Close([d["score"] for image in detections for d in image], atol=PROBABILITY_ATOL)}


@driver.case("detect: 320n.onnx", models=[MODEL], compared="classes, boxes (exact); scores (atol 1e-4)")
def detect() -> Prepared:
    detector, images = NudeDetector(), _images()
    return Prepared(synthetic.digest(*images), lambda: _outputs([detector.detect(i) for i in images]))


@driver.case("detect_batch: 320n.onnx", models=[MODEL], compared="classes, boxes (exact); scores (atol 1e-4)")
def detect_batch() -> Prepared:
    detector, images = NudeDetector(), _images()
    return Prepared(synthetic.digest(*images), lambda: _outputs(detector.detect_batch(images, batch_size=4)))


if __name__ == "__main__":
    driver.main()
