"""onnx-asr: the audio front ends it ships as ONNX models (``onnx_asr/preprocessors/data``):
log-mel feature extractors for each model family it supports, in the STFT form and the
Conv form (``*_conv``, for providers without STFT), and its resamplers to 16 kHz. They run
through the library's own classes, ``OnnxPreprocessor`` and ``Resampler``, with the session
options ``load_model`` gives them; ``load_model`` itself needs an ASR model from the Hub."""

from __future__ import annotations

import numpy as np
import onnxruntime
import synthetic
from harness import Close, Driver, Exact, Prepared
from onnx_asr.preprocessors.preprocessor import OnnxPreprocessor
from onnx_asr.preprocessors.resampler import Resampler

driver = Driver("onnx_asr", distribution="onnx-asr")

DATA = "onnx_asr/preprocessors/data"
# Feature lengths are integers: exact. Features are log (or normalized log) mel energies
# computed in float32: an error in log(x) is a relative error of x, so 1e-3 absolute means
# the energies agree to 0.1%, ~100x float32 noise for the bins that carry the signal;
# rtol 1e-4 covers the few features of magnitude > 10. That holds for the Conv forms, which
# both runtimes compute as float32 convolutions.
FEATURE_RTOL, FEATURE_ATOL = 1e-4, 1e-3
# The STFT forms get 1e-2: there onnxruntime, the reference, is the inaccurate side. Its
# float32 FFT's roundoff, magnified by the log in bins 40-80 dB below the loudest, puts
# its features up to 4e-3 away from a float64 evaluation of the same graph on these inputs
# (gigaam_v2 2.5e-3, gigaam_v3 3.6e-3, whisper80 4.0e-3, measured with onnx.reference in
# float64), so no comparison with it can be tighter. It still catches subtle errors: a
# symmetric Hann window where the model has a periodic one moves features by up to 0.14
# (whisper80), 0.26 with gigaam_v3's window replaced.
STFT_FEATURE_ATOL = 1e-2
# Resampled audio is a float32 FIR filter of a [-1, 1] signal: 1e-5 absolute.
SAMPLE_ATOL = 1e-5
PREPROCESSORS = ["kaldi", "nemo80", "nemo128", "whisper80", "whisper128", "gigaam_v2", "gigaam_v3"]


def _options() -> dict:
    """What onnx_asr.load_model passes its preprocessors (loader.Manager's defaults)."""
    return {"sess_options": None, "providers": onnxruntime.get_available_providers(), "provider_options": None}


def _batch() -> tuple[np.ndarray, np.ndarray]:
    """Two utterances of different lengths in one zero-padded batch."""
    first = synthetic.speech_like(3.0, segments=((0.4, 2.6),))
    second = np.zeros_like(first)
    second[:32000] = synthetic.speech_like(2.0, segments=((0.2, 1.7),))[:32000] * 0.5
    return np.stack([first, second]), np.array([48000, 32000], np.int64)


def _preprocessor_case(name: str, atol: float) -> None:
    @driver.case(f"features: {name}.onnx", models=[f"{DATA}/{name}.onnx"],
                 compared=f"feature lengths (exact); features (rtol 1e-4, atol {atol:g})")
    def features() -> Prepared:
        preprocessor = OnnxPreprocessor(name, _options())
        waveforms, lengths = _batch()

        def call() -> dict[str, Exact | Close]:
            feats, feats_lens = preprocessor(waveforms, lengths)
            return {"lengths": Exact(feats_lens), "features": Close(feats, rtol=FEATURE_RTOL, atol=atol)}

        return Prepared(synthetic.digest(waveforms, lengths), call)


for _name in PREPROCESSORS:
    _preprocessor_case(_name, STFT_FEATURE_ATOL)
    _preprocessor_case(f"{_name}_conv", FEATURE_ATOL)
# The speaker embeddings' front end: a DFT inside a Scan loop, float32 throughout.
_preprocessor_case("wespeaker", FEATURE_ATOL)


@driver.case("resample to 16 kHz", models=[f"{DATA}/resample_{k}_16.onnx" for k in (8, 22, 44, 48)],
             compared="lengths (exact); samples (atol 1e-5)")
def resample() -> Prepared:
    resampler = Resampler(16000, _options())
    rates = (8000, 22050, 44100, 48000)
    signals = [synthetic.tone(1.5, rate)[None, :] for rate in rates]

    def call() -> dict[str, Exact | Close]:
        outputs = {}
        for rate, signal in zip(rates, signals):
            samples, lengths = resampler(signal, np.array([signal.shape[1]], np.int64), rate)
            outputs[f"{rate}:lengths"] = Exact(lengths)
            outputs[f"{rate}:samples"] = Close(samples, atol=SAMPLE_ATOL)
        return outputs

    return Prepared(synthetic.digest(*signals), call)


if __name__ == "__main__":
    driver.main()
