"""Audio codecs: decoding any common format, encoding playable speech, resampling."""

from __future__ import annotations

import io
import logging
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf

from core.experts import audio
from core.experts.audio import audio_duration, decode_audio, encode_speech, resample
from core.mediatypes import sniff


def _tone(sr: int, seconds: float, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (0.4 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _sound(samples: np.ndarray, sr: int, fmt: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def _m4a(tmp_path: Path, samples: np.ndarray, sr: int) -> bytes:
    """AAC in an M4A container: a format soundfile cannot read (PyAV fallback)."""
    path = tmp_path / "a.m4a"
    with av.open(str(path), "w", format="ipod") as out:
        stream = out.add_stream("aac", rate=sr)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="fltp", layout="mono")
        frame.sample_rate = sr
        frame.pts = 0
        frame.time_base = Fraction(1, sr)
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path.read_bytes()


def test_encode_speech_plays_back_with_the_same_duration() -> None:
    samples = _tone(22050, 1.5)
    data, mime = encode_speech(samples, 22050)
    assert mime == "audio/ogg" and sniff(data).ext == "opus"
    info = sf.info(io.BytesIO(data))
    assert info.frames / info.samplerate == pytest.approx(1.5, abs=0.05)
    assert audio_duration(data) == pytest.approx(1.5, abs=0.05)
    with av.open(io.BytesIO(data)) as container:  # a second decoder agrees
        decoded = sum(f.samples for f in container.decode(audio=0))
        assert decoded / container.streams.audio[0].rate == pytest.approx(1.5, abs=0.05)


def test_encode_speech_accepts_channels_first() -> None:
    data, _ = encode_speech(np.stack([_tone(16000, 0.5)] * 2), 16000)
    assert audio_duration(data) == pytest.approx(0.5, abs=0.05)
    with pytest.raises(ValueError):
        encode_speech(np.zeros(0, np.float32), 16000)


def _opus_stream(data: bytes) -> tuple[str, int, np.ndarray]:
    """The codec, channels and decoded samples (channels, frames) of an Ogg file."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray() for f in container.decode(stream)]
        return stream.codec_context.name, stream.channels, np.concatenate(frames, axis=1)


def _peak_hz(samples: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum) * sr / len(samples))


@pytest.mark.parametrize("sr", [16000, 22050, 48000])
def test_encode_speech_keeps_the_sound(sr: int) -> None:
    """PyAV's libopus writes it (the rate is kept where Opus has it, else 48 kHz)
    and what comes back is the same tone, per channel."""
    left, right = _tone(sr, 1.0, freq=440.0), _tone(sr, 1.0, freq=1000.0)
    data, mime = encode_speech(np.stack([left, right], axis=1), sr)
    assert mime == "audio/ogg" and sniff(data).ext == "opus"
    codec, channels, decoded = _opus_stream(data)
    assert codec == "opus" and channels == 2
    out_sr = 48000  # Opus decoders give 48 kHz
    assert decoded.shape[1] / out_sr == pytest.approx(1.0, abs=0.05)
    assert _peak_hz(decoded[0], out_sr) == pytest.approx(440, abs=3)
    assert _peak_hz(decoded[1], out_sr) == pytest.approx(1000, abs=3)
    assert sf.info(io.BytesIO(data)).samplerate == (sr if sr != 22050 else 48000)


def test_encode_speech_with_more_channels_than_pyav_writes() -> None:
    """Four channels: libsndfile's Opus writer, as before PyAV wrote it."""
    samples = np.stack([_tone(16000, 0.5)] * 4, axis=1)
    data, mime = encode_speech(samples, 16000)
    assert mime == "audio/ogg" and sniff(data).ext == "opus"
    info = sf.info(io.BytesIO(data))
    assert info.channels == 4 and info.frames / info.samplerate == pytest.approx(0.5, abs=0.05)


def test_encode_speech_without_libopus_in_ffmpeg(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An FFmpeg built without libopus: libsndfile writes the Opus file, and the
    log says so once."""
    monkeypatch.setattr(audio, "OPUS_ENCODER", "libopus-not-in-this-build")
    audio._has_av_opus.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="core.experts.audio"):
            first, mime = encode_speech(_tone(16000, 0.5), 16000)
            encode_speech(_tone(16000, 0.5), 16000)
    finally:
        audio._has_av_opus.cache_clear()
    assert mime == "audio/ogg" and sniff(first).ext == "opus"
    assert audio_duration(first) == pytest.approx(0.5, abs=0.05)
    said = [r.getMessage() for r in caplog.records if "libsndfile writes Opus" in r.getMessage()]
    assert said == ["this FFmpeg has no libopus-not-in-this-build encoder: libsndfile writes Opus"]


def _wav_stereo(sr: int, seconds: float) -> bytes:
    tone = (_tone(sr, seconds) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(np.stack([tone, tone], axis=1).tobytes())
    return buf.getvalue()


@pytest.mark.parametrize(
    "make",
    [
        lambda: _wav_stereo(8000, 1.0),
        lambda: _sound(_tone(44100, 1.0), 44100, "FLAC", "PCM_16"),
        lambda: _sound(_tone(44100, 1.0), 44100, "OGG", "VORBIS"),
        lambda: _sound(_tone(48000, 1.0), 48000, "OGG", "OPUS"),
        lambda: _sound(_tone(44100, 1.0), 44100, "MP3", "MPEG_LAYER_III"),
    ],
    ids=["wav-stereo-8k", "flac", "ogg-vorbis", "ogg-opus", "mp3"],
)
def test_decode_audio_resamples_to_mono_16k(make) -> None:
    samples, sr = decode_audio(make())
    assert sr == 16000 and samples.dtype == np.float32 and samples.ndim == 1
    assert len(samples) / sr == pytest.approx(1.0, abs=0.08)
    assert 0.2 < np.abs(samples).max() <= 1.0


def test_decode_audio_falls_back_to_pyav(tmp_path: Path) -> None:
    data = _m4a(tmp_path, _tone(16000, 1.0), 16000)
    assert sniff(data).mime == "audio/mp4"
    samples, sr = decode_audio(data, target_sr=None)
    assert sr == 16000 and len(samples) / sr == pytest.approx(1.0, abs=0.1)
    assert audio_duration(data) == pytest.approx(1.0, abs=0.1)


def test_decode_audio_keeps_channels_and_caps_duration() -> None:
    samples, sr = decode_audio(_wav_stereo(8000, 2.0), target_sr=None, mono=False, max_seconds=0.5)
    assert sr == 8000 and samples.shape == (4000, 2)
    with pytest.raises(ValueError):
        decode_audio(b"definitely not audio" * 10)


def test_resample_keeps_the_pitch() -> None:
    x = _tone(48000, 1.0, freq=300.0)[:, None]
    y = resample(x, 48000, 16000)[:, 0]
    crossings = np.count_nonzero(np.diff(np.signbit(y)))
    assert len(y) == 16000 and crossings == pytest.approx(600, abs=4)
