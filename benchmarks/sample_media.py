"""Small valid files for the names a request mentions ("example.jpg", "example.wav").

TaskBench's requests name files they never ship.  To run them for real, the
benchmark attaches a file of the right kind under each name: a picture for an
image name, a second of tone for an audio name, a second of video for a video
name, a few lines for a text name.  Names are found with a regex on known
extensions; :func:`write_sample` makes the file (pillow, the standard
library's ``wave``, PyAV).
"""

from __future__ import annotations

import io
import math
import re
import struct
import wave
from fractions import Fraction
from pathlib import Path

IMAGE_EXT = frozenset({"jpg", "jpeg", "png", "gif", "bmp", "webp", "tif", "tiff"})
AUDIO_EXT = frozenset({"wav", "flac", "mp3", "m4a", "ogg"})
VIDEO_EXT = frozenset({"mp4", "mov", "mkv", "avi", "webm"})
TEXT_EXT = frozenset({"txt", "csv", "json", "md"})
KNOWN_EXT = IMAGE_EXT | AUDIO_EXT | VIDEO_EXT | TEXT_EXT

# A file name: word characters, dots and dashes, then a known extension, not
# part of a longer word ("e.g." or "www.example.com" do not match).
FILE_RE = re.compile(
    r"(?<![\w./-])([\w-]+(?:\.[\w-]+)*\.(?:" + "|".join(sorted(KNOWN_EXT)) + r"))(?![\w-])",
    re.IGNORECASE,
)

SAMPLE_TEXT = (
    "The city council met on Tuesday to discuss the new cycling lanes. After a long debate, "
    "members agreed to extend the lanes along the river and to review the plan in six months.\n"
)


def kind_of(name: str) -> str | None:
    """``image``, ``audio``, ``video`` or ``text`` by extension; None if unknown."""
    ext = name.rsplit(".", 1)[-1].lower()
    for kind, exts in (
        ("image", IMAGE_EXT),
        ("audio", AUDIO_EXT),
        ("video", VIDEO_EXT),
        ("text", TEXT_EXT),
    ):
        if ext in exts:
            return kind
    return None


def named_files(text: str) -> list[str]:
    """The file names ``text`` mentions, each once, in order of first mention."""
    seen: dict[str, str] = {}
    for m in FILE_RE.finditer(text):
        name = m.group(1)
        seen.setdefault(name.lower(), name)
    return list(seen.values())


def looks_like_file(value: str) -> bool:
    """True when ``value`` is a bare file name (no spaces, a known extension)."""
    return FILE_RE.fullmatch(value.strip()) is not None


def write_sample(path: Path) -> str:
    """Write a small valid file of the kind ``path``'s extension names; its kind."""
    kind = kind_of(path.name)
    ext = path.suffix.lower().lstrip(".")
    if kind == "image":
        path.write_bytes(_image(ext))
    elif kind == "audio":
        path.write_bytes(_wav() if ext == "wav" else _encoded_audio(ext))
    elif kind == "video":
        path.write_bytes(_video(ext))
    elif kind == "text":
        path.write_text(_text(ext), encoding="utf-8")
    else:
        raise ValueError(f"no sample for {path.name}")
    return kind


def _image(ext: str) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (160, 120), (70, 130, 180))
    draw = ImageDraw.Draw(img)
    draw.rectangle((20, 60, 90, 100), fill=(200, 40, 40))  # a red "car"
    draw.ellipse((110, 15, 145, 50), fill=(250, 220, 60))  # a sun
    draw.rectangle((0, 100, 160, 120), fill=(60, 160, 60))  # grass
    fmt = {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF"}.get(ext, ext.upper())
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def _tone(rate: int = 16_000, seconds: float = 1.0) -> list[int]:
    n = int(rate * seconds)
    return [int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(n)]


def _wav(rate: int = 16_000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        samples = _tone(rate)
        w.writeframes(struct.pack(f"<{len(samples)}h", *samples))
    return buf.getvalue()


def _encoded_audio(ext: str, rate: int = 16_000) -> bytes:
    import av
    import numpy as np

    fmt, codec = {
        "flac": ("flac", "flac"),
        "mp3": ("mp3", "libmp3lame"),
        "m4a": ("ipod", "aac"),
        "ogg": ("ogg", "flac"),
    }[ext]
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate)
        assert isinstance(stream, av.AudioStream)
        stream.layout = "mono"
        samples = np.array(_tone(rate), dtype=np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def _video(ext: str, fps: int = 8, frames: int = 8) -> bytes:
    import av
    import numpy as np

    fmt = {"mkv": "matroska", "webm": "matroska"}.get(ext, ext)
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream("libx264" if ext != "avi" else "mpeg4", rate=fps)
        stream.width, stream.height = 64, 48
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, fps)
        for i in range(frames):
            arr = np.zeros((48, 64, 3), dtype=np.uint8)
            arr[:, :, 2] = 180
            arr[10:30, 4 + 6 * i : 20 + 6 * i, 0] = 230  # a red square moving right
            frame = av.VideoFrame.from_ndarray(arr, format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def _text(ext: str) -> str:
    if ext == "csv":
        return "name,age,occupation\nAda,36,engineer\nGrace,45,admiral\n"
    if ext == "json":
        return '{"note": "' + SAMPLE_TEXT.strip() + '"}\n'
    return SAMPLE_TEXT
