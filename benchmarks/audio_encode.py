"""What re-encoding a model's speech for people costs, per encoder.

``python -m benchmarks.audio_encode [--reps N]``

Every audio a task returns in a format phones do not play (a TTS model's
WAV, a music model's FLAC) is re-encoded to OGG/Opus before the answer is
posted (``core.postprocess.deliverable``): on a text-to-speech task that is
time on the request's critical path.  Timed here, CPU of this process
(``time.process_time``), median of ``N``, alternated sample by sample:

* ``pyav``: ``core.experts.audio.encode_speech`` as it is (FFmpeg's libopus
  through PyAV);
* ``libsndfile``: the same samples through libsndfile's Opus writer, which
  wrote every file before (and still does where FFmpeg lacks libopus).

Speech-like input (a tone with a moving pitch and pauses) at the rates TTS
models return: 16 kHz (SpeechT5, MMS), 22.05 kHz (VITS, not an Opus rate:
resampled to 48 kHz), 24 kHz (Bark, Kokoro); 0.5 s and 5 s.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable

import numpy as np
import soundfile as sf

from core.experts.audio import encode_speech, opus_rate, resample

RATES = (16000, 22050, 24000)
SECONDS = (0.5, 5.0)


def speech_like(sr: int, seconds: float) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    pitch = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    voice = np.sin(2 * np.pi * np.cumsum(pitch) / sr) + 0.3 * np.sin(
        4 * np.pi * np.cumsum(pitch) / sr
    )
    gate = (np.sin(2 * np.pi * 2.3 * t) > -0.6).astype(np.float64)  # words and pauses
    return (0.3 * voice * gate).astype(np.float32)


def libsndfile_opus(x: np.ndarray, sr: int) -> bytes:
    rate = opus_rate(sr)
    buf = io.BytesIO()
    sf.write(buf, resample(x[:, None], sr, rate), rate, format="OGG", subtype="OPUS")
    return buf.getvalue()


def cpu_ms(fn: Callable[[np.ndarray, int], object], x: np.ndarray, sr: int) -> float:
    t0 = time.process_time()
    fn(x, sr)
    return (time.process_time() - t0) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    print(f"re-encoding speech to OGG/Opus, CPU ms, median of {a.reps} (alternated)")
    print(
        f"{'input':<16} {'pyav':>7} {'libsndfile':>11} {'ratio':>6} {'bytes pyav / libsndfile':>26}"
    )
    for sr in RATES:
        for seconds in SECONDS:
            x = speech_like(sr, seconds)
            encode_speech(x, sr), libsndfile_opus(x, sr)  # first use (codec set-up) not timed
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(a.reps):
                ours.append(cpu_ms(encode_speech, x, sr))
                theirs.append(cpu_ms(libsndfile_opus, x, sr))
            a_ms, b_ms = statistics.median(ours), statistics.median(theirs)
            size_a, size_b = len(encode_speech(x, sr)[0]), len(libsndfile_opus(x, sr))
            print(
                f"{sr / 1000:g} kHz, {seconds:g} s".ljust(16)
                + f" {a_ms:7.1f} {b_ms:11.1f} {a_ms / b_ms:6.2f} {size_a:>12} / {size_b}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
