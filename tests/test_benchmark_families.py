"""The builders of benchmarks/family_models.py (issue 23's families (c) recurrent and
(d) tiny at small sizes, (e) sklearn as benchmarked: they convert in about a second):
onyxrt and onnxruntime give the same outputs on the same feeds, so a benchmark figure is
never the figure of a wrong result. No torch needed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onyxrt

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import family_models as fm  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5

SMALL = {
    "lstm_encoder": lambda: fm.lstm_encoder(steps=7, features=5, hidden=8),
    "gru_encoder": lambda: fm.gru_encoder(steps=7, features=5, hidden=8),
    "logmel_frontend": lambda: fm.logmel_frontend(samples=1600, n_fft=64, win_length=50, hop=16, n_mels=10),
    "crnn_ocr": lambda: fm.crnn_ocr(height=16, width=32, channels=(4, 8, 8), hidden=8, classes=11),
    "mlp": lambda: fm.mlp(layers=3, width=16),
    "elementwise_mix": lambda: fm.elementwise_mix(width=16),
    "sklearn_logistic": lambda: fm.sklearn_logistic(samples=60, features=6),
    "sklearn_forest": lambda: fm.sklearn_forest(samples=60, features=6, trees=3),
    **fm.SKLEARN,
}


def test_every_benchmark_model_has_a_small_case():
    assert set(SMALL) == set(fm.RECURRENT) | set(fm.TINY) | set(fm.SKLEARN)


def _feeds(session: ort.InferenceSession) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
            for i in session.get_inputs()}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_onyxrt_matches_onnxruntime(name):
    model = SMALL[name]()
    onnx.checker.check_model(model, full_check=True)
    data = model.SerializeToString()
    theirs_session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours_session = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = _feeds(theirs_session)
    theirs = theirs_session.run(None, feeds)
    ours = ours_session.run(None, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if isinstance(b, list):  # ZipMap: a list of {class: probability}
            assert len(a) == len(b)
            for row_a, row_b in zip(a, b):
                assert row_a.keys() == row_b.keys()
                np.testing.assert_allclose([row_a[k] for k in row_b], [row_b[k] for k in row_b],
                                           rtol=RTOL, atol=ATOL)
            continue
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        if b.dtype.kind == "f":
            assert np.isfinite(b).all()
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
        else:
            np.testing.assert_array_equal(a, b)  # labels


def test_builders_are_deterministic():
    assert SMALL["lstm_encoder"]().SerializeToString() == SMALL["lstm_encoder"]().SerializeToString()
