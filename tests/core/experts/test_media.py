"""Media post-processing: boxes, masks, depth, fitting, audio and video codecs."""

from __future__ import annotations

import io
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from core.experts.media import (
    audio_duration,
    decode_audio,
    decode_video_frames,
    depth_to_image,
    draw_boxes,
    encode_speech,
    encode_video,
    fit_image,
    image_size,
    label_colours,
    mask_overlay,
    resample,
)
from core.mediatypes import sniff
from core.results import Box, Segment

GREY = (100, 100, 100)


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)


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


# --- images ------------------------------------------------------------------


def test_draw_boxes_marks_edges_and_leaves_the_rest() -> None:
    src = _png(Image.new("RGB", (200, 120), GREY))
    out = _pixels(draw_boxes(src, [Box("cat", 0.93, 50, 50, 150, 110)]))
    assert out.shape == (120, 200, 3)
    for x, y in [(50, 80), (150, 80), (100, 50), (100, 110)]:  # the four edges
        assert tuple(out[y, x]) != GREY, (x, y)
    for x, y in [(100, 80), (5, 115), (195, 5), (180, 100)]:  # inside and far away
        assert tuple(out[y, x]) == GREY, (x, y)
    assert (out[:50, 50:150] != GREY).any()  # the caption sits above the box


def test_draw_boxes_clamps_and_colours_per_label() -> None:
    src = _png(Image.new("RGB", (100, 80), GREY))
    boxes = [Box("dog", 0.5, -30, -30, 400, 300), Box("cat", 0.9, 10, 40, 40, 70)]
    out = _pixels(draw_boxes(src, boxes))
    assert out.shape == (80, 100, 3)
    dog, cat = label_colours(["dog", "cat"]).values()
    assert dog != cat
    assert tuple(out[79, 50]) == dog  # the clamped bottom edge is visible
    assert tuple(out[55, 10]) == cat


def test_label_colours_are_distinct_beyond_the_palette() -> None:
    colours = label_colours([f"label{i}" for i in range(20)] + ["label0"])
    assert len(colours) == 20
    assert len(set(colours.values())) == 20


def test_mask_overlay_tints_inside_only() -> None:
    src = _png(Image.new("RGB", (64, 48), GREY))
    mask = Image.new("L", (32, 24), 0)  # half size: resized to the image
    mask.paste(255, (0, 0, 16, 24))  # left half of the image
    out = _pixels(mask_overlay(src, [Segment("sky", 0.9, _png(mask)), Segment("x", None, None)]))
    assert out.shape[1] == 64 and out.shape[0] > 48  # legend strip below
    image = out[:48]
    colour = np.array(label_colours(["sky"])["sky"])
    inside, outside = image[:, :32], image[:, 32:]
    assert (outside == GREY).all()
    assert (np.abs(inside - (colour + GREY) / 2) <= 1).all()


def test_mask_overlay_without_masks_returns_the_image() -> None:
    src = _png(Image.new("RGB", (20, 10), GREY))
    assert (_pixels(mask_overlay(src, [Segment("a", 0.1)])) == GREY).all()


def test_depth_to_image_from_array_and_png() -> None:
    depth = np.tile(np.linspace(0.0, 5.0, 40, dtype=np.float32), (30, 1))
    depth[0, 0] = np.nan
    out = _pixels(depth_to_image(depth[None]))
    assert out.shape == (30, 40, 3)
    assert out[5, 0].sum() < out[5, -1].sum()  # near is dark, far is bright
    sixteen = Image.fromarray((np.arange(600).reshape(20, 30) * 100).astype(np.uint16))
    assert _pixels(depth_to_image(_png(sixteen))).shape == (20, 30, 3)
    assert _pixels(depth_to_image(np.ones((4, 4)))).shape == (4, 4, 3)
    with pytest.raises(ValueError):
        depth_to_image(np.zeros(5))


def test_fit_image_gets_noise_png_under_the_limit() -> None:
    noise = np.random.default_rng(1).integers(0, 256, (1200, 1200, 3), dtype=np.uint8)
    src = _png(Image.fromarray(noise))
    assert len(src) > 4_000_000
    out, mime = fit_image(src, 1_000_000)
    assert len(out) <= 1_000_000
    assert mime == "image/jpeg" == sniff(out).mime
    assert Image.open(io.BytesIO(out)).convert("RGB").size[0] > 0


def test_fit_image_keeps_small_files_and_transparency() -> None:
    small = _png(Image.new("RGB", (10, 10), GREY))
    assert fit_image(small, 10_000) == (small, "image/png")
    rgba = np.random.default_rng(2).integers(0, 256, (300, 300, 4), dtype=np.uint8)
    out, mime = fit_image(_png(Image.fromarray(rgba, "RGBA")), 60_000)
    assert mime == "image/webp" and len(out) <= 60_000
    assert Image.open(io.BytesIO(out)).mode == "RGBA"


def test_fit_image_max_side_and_impossible() -> None:
    src = _png(Image.new("RGB", (400, 100), GREY))
    out, mime = fit_image(src, 1_000_000, max_side=100)
    assert image_size(out) == (100, 25) and mime == "image/png"
    with pytest.raises(ValueError):
        fit_image(_png(Image.new("RGB", (64, 64), GREY)) + b"x" * 2000, 50)


def test_image_size_applies_exif_rotation() -> None:
    im = Image.new("RGB", (40, 10), GREY)
    exif = im.getexif()
    exif[0x0112] = 6  # rotated 90°
    buf = io.BytesIO()
    im.save(buf, format="JPEG", exif=exif)
    assert image_size(buf.getvalue()) == (10, 40)
    assert image_size(_png(im)) == (40, 10)
    with pytest.raises(ValueError):
        image_size(b"not an image")


# --- audio -------------------------------------------------------------------


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


# --- video -------------------------------------------------------------------


def test_video_round_trip() -> None:
    frames = [np.full((50, 65, 3), i * 20, np.uint8) for i in range(12)]  # odd width
    data = encode_video(frames, fps=8)
    assert sniff(data).mime == "video/mp4"
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert (stream.width, stream.height) == (64, 50)
        assert stream.codec_context.pix_fmt == "yuv420p"
    out = decode_video_frames(data, num_frames=4, size=32)
    assert len(out) == 4 and all(f.shape == (32, 32, 3) and f.dtype == np.uint8 for f in out)
    full = decode_video_frames(data, num_frames=4, size=None)
    assert full[0].shape == (50, 64, 3)
    means = [f.mean() for f in full]
    assert means == sorted(means) and means[0] < 10 and means[-1] > 200  # spread over time


def test_video_from_images_and_floats() -> None:
    frames = [Image.new("RGB", (31, 17), "blue"), np.zeros((17, 31), np.float32)]
    data = encode_video(frames, fps=4)
    assert len(decode_video_frames(data, num_frames=16, size=8)) == 2


def test_decode_video_frames_caps_decoding() -> None:
    data = encode_video([np.full((16, 16, 3), i * 8, np.uint8) for i in range(30)])
    out = decode_video_frames(data, num_frames=3, size=None, max_decoded=10)
    assert len(out) == 3 and out[-1].mean() < 10 * 8 + 4  # nothing past frame 10
    with pytest.raises(ValueError):
        decode_video_frames(b"\x00" * 100)
    with pytest.raises(ValueError, match="no video stream"):
        decode_video_frames(_sound(_tone(16000, 0.2), 16000, "OGG", "VORBIS"))
