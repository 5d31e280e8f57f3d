"""Real content types from magic bytes, and the attachment limits."""

from __future__ import annotations

import io
import struct
import tracemalloc
import warnings
import wave
import zlib

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from adapters.chat.messages import error_text
from core.errors import InputRejected
from core.experts.video import encode_video
from core.mediatypes import MediaType, inspect_attachment, sniff
from tests.said import raises_saying

MB = 1 << 20
LIMITS = {"max_bytes": 25 * MB, "max_pixels": 40_000_000}


def _image(fmt: str, mode: str = "RGB", size: tuple[int, int] = (8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, "red" if mode == "RGB" else 1).save(buf, format=fmt)
    return buf.getvalue()


def _wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\0\0" * 800)
    return buf.getvalue()


def _sound(fmt: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(1600, np.float32), 16000, format=fmt, subtype=subtype)
    return buf.getvalue()


def _ftyp(major: bytes, *compatible: bytes) -> bytes:
    body = major + b"\0\0\0\0" + b"".join(compatible)
    return struct.pack(">I", 8 + len(body)) + b"ftyp" + body + b"\0\0\0\x08free"


def _ebml(doctype: bytes) -> bytes:
    return b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84" + doctype + b"\0" * 16


def _forged_png(width: int, height: int) -> bytes:
    """A 1×1 PNG whose IHDR claims ``width``×``height`` (with a valid CRC)."""
    png = bytearray(_image("PNG", size=(1, 1)))
    assert png[12:16] == b"IHDR"
    png[16:24] = struct.pack(">II", width, height)
    png[29:33] = struct.pack(">I", zlib.crc32(bytes(png[12:29])))
    return bytes(png)


SNIFF_CASES = [
    ("png", lambda: _image("PNG"), ("image", "image/png")),
    ("jpeg", lambda: _image("JPEG"), ("image", "image/jpeg")),
    ("gif", lambda: _image("GIF"), ("image", "image/gif")),
    ("webp", lambda: _image("WEBP"), ("image", "image/webp")),
    ("bmp", lambda: _image("BMP"), ("image", "image/bmp")),
    ("tiff", lambda: _image("TIFF"), ("image", "image/tiff")),
    ("wav", _wav, ("audio", "audio/wav")),
    ("flac", lambda: _sound("FLAC", "PCM_16"), ("audio", "audio/flac")),
    ("mp3 frame sync", lambda: _sound("MP3", "MPEG_LAYER_III"), ("audio", "audio/mpeg")),
    (
        "mp3 id3",
        lambda: b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x64" * 8,
        ("audio", "audio/mpeg"),
    ),
    ("aac adts", lambda: b"\xff\xf1\x50\x80\x02\x1f\xfc" + b"\0" * 32, ("audio", "audio/aac")),
    ("ogg vorbis", lambda: _sound("OGG", "VORBIS"), ("audio", "audio/ogg")),
    ("ogg opus", lambda: _sound("OGG", "OPUS"), ("audio", "audio/ogg")),
    ("m4a", lambda: _ftyp(b"M4A ", b"M4A ", b"mp42", b"isom"), ("audio", "audio/mp4")),
    (
        "mp4 (real)",
        lambda: encode_video([np.zeros((16, 16, 3), np.uint8)] * 2),
        ("video", "video/mp4"),
    ),
    ("mov", lambda: _ftyp(b"qt  ", b"qt  "), ("video", "video/quicktime")),
    ("3gp", lambda: _ftyp(b"3gp4", b"isom"), ("video", "video/3gpp")),
    ("heic", lambda: _ftyp(b"heic", b"mif1", b"heic"), ("image", "image/heic")),
    ("avif", lambda: _ftyp(b"avif", b"mif1", b"avif"), ("image", "image/avif")),
    ("webm", lambda: _ebml(b"webm"), ("video", "video/webm")),
    ("mkv", lambda: _ebml(b"matroska"), ("video", "video/x-matroska")),
    ("avi", lambda: b"RIFF\x00\x10\x00\x00AVI LIST" + b"\0" * 32, ("video", "video/x-msvideo")),
    ("pdf", lambda: b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", ("file", "application/pdf")),
    ("zip", lambda: b"PK\x03\x04\x14\x00" + b"\0" * 30, ("file", "application/zip")),
    ("html", lambda: b"<!DOCTYPE html><html><body>hi</body></html>", ("text", "text/html")),
    ("html after bom", lambda: b"\xef\xbb\xbf \n\t<HTML lang=en>", ("text", "text/html")),
    ("svg", lambda: b'<?xml version="1.0"?>\n<svg xmlns="x"/>', ("file", "image/svg+xml")),
    ("utf-8 text", lambda: "héllo wörld ☃\nline 2\n".encode(), ("text", "text/plain")),
    ("text starting BM", lambda: b"BMW is a car maker from Munich.\n", ("text", "text/plain")),
]


@pytest.mark.parametrize(
    ("make", "expected"), [c[1:] for c in SNIFF_CASES], ids=[c[0] for c in SNIFF_CASES]
)
def test_sniff_table(make, expected) -> None:
    found = sniff(make())
    assert found is not None
    assert (found.kind, found.mime) == expected


def test_sniff_tells_opus_from_vorbis() -> None:
    assert sniff(_sound("OGG", "OPUS")).ext == "opus"
    assert sniff(_sound("OGG", "VORBIS")).ext == "ogg"


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x01\x02\x03binary\xff\xfe",
        bytes(range(256)),
        b"\xff\xff\xff\xff",
        b"\xc3\x28 bad utf-8",
    ],
)
def test_sniff_unknown_binary(data: bytes) -> None:
    assert sniff(data) is None


def test_sniff_text_cut_inside_a_character_is_still_text() -> None:
    data = "a" * 4095 + "é" * 10  # the 4096-byte window ends mid-character
    assert sniff(data.encode()) == MediaType("text", "text/plain", "txt")


def test_jpeg_named_png_is_accepted_as_jpeg() -> None:
    found = inspect_attachment("photo.png", "image/png", _image("JPEG"), **LIMITS)
    assert found == MediaType("image", "image/jpeg", "jpg")


def test_html_named_png_is_rejected_with_the_file_name() -> None:
    page = b"\n  <!doctype html><html><script>alert(1)</script></html>"
    with pytest.raises(InputRejected) as err:
        inspect_attachment("cat.png", "image/png", page, **LIMITS)
    assert error_text(err.value) == "cat.png is not an image: its content looks like an HTML page"


@pytest.mark.parametrize(
    ("name", "mime", "data", "message"),
    [
        (
            "upload",
            "image/jpeg",
            b"just words",
            "upload is not an image: its content looks like plain text",
        ),
        (
            "song.mp3",
            None,
            b"just words",
            "song.mp3 is not an audio file: its content looks like plain text",
        ),
        (
            "clip.mp4",
            "video/mp4",
            b"%PDF-1.4\n",
            "clip.mp4 is not a video file: its content looks like a PDF document",
        ),
        (
            "x.jpg",
            None,
            b"\x00\x01\x02\x03",
            "x.jpg is not an image: its content looks like an unrecognised binary file",
        ),
    ],
)
def test_claimed_media_with_other_content_is_rejected(name, mime, data, message) -> None:
    with raises_saying(InputRejected, f"^{message}$"):
        inspect_attachment(name, mime, data, **LIMITS)


def test_oversize_is_rejected_with_sizes() -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(int(31.2 * MB))
    with pytest.raises(InputRejected) as err:
        inspect_attachment("photo.png", "image/png", data, **LIMITS)
    assert error_text(err.value) == "photo.png is 31.2 MB; the limit is 25 MB"


def test_empty_is_rejected() -> None:
    with raises_saying(InputRejected, r"^a\.png is empty$"):
        inspect_attachment("a.png", "image/png", b"", **LIMITS)


@pytest.mark.parametrize(
    ("size", "max_pixels"),
    [
        ((30000, 30000), 40_000_000),  # over Pillow's own hard limit (DecompressionBombError)
        ((10000, 5000), 40_000_000),  # under Pillow's limit, over ours
        ((10000, 10000), 200_000_000),  # Pillow's warning, turned into an error locally
    ],
)
def test_decompression_bomb_is_rejected_without_allocating(size, max_pixels) -> None:
    bomb = _forged_png(*size)
    assert len(bomb) < 100
    filters_before = list(warnings.filters)
    tracemalloc.start()
    try:
        with raises_saying(InputRejected, r"^bomb\.png is .*smaller image$"):
            inspect_attachment("bomb.png", "image/png", bomb, max_bytes=MB, max_pixels=max_pixels)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * MB
    assert warnings.filters == filters_before  # nothing changed globally


def test_truncated_image_is_rejected() -> None:
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    for fmt in ("PNG", "JPEG"):
        buf = io.BytesIO()
        Image.fromarray(noise).save(buf, format=fmt)
        cut = buf.getvalue()[: len(buf.getvalue()) // 2]
        with raises_saying(InputRejected, "damaged or truncated"):
            inspect_attachment(f"a.{fmt.lower()}", None, cut, **LIMITS)


def test_a_photo_cut_short_is_rejected_though_checked_at_an_eighth_of_its_size() -> None:
    """A JPEG is decoded at a reduced scale to check it: every byte is still read."""
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, format="JPEG")
    whole = buf.getvalue()
    assert inspect_attachment("photo.jpg", None, whole, **LIMITS).mime == "image/jpeg"
    for cut in (len(whole) // 2, len(whole) - 64):
        with raises_saying(InputRejected, "damaged or truncated"):
            inspect_attachment("photo.jpg", None, whole[:cut], **LIMITS)


def test_unreadable_image_type_is_rejected_clearly() -> None:
    with raises_saying(InputRejected, "HEIC image, which can't be read here"):
        inspect_attachment("IMG_1.heic", "image/heic", _ftyp(b"heic", b"mif1"), **LIMITS)


def test_valid_media_is_accepted() -> None:
    assert inspect_attachment("a.png", "image/png", _image("PNG"), **LIMITS).kind == "image"
    assert inspect_attachment("v.wav", "audio/wav", _wav(), **LIMITS).mime == "audio/wav"
    video = encode_video([np.zeros((16, 16, 3), np.uint8)] * 2)
    assert inspect_attachment("v.mov", None, video, **LIMITS).mime == "video/mp4"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("notes.txt", MediaType("text", "text/plain", "txt")),
        ("README.md", MediaType("text", "text/markdown", "md")),
        ("table.csv", MediaType("text", "text/csv", "csv")),
        ("noext", MediaType("text", "text/plain", "txt")),
    ],
)
def test_text_files_are_text(name: str, expected: MediaType) -> None:
    assert inspect_attachment(name, "text/plain", b"a,b\n1,2\n", **LIMITS) == expected


def test_html_file_is_text_html() -> None:
    found = inspect_attachment("page.html", "text/html", b"<html></html>", **LIMITS)
    assert found == MediaType("text", "text/html", "html")


def test_unknown_binary_is_a_file() -> None:
    found = inspect_attachment("model.bin", "application/octet-stream", bytes(range(256)), **LIMITS)
    assert found == MediaType("file", "application/octet-stream", "bin")
    assert inspect_attachment("doc.pdf", None, b"%PDF-1.7\n", **LIMITS).kind == "file"


# --- audio and video are decoded before they are accepted --------------------------


def _flac_silence(seconds: float, rate: int = 8000) -> bytes:
    """Silence compresses to almost nothing: a long file in a few KB."""
    return _sound_at(np.zeros(int(seconds * rate), np.float32), rate, "FLAC", "PCM_16")


def _sound_at(samples: np.ndarray, rate: int, fmt: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def _audio_only(fmt: str, codec: str, rate: int = 48000) -> bytes:
    """A 'video' container (MP4, WebM) holding only sound, as voice recorders make."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        samples = np.zeros((1, rate // 2), np.float32)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
        frame.sample_rate = rate
        frame.pts = 0
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "voice.wav",
            lambda: _wav()[:12] + bytes(300),
            "voice.wav could not be read as WAV: the file is damaged or truncated",
        ),
        (
            "voice.wav",
            lambda: _wav()[:44],  # a header and not one sample
            "voice.wav could not be read as WAV: the file is damaged or truncated",
        ),
        (
            "song.mp3",
            lambda: b"ID3\x04\x00\x00\x00\x00\x00\x00" + bytes(range(256)) * 8,
            "song.mp3 could not be read as MP3: the file is damaged or truncated",
        ),
        (
            "clip.mp4",
            lambda: (v := encode_video([np.zeros((16, 16, 3), np.uint8)] * 8))[: len(v) // 2],
            "clip.mp4 could not be read as MP4: the file is damaged or truncated",
        ),
        (
            "clip.mp4",
            lambda: _ftyp(b"isom", b"isom", b"mp42") + bytes(500),
            "clip.mp4 could not be read as MP4: the file is damaged or truncated",
        ),
        (
            "clip.webm",
            lambda: _ebml(b"webm"),
            "clip.webm could not be read as WEBM: the file is damaged or truncated",
        ),
    ],
    ids=["wav-garbage", "wav-no-samples", "mp3-garbage", "mp4-truncated", "mp4-ftyp-only", "webm"],
)
def test_damaged_audio_and_video_are_rejected(name: str, data, message: str) -> None:
    with pytest.raises(InputRejected) as err:
        inspect_attachment(name, None, data(), **LIMITS)
    assert error_text(err.value) == message


def test_audio_over_the_duration_cap_is_rejected() -> None:
    long = _flac_silence(601)  # the default cap is 10 minutes
    assert len(long) < 200_000
    with pytest.raises(InputRejected) as err:
        inspect_attachment("talk.flac", "audio/flac", long, **LIMITS)
    assert error_text(err.value) == (
        "talk.flac is longer than 10 min; audio of up to 10 min is accepted, send a shorter clip"
    )
    found = inspect_attachment("talk.flac", "audio/flac", _flac_silence(599), **LIMITS)
    assert found.mime == "audio/flac"


def test_audio_cap_is_a_parameter_and_counts_decoded_samples() -> None:
    tone = _sound_at(np.zeros(8000 * 3, np.float32), 8000, "WAV", "PCM_16")  # 3 s
    inspect_attachment("a.wav", None, tone, **LIMITS, max_audio_seconds=3.5)
    with raises_saying(InputRejected, r"^a\.wav is longer than 2 s;"):
        inspect_attachment("a.wav", None, tone, **LIMITS, max_audio_seconds=2)


def test_many_channel_audio_stops_at_the_decoding_budget() -> None:
    # 16 channels at 96 kHz: half a second is more samples than a 1 s cap allows
    wide = _sound_at(np.zeros((48000, 16), np.float32), 96000, "WAV", "PCM_16")
    with raises_saying(InputRejected, "too much sound data"):
        inspect_attachment("wide.wav", None, wide, **LIMITS, max_audio_seconds=1)


def test_video_over_the_duration_cap_is_rejected() -> None:
    three_seconds = encode_video([np.zeros((16, 16, 3), np.uint8)] * 24, fps=8)
    assert inspect_attachment("c.mp4", None, three_seconds, **LIMITS).mime == "video/mp4"
    with pytest.raises(InputRejected) as err:
        inspect_attachment("c.mp4", None, three_seconds, **LIMITS, max_video_seconds=2)
    assert error_text(err.value) == (
        "c.mp4 is longer than 2 s; video of up to 2 s is accepted, send a shorter clip"
    )


def test_video_frames_over_the_pixel_limit_are_rejected() -> None:
    video = encode_video([np.zeros((16, 16, 3), np.uint8)] * 2)
    with raises_saying(InputRejected, r"^v\.mp4 has frames of more than 100 pixels"):
        inspect_attachment("v.mp4", None, video, max_bytes=MB, max_pixels=100)


@pytest.mark.parametrize(
    ("fmt", "codec", "expected"),
    [
        ("mp4", "aac", MediaType("audio", "audio/mp4", "m4a")),
        ("webm", "libopus", MediaType("audio", "audio/webm", "webm")),
    ],
)
def test_a_video_container_holding_only_sound_is_audio(fmt, codec, expected) -> None:
    data = _audio_only(fmt, codec)
    assert sniff(data).kind == "video"
    assert inspect_attachment(f"voice.{fmt}", None, data, **LIMITS) == expected
    with raises_saying(InputRejected, "is longer than"):
        inspect_attachment(f"voice.{fmt}", None, data, **LIMITS, max_audio_seconds=0.1)
