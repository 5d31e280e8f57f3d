"""Audio decoding and encoding the experts share (soundfile, PyAV, NumPy).

Pure, CPU-bound functions: callers run them in a worker thread
(``core.threads.work``).  Encoders return bytes so results can go straight
into a :class:`core.results.Blob` or the store.  Unreadable input raises
``ValueError``.
"""

from __future__ import annotations

import functools
import io
import logging
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
import soundfile as sf

log = logging.getLogger(__name__)

OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
MAX_AUDIO_SECONDS = 1800.0
# What measuring may decode per second of the cap: eight channels at 48 kHz.
# A file of many channels or a huge sample rate (a decompression bomb in
# FLAC) stops here instead of at its duration.
SAMPLES_PER_SECOND_BUDGET = 8 * 48_000
_BLOCK_SAMPLES = 1 << 20  # per read: 4 MB of float32 whatever the channel count


def _lowpass(x: np.ndarray, cutoff: float, taps: int = 63) -> np.ndarray:
    """Windowed-sinc FIR along axis 0; ``cutoff`` is a fraction of the sample rate."""
    n = np.arange(taps) - (taps - 1) / 2
    kernel = 2 * cutoff * np.sinc(2 * cutoff * n) * np.hanning(taps)
    kernel = (kernel / kernel.sum()).astype(np.float32)
    return np.stack([np.convolve(x[:, c], kernel, mode="same") for c in range(x.shape[1])], axis=1)


def resample(x: np.ndarray, sr: int, target_sr: int) -> np.ndarray:
    """Resample (frames, channels) float audio: FIR anti-aliasing plus linear interpolation."""
    if sr == target_sr or len(x) == 0:
        return x
    if target_sr < sr:
        x = _lowpass(x, 0.5 * target_sr / sr * 0.95)
    n_out = max(1, round(len(x) * target_sr / sr))
    t_out = np.arange(n_out) * (sr / target_sr)
    t_in = np.arange(len(x))
    y = np.stack([np.interp(t_out, t_in, x[:, c]) for c in range(x.shape[1])], axis=1)
    y = y.astype(np.float32)
    if target_sr > sr:
        y = _lowpass(y, 0.5 * sr / target_sr * 0.95)
    return y


def _read_soundfile(data: bytes, max_seconds: float) -> tuple[np.ndarray, int] | None:
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            limit = int(max_seconds * f.samplerate)
            frames = f.read(limit, dtype="float32", always_2d=True)
            return frames, f.samplerate
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        return None


def _read_av(data: bytes, max_seconds: float) -> tuple[np.ndarray, int]:
    chunks: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise ValueError("the file has no audio stream")
            stream = container.streams.audio[0]
            sr = stream.rate or stream.codec_context.sample_rate
            limit, total = int(max_seconds * sr), 0
            resampler = av.AudioResampler(format="fltp", rate=sr)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunk = out.to_ndarray().T  # (samples, channels)
                    chunks.append(chunk)
                    total += len(chunk)
                if total >= limit:
                    break
    except av.FFmpegError as exc:
        raise ValueError(f"not a readable audio file: {exc}") from exc
    if not chunks:
        raise ValueError("the audio file holds no samples")
    return np.concatenate(chunks)[:limit].astype(np.float32), sr


def decode_audio(
    data: bytes,
    *,
    target_sr: int | None = 16000,
    mono: bool = True,
    max_seconds: float = MAX_AUDIO_SECONDS,
) -> tuple[np.ndarray, int]:
    """Float32 samples and their rate: 1-D when ``mono``, else (frames, channels).

    soundfile reads WAV/FLAC/OGG/MP3; anything else (M4A, WEBM, video
    sound tracks) goes through PyAV.  At most ``max_seconds`` are decoded.
    """
    read = _read_soundfile(data, max_seconds) or _read_av(data, max_seconds)
    samples, sr = read
    if mono:
        samples = samples.mean(axis=1, keepdims=True)
    if target_sr is not None:
        samples, sr = resample(samples, sr, target_sr), target_sr
    samples = samples.astype(np.float32, copy=False)
    return (samples[:, 0] if mono else samples), sr


def encode_speech(samples: np.ndarray, sr: int) -> tuple[bytes, str]:
    """Audio that plays on phones and in chat clients: OGG/Opus, else MP3, else WAV.

    Opus is written by PyAV's libopus (FFmpeg's encoder, which resamples and
    frames the samples itself): a quarter or less of the CPU libsndfile's
    Opus writer takes for the same audio (24 → 5 ms for half a second, 110 →
    27 ms for five seconds), time every spoken or generated sound's answer
    waits for.  libsndfile's writers are the fallback (an FFmpeg built
    without libopus, more than two channels)."""
    x = np.asarray(samples, dtype=np.float32)
    x = x[:, None] if x.ndim == 1 else x
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError("no samples to encode")
    if x.shape[1] > x.shape[0]:  # (channels, frames) as some pipelines return
        x = x.T
    x = np.clip(np.nan_to_num(x), -1.0, 1.0)
    opus = _opus_av(x, sr)
    if opus is not None:
        return opus, "audio/ogg"
    attempts = (
        ("OGG", "OPUS", "audio/ogg", OPUS_RATES, 48000),
        ("MP3", "MPEG_LAYER_III", "audio/mpeg", (16000, 22050, 24000, 32000, 44100, 48000), 44100),
        ("WAV", "PCM_16", "audio/wav", None, None),
    )
    for fmt, subtype, mime, rates, fallback_rate in attempts:
        if not sf.check_format(fmt, subtype):
            continue
        rate = sr if rates is None or sr in rates else fallback_rate
        assert rate is not None
        buf = io.BytesIO()
        try:
            sf.write(buf, resample(x, sr, rate), rate, format=fmt, subtype=subtype)
        except (sf.LibsndfileError, RuntimeError):
            continue
        return buf.getvalue(), mime
    raise ValueError("no audio encoder is available")


def opus_rate(sr: int) -> int:
    """The rate an Opus file of audio at ``sr`` is written at: ``sr`` where
    Opus has it, else 48 kHz."""
    return sr if sr in OPUS_RATES else 48000


_OPUS_LAYOUTS = {1: "mono", 2: "stereo"}
OPUS_ENCODER = "libopus"  # FFmpeg's name for it
OPUS_BITS_PER_CHANNEL = 32_000  # what libsndfile's writer gave speech; good for music in stereo


@functools.cache
def _has_av_opus() -> bool:
    try:
        av.codec.Codec(OPUS_ENCODER, "w")
    except ValueError:  # av.codec.codec.UnknownCodecError
        log.info("this FFmpeg has no %s encoder: libsndfile writes Opus", OPUS_ENCODER)
        return False
    return True


def _opus_av(x: np.ndarray, sr: int) -> bytes | None:
    """(frames, channels) float samples as OGG/Opus through PyAV, or None when
    this FFmpeg has no libopus, the channels are more than two, or it fails."""
    layout = _OPUS_LAYOUTS.get(x.shape[1])
    if layout is None or not _has_av_opus():
        return None
    buf = io.BytesIO()
    try:
        with av.open(buf, "w", format="ogg") as out:
            stream = out.add_stream(OPUS_ENCODER, rate=opus_rate(sr))
            assert isinstance(stream, av.AudioStream)
            stream.layout = layout
            stream.bit_rate = OPUS_BITS_PER_CHANNEL * x.shape[1]
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(x.T), format="fltp", layout=layout
            )
            frame.sample_rate = sr
            frame.pts = 0
            frame.time_base = Fraction(1, sr)
            out.mux(stream.encode(frame))
            out.mux(stream.encode(None))
    except (av.FFmpegError, ValueError) as exc:
        log.warning("PyAV could not write Opus (%s): libsndfile writes it", exc)
        return None
    return buf.getvalue()


def audio_duration(data: bytes) -> float:
    """Seconds of audio in the file (WAV/FLAC/OGG/MP3 via soundfile, else PyAV)."""
    try:
        info = sf.info(io.BytesIO(data))
        if info.frames > 0 and info.samplerate > 0:
            return float(info.frames / info.samplerate)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        pass
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if container.duration:
                return container.duration / av.time_base
    except av.FFmpegError as exc:
        raise ValueError(f"not a readable audio file: {exc}") from exc
    samples, sr = _read_av(data, MAX_AUDIO_SECONDS)
    return len(samples) / sr


@dataclass(frozen=True, slots=True)
class Measured:
    """How much sound (or video) a file holds, found by decoding it."""

    seconds: float  # decoded; above the cap when decoding stopped there
    whole: bool  # False: decoding stopped at the cap or at the decoding budget


def measure_audio(data: bytes, *, max_seconds: float = MAX_AUDIO_SECONDS) -> Measured:
    """Decode ``data`` as audio, counting, not keeping, the samples.

    The header's length is not trusted: the samples are.  Decoding stops once
    past ``max_seconds`` (or past the budget of
    ``SAMPLES_PER_SECOND_BUDGET * max_seconds`` samples), which ``whole=False``
    reports.  Raises ValueError when the bytes are not audio or hold no sound.
    """
    budget = int(SAMPLES_PER_SECOND_BUDGET * max_seconds)
    measured = _measure_soundfile(data, max_seconds, budget)
    if measured is None:
        measured = _measure_av(data, max_seconds, budget)
    if measured.seconds <= 0:
        raise ValueError("the audio file holds no samples")
    return measured


def _measure_soundfile(data: bytes, max_seconds: float, budget: int) -> Measured | None:
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            sr, channels = f.samplerate, max(1, f.channels)
            if sr <= 0:
                return None
            limit = int(max_seconds * sr)
            block = max(1, _BLOCK_SAMPLES // channels)
            frames = 0
            while True:
                got = len(f.read(block, dtype="float32", always_2d=True))
                frames += got
                if frames > limit or frames * channels > budget:
                    return Measured(frames / sr, whole=False)
                if got < block:
                    return Measured(frames / sr, whole=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        return None  # not a libsndfile format: PyAV may read it


def _measure_av(data: bytes, max_seconds: float, budget: int) -> Measured:
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise ValueError("the file has no audio stream")
            stream = container.streams.audio[0]
            seconds, samples = 0.0, 0
            for frame in container.decode(stream):
                rate = frame.sample_rate or stream.rate
                if not rate:
                    raise ValueError("the audio stream has no sample rate")
                seconds += frame.samples / rate
                samples += frame.samples * max(1, frame.layout.nb_channels)
                if seconds > max_seconds or samples > budget:
                    return Measured(seconds, whole=False)
            return Measured(seconds, whole=True)
    except av.FFmpegError as exc:
        raise ValueError(f"not a readable audio file: {exc}") from exc
