"""faster-whisper: only its voice activity detector, the bundled Silero VAD v6
(``faster_whisper.vad``), on synthesized speech-like audio (the transcription models are
CTranslate2's and downloaded). The VAD runs every 512-sample window through an LSTM."""

from __future__ import annotations

import numpy as np
import synthetic
from faster_whisper.vad import VadOptions, get_speech_timestamps, get_vad_model
from harness import Close, Driver, Exact, Prepared

driver = Driver("faster_whisper", distribution="faster-whisper")

MODEL = "faster_whisper/assets/silero_vad_v6.onnx"
# Timestamps are sample indices (window index x 512 after thresholding): exact. Speech
# probabilities are sigmoid outputs in [0, 1] after an LSTM over ~400 windows: 1e-4 absolute
# is ~100x float32 summation-order noise.
PROBABILITY_ATOL = 1e-4
SPEECH = ((1.0, 3.5), (5.0, 6.2), (8.0, 11.0))


@driver.case("get_speech_timestamps: silero_vad_v6.onnx", models=[MODEL], compared="speech segments (exact)")
def timestamps() -> Prepared:
    speech = synthetic.speech_like(12.0, segments=SPEECH)
    tone = synthetic.tone(3.0, 16000)
    options = VadOptions(min_silence_duration_ms=300, speech_pad_ms=100)
    return Prepared(synthetic.digest(speech, tone), lambda: {
        "speech": Exact(get_speech_timestamps(speech, options)),
        "defaults": Exact(get_speech_timestamps(speech)),
        "tone": Exact(get_speech_timestamps(tone)),
    })


@driver.case("speech probabilities: silero_vad_v6.onnx", models=[MODEL],
             compared="per-window speech probability (atol 1e-4)")
def probabilities() -> Prepared:
    speech = synthetic.speech_like(12.0, segments=SPEECH)
    padded = np.pad(speech, (0, 512 - len(speech) % 512))  # as get_speech_timestamps does
    model = get_vad_model()
    return Prepared(synthetic.digest(padded), lambda: {"probabilities": Close(model(padded), atol=PROBABILITY_ATOL)})


if __name__ == "__main__":
    driver.main()
