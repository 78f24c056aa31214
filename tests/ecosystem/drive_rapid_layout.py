"""rapid-layout (document layout analysis): its one bundled model, PP-Layout CDLA (the
default ``model_type``; the others it downloads), through ``RapidLayout.__call__`` on a
drawn page with a title, paragraphs, a figure with a caption and a table. rapid-layout
imports onnxruntime without declaring it (its engine is onnxruntime or openvino)."""

from __future__ import annotations

import textwrap

import numpy as np
import synthetic
from harness import Close, Driver, Exact, Prepared
from PIL import Image, ImageDraw
from rapid_layout import RapidLayout

driver = Driver("rapid_layout", distribution="rapid-layout")

# Class names are argmaxes: exact. Scores are sigmoid outputs in [0, 1]: 1e-4 absolute.
# Boxes are float pixel coordinates the library does not round, decoded from float32
# regressions on an 800x608 input: 0.01 px is ~100x the float32 noise at that scale and
# nothing a user could see.
PROBABILITY_ATOL = 1e-4
PIXEL_ATOL = 0.01


def _page() -> np.ndarray:
    page = Image.new("RGB", (608, 800), "white")
    draw = ImageDraw.Draw(page)
    body, title = synthetic.font(14), synthetic.font(28)
    draw.text((60, 40), "Chapter 3: Results", font=title, fill="black")
    y = 100
    paragraph = "The measurements were repeated on three days and the results agree within the expected error. " * 3
    for line in textwrap.wrap(paragraph, 70):
        draw.text((60, y), line, font=body, fill="black")
        y += 20
    draw.rectangle((60, y + 20, 540, y + 260), outline="black", width=2)
    for i in range(0, 480, 40):
        draw.line((60 + i, y + 260, 60 + i, y + 260 - abs(np.sin(i / 60)) * 200), fill="blue", width=8)
    draw.text((200, y + 270), "Figure 2: measured response", font=body, fill="black")
    y += 310
    for r in range(5):
        for c in range(4):
            draw.rectangle((60 + c * 120, y + r * 30, 180 + c * 120, y + 30 + r * 30), outline="black")
            draw.text((70 + c * 120, y + 8 + r * 30), f"r{r}c{c}", font=body, fill="black")
    return np.ascontiguousarray(np.asarray(page)[:, :, ::-1])


@driver.case("layout: layout_cdla.onnx", models=["rapid_layout/models/layout_cdla.onnx"],
             compared="class names (exact); boxes (atol 0.01 px); scores (atol 1e-4)")
def layout() -> Prepared:
    engine, page = RapidLayout(), _page()

    def call() -> dict[str, Exact | Close]:
        result = engine(page)
        return {"class_names": Exact(result.class_names),
                "boxes": Close(result.boxes, atol=PIXEL_ATOL),
                "scores": Close(result.scores, atol=PROBABILITY_ATOL)}

    return Prepared(synthetic.digest(page), call)


if __name__ == "__main__":
    driver.main()
