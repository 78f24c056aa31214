"""Export real models with torch.onnx, as users make them: transformers' BERT-base, GPT-2,
ViT-base, MobileNetV2 (the TF-padding variant, whose "same" pads are computed from shapes)
and ResNet-50, randomly initialized from their default configurations (the weights do not
change the graph; nothing is downloaded).

    python benchmarks/real_exports.py --out exports/      # needs torch and transformers

Run by ``nox -s exports``, which installs them; the files are not committed (BERT-base is
~440 MB). Each model has free dimensions ``batch`` (and ``seq`` for the text models), as
the usual ``dynamic_axes`` exports give them.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any


def _text(model_cls: Any, config: Any, name: str, out: Path, seq: int = 128) -> Path:
    import torch

    model = model_cls(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                              return_dict=False)[0] if name == "gpt2" else \
                self.inner(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]

    path = out / f"{name}.onnx"
    torch.onnx.export(Wrapped(), (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                    "last_hidden_state": {0: "batch", 1: "seq"}})
    return path


def _vision(model: Any, name: str, out: Path, image: int = 224) -> Path:
    import torch

    model = model.eval()
    pixels = torch.randn(1, 3, image, image)

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, pixel_values: Any) -> Any:
            return self.inner(pixel_values=pixel_values, return_dict=False)[0]

    path = out / f"{name}.onnx"
    torch.onnx.export(Wrapped(), (pixels,), str(path), input_names=["pixel_values"], output_names=["logits"],
                      opset_version=17, dynamo=False,
                      dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    return path


def export_all(out: Path) -> list[Path]:
    """Export the five models into ``out``; returns their paths."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    return [
        _text(tf.BertModel, tf.BertConfig(), "bert", out),
        _text(tf.GPT2Model, tf.GPT2Config(), "gpt2", out),
        _vision(tf.ViTForImageClassification(tf.ViTConfig()), "vit", out),
        _vision(tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config(tf_padding=True)), "mobilenet_v2", out),
        _vision(tf.ResNetForImageClassification(tf.ResNetConfig()), "resnet50", out),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("exports"))
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in export_all(args.out):
            print(f"{path} {path.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
