"""Video codecs: encoding browser-playable MP4 and sampling frames from a video."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from core.experts.video import decode_video_frames, encode_video
from core.mediatypes import sniff


def _tone(sr: int, seconds: float, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (0.4 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _sound(samples: np.ndarray, sr: int, fmt: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


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
