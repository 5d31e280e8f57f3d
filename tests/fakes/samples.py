"""Tiny, real media files for tests and fakes (made on the fly, cached).

Real bytes matter: the client libraries and our own code open them with
Pillow, ``wave`` or PyAV, so a placeholder like ``b"PNG"`` would hide bugs.
"""

from __future__ import annotations

import io
import math
import struct
import wave
from functools import lru_cache

from PIL import Image, ImageDraw

Color = tuple[int, int, int]
RED: Color = (255, 0, 0)


def _square_image(w: int, h: int, color: Color) -> Image.Image:
    """A white canvas with a filled square of ``color`` in its middle half."""
    img = Image.new("RGB", (w, h), (255, 255, 255))
    ImageDraw.Draw(img).rectangle((w // 4, h // 4, 3 * w // 4 - 1, 3 * h // 4 - 1), fill=color)
    return img


@lru_cache(maxsize=32)
def sample_png(w: int = 64, h: int = 64, color: Color = RED) -> bytes:
    buf = io.BytesIO()
    _square_image(w, h, color).save(buf, format="PNG")
    return buf.getvalue()


@lru_cache(maxsize=32)
def sample_jpeg(w: int = 64, h: int = 64, color: Color = RED) -> bytes:
    buf = io.BytesIO()
    _square_image(w, h, color).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@lru_cache(maxsize=32)
def sample_mask_png(w: int = 64, h: int = 64) -> bytes:
    """A grayscale mask (mode "L"): white over the sample square, black elsewhere."""
    img = Image.new("L", (w, h), 0)
    ImageDraw.Draw(img).rectangle((w // 4, h // 4, 3 * w // 4 - 1, 3 * h // 4 - 1), fill=255)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@lru_cache(maxsize=32)
def sample_wav(seconds: float = 0.5, freq: float = 440.0, rate: int = 16000) -> bytes:
    """A mono 16-bit PCM sine tone."""
    frames = int(seconds * rate)
    samples = (int(12000 * math.sin(2 * math.pi * freq * n / rate)) for n in range(frames))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", s) for s in samples))
    return buf.getvalue()


@lru_cache(maxsize=8)
def sample_mp4(frames: int = 8, w: int = 64, h: int = 64, fps: int = 8) -> bytes:
    """A tiny real MP4 (a red square sliding right) encoded with PyAV; falls back
    to an ``ftyp`` header alone when PyAV or its encoders are unavailable."""
    try:
        import av
    except ImportError:  # pragma: no cover - av is a project dependency
        return _mp4_stub()
    buf = io.BytesIO()
    try:
        with av.open(buf, mode="w", format="mp4") as container:
            codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
            stream = container.add_stream(codec, rate=fps)
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            for i in range(frames):
                img = Image.new("RGB", (w, h), (255, 255, 255))
                x = (i * w // frames) % (w - w // 4)
                ImageDraw.Draw(img).rectangle((x, h // 4, x + w // 4, h // 2), fill=RED)
                for packet in stream.encode(av.VideoFrame.from_image(img)):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
    except (av.FFmpegError, ValueError):  # pragma: no cover - depends on the FFmpeg build
        return _mp4_stub()
    return buf.getvalue()


def _mp4_stub() -> bytes:
    return b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2" + b"\x00" * 32
