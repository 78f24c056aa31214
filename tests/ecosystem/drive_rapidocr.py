"""rapidocr-onnxruntime (PaddleOCR's PP-OCR models packaged for onnxruntime): each bundled
model through ``RapidOCR.__call__`` alone (det, cls, rec switched on one at a time), then the
whole pipeline, on text drawn with Pillow's font. It passes provider options
(``arena_extend_strategy``) and disables the CPU memory arena in its SessionOptions."""

from __future__ import annotations

import numpy as np
import synthetic
from harness import Close, Driver, Exact, Prepared
from rapidocr_onnxruntime import RapidOCR

driver = Driver("rapidocr", distribution="rapidocr-onnxruntime")

DET = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
CLS = "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
REC = "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"
# Text and orientation labels are decoded from argmaxes: exact. Box corners are rounded to
# whole pixels by the library: exact. Scores are means or maxima of softmax probabilities,
# float32 in [0, 1]: 1e-4 absolute is ~100x float32 summation-order noise and far below
# anything that changes a decoded character.
PROBABILITY_ATOL = 1e-4

DOCUMENT = ["Invoice 2024-0117", "Total due: 348.50 EUR", "Thank you for your order"]
LINES = ["Quick brown fox 42", "ONNX runtime test", "x = 3.14159"]


def _document() -> bytes:
    return synthetic.png_bytes(synthetic.text_image(DOCUMENT, noise=6))


def _line(text: str, angle: int = 0) -> np.ndarray:
    image = synthetic.text_image([text], size=36, pad=8).rotate(angle, expand=True)
    return np.ascontiguousarray(np.asarray(image)[:, :, ::-1])  # BGR, as cv2 reads it


@driver.case("det alone", models=[DET], compared="box corners (exact)")
def detection() -> Prepared:
    engine, page = RapidOCR(), _document()
    return Prepared(synthetic.digest(page), lambda: {
        "boxes": Exact(engine(page, use_det=True, use_cls=False, use_rec=False)[0])})


@driver.case("cls alone", models=[CLS], compared="orientation labels (exact); scores (atol 1e-4)")
def classification() -> Prepared:
    engine = RapidOCR()
    lines = [_line(text, angle) for text in LINES for angle in (0, 180)]

    def call() -> dict[str, Exact | Close]:
        results = [engine(line, use_det=False, use_cls=True, use_rec=False)[0][0] for line in lines]
        return {"labels": Exact([label for label, _ in results]),
                "scores": Close([float(score) for _, score in results], atol=PROBABILITY_ATOL)}

    return Prepared(synthetic.digest(*lines), call)


@driver.case("rec alone", models=[REC], compared="texts (exact); scores (atol 1e-4)")
def recognition() -> Prepared:
    engine = RapidOCR()
    lines = [_line(text) for text in LINES]

    def call() -> dict[str, Exact | Close]:
        results = [engine(line, use_det=False, use_cls=False, use_rec=True)[0][0] for line in lines]
        return {"texts": Exact([text for text, _ in results]),
                "scores": Close([score for _, score in results], atol=PROBABILITY_ATOL)}

    return Prepared(synthetic.digest(*lines), call)


@driver.case("pipeline det+cls+rec", models=[DET, CLS, REC],
             compared="boxes, texts (exact); scores (atol 1e-4)")
def pipeline() -> Prepared:
    engine, page = RapidOCR(), _document()

    def call() -> dict[str, Exact | Close]:
        result, _ = engine(page)
        return {"boxes": Exact([box for box, _, _ in result]),
                "texts": Exact([text for _, text, _ in result]),
                "scores": Close([score for _, _, score in result], atol=PROBABILITY_ATOL)}

    return Prepared(synthetic.digest(page), call)


if __name__ == "__main__":
    driver.main()
