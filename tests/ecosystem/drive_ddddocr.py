"""ddddocr (captcha OCR and character detection): each of its three bundled models through
``DdddOcr``. Which model a constructor loads (ddddocr 1.6.1's model_loader): ``DdddOcr()``
and ``DdddOcr(old=True)`` common_old.onnx, ``DdddOcr(beta=True)`` common.onnx,
``DdddOcr(det=True)`` common_det.onnx."""

from __future__ import annotations

import ddddocr
import synthetic
from harness import Close, Driver, Exact, Prepared

driver = Driver("ddddocr", distribution="ddddocr")

# Texts are CTC-decoded argmaxes: exact. Probabilities are the softmax ddddocr applies to the
# model's output, float32 in [0, 1]: 1e-4 absolute is ~100x float32 summation-order noise and
# far below anything that changes a character. Detection boxes are ints the library makes
# with int(): exact.
PROBABILITY_ATOL = 1e-4
CAPTCHAS = ["k7Rm2", "X4pQ9", "83hWd"]


def _captchas() -> list[bytes]:
    return [synthetic.png_bytes(synthetic.captcha_image(text)) for text in CAPTCHAS]


def _ocr_case(**options: bool) -> Prepared:
    ocr = ddddocr.DdddOcr(show_ad=False, **options)
    images = _captchas()

    def call() -> dict[str, Exact | Close]:
        texts = [ocr.classification(image) for image in images]
        detailed = [ocr.classification(image, probability=True) for image in images]
        return {"texts": Exact(texts),
                "probability_texts": Exact([d["text"] for d in detailed]),
                "confidences": Close([d["confidence"] for d in detailed], atol=PROBABILITY_ATOL),
                # one array per image: the sequence length follows the image width
                **{f"probabilities[{i}]": Close(d["probabilities"], atol=PROBABILITY_ATOL)
                   for i, d in enumerate(detailed)}}

    return Prepared(synthetic.digest(*images), call)


@driver.case("ocr default: common_old.onnx", models=["ddddocr/common_old.onnx"],
             compared="texts (exact); confidences, probabilities (atol 1e-4)")
def ocr_default() -> Prepared:
    return _ocr_case()


@driver.case("ocr beta: common.onnx", models=["ddddocr/common.onnx"],
             compared="texts (exact); confidences, probabilities (atol 1e-4)")
def ocr_beta() -> Prepared:
    return _ocr_case(beta=True)


@driver.case("det: common_det.onnx", models=["ddddocr/common_det.onnx"], compared="boxes (exact)")
def detection() -> Prepared:
    det = ddddocr.DdddOcr(det=True, show_ad=False)
    images = _captchas() + [synthetic.png_bytes(synthetic.text_image(["AB 12", "xy Q"], size=48))]
    return Prepared(synthetic.digest(*images), lambda: {"boxes": Exact([det.detection(i) for i in images])})


if __name__ == "__main__":
    driver.main()
