"""What an attachment really is, decided from its bytes.

Names and declared content types come from the user's client and are often
wrong (a JPEG saved as ``.png``) or hostile (an HTML page called ``cat.png``).
:func:`sniff` reads magic bytes; :func:`inspect_attachment` applies the
input limits (size, pixel count, readable image, decodable audio and video
within a duration cap) before anything stores the file, and raises
:class:`core.errors.InputRejected` with a message fit to show the user.
:func:`verify_image` is the image check on its own, for model outputs too.
"""

from __future__ import annotations

import codecs
import io
import mimetypes
import re
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from core.errors import ErrorCode, InputRejected

IMAGE = "image"
AUDIO = "audio"
VIDEO = "video"
TEXT = "text"
FILE = "file"

# Uploads longer than this are refused (the whole file is decoded to tell).
MAX_UPLOAD_AUDIO_SECONDS = 600.0
MAX_UPLOAD_VIDEO_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class MediaType:
    """A content type the rest of the bot can act on."""

    kind: str  # image | audio | video | text | file
    mime: str
    ext: str  # without the dot


PNG = MediaType(IMAGE, "image/png", "png")
JPEG = MediaType(IMAGE, "image/jpeg", "jpg")
GIF = MediaType(IMAGE, "image/gif", "gif")
WEBP = MediaType(IMAGE, "image/webp", "webp")
BMP = MediaType(IMAGE, "image/bmp", "bmp")
TIFF = MediaType(IMAGE, "image/tiff", "tiff")
AVIF = MediaType(IMAGE, "image/avif", "avif")
HEIC = MediaType(IMAGE, "image/heic", "heic")
WAV = MediaType(AUDIO, "audio/wav", "wav")
FLAC = MediaType(AUDIO, "audio/flac", "flac")
MP3 = MediaType(AUDIO, "audio/mpeg", "mp3")
AAC = MediaType(AUDIO, "audio/aac", "aac")
OGG_VORBIS = MediaType(AUDIO, "audio/ogg", "ogg")
OGG_OPUS = MediaType(AUDIO, "audio/ogg", "opus")
OGG_VIDEO = MediaType(VIDEO, "video/ogg", "ogv")
M4A = MediaType(AUDIO, "audio/mp4", "m4a")
MP4 = MediaType(VIDEO, "video/mp4", "mp4")
MOV = MediaType(VIDEO, "video/quicktime", "mov")
THREE_GP = MediaType(VIDEO, "video/3gpp", "3gp")
WEBM = MediaType(VIDEO, "video/webm", "webm")
MKV = MediaType(VIDEO, "video/x-matroska", "mkv")
AVI = MediaType(VIDEO, "video/x-msvideo", "avi")
PDF = MediaType(FILE, "application/pdf", "pdf")
ZIP = MediaType(FILE, "application/zip", "zip")
GZIP = MediaType(FILE, "application/gzip", "gz")
SVG = MediaType(FILE, "image/svg+xml", "svg")
HTML = MediaType(TEXT, "text/html", "html")
PLAIN = MediaType(TEXT, "text/plain", "txt")

# Pillow format names for the image types we decode; others are refused.
_PIL_FORMATS = {
    "image/png": "PNG",
    "image/jpeg": "JPEG",
    "image/gif": "GIF",
    "image/webp": "WEBP",
    "image/bmp": "BMP",
    "image/tiff": "TIFF",
    "image/avif": "AVIF",
}

# Text files we keep as text, refined by the file's extension.
_TEXT_BY_EXT = {
    "md": MediaType(TEXT, "text/markdown", "md"),
    "markdown": MediaType(TEXT, "text/markdown", "md"),
    "csv": MediaType(TEXT, "text/csv", "csv"),
    "tsv": MediaType(TEXT, "text/tab-separated-values", "tsv"),
    "json": MediaType(TEXT, "application/json", "json"),
}

# A "video" container that holds only sound is that sound.
_AUDIO_ONLY = {
    "video/mp4": M4A,
    "video/quicktime": M4A,
    "video/3gpp": MediaType(AUDIO, "audio/3gpp", "3gp"),
    "video/webm": MediaType(AUDIO, "audio/webm", "webm"),
    "video/x-matroska": MediaType(AUDIO, "audio/x-matroska", "mka"),
}

_M4A_BRANDS = {b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B "}
_HEIC_BRANDS = {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"}
_AVIF_BRANDS = {b"avif", b"avis"}

_SNIFF_TEXT_BYTES = 4096
_TEXT_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")


def sniff(data: bytes) -> MediaType | None:
    """The type the bytes say they are, or None for an unrecognised binary."""
    head = data[:64]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return GIF
    if head[:4] == b"RIFF" and len(head) >= 12:
        return {b"WEBP": WEBP, b"WAVE": WAV, b"AVI ": AVI}.get(head[8:12])
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return TIFF
    if head[:4] == b"fLaC":
        return FLAC
    if head[:4] == b"OggS":
        return _sniff_ogg(data[:512])
    if head[4:8] == b"ftyp":
        return _sniff_ftyp(data)
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return WEBM if b"webm" in data[:256] else MKV
    if head[:5] == b"%PDF-":
        return PDF
    if head[:4] == b"PK\x03\x04":
        return ZIP
    if head[:2] == b"\x1f\x8b":
        return GZIP
    if head[:3] == b"ID3":
        return MP3
    if _is_bmp(head):
        return BMP
    mpeg = _sniff_mpeg_audio(head)
    if mpeg is not None:
        return mpeg
    return _sniff_text(data)


def _sniff_ogg(head: bytes) -> MediaType:
    # The first page carries the codec's identification header.
    if b"OpusHead" in head:
        return OGG_OPUS
    if b"\x80theora" in head:
        return OGG_VIDEO
    return OGG_VORBIS


def _sniff_ftyp(data: bytes) -> MediaType:
    size = int.from_bytes(data[:4], "big")
    box = data[8 : min(max(size, 16), 256)]
    major = box[:4]
    brands = {major} | {box[i : i + 4] for i in range(8, len(box) - 3, 4)}
    if major in _M4A_BRANDS:
        return M4A
    if major in _AVIF_BRANDS:
        return AVIF
    if major in _HEIC_BRANDS or (brands & _HEIC_BRANDS and not brands & {b"isom", b"mp42"}):
        return HEIC
    if major == b"qt  ":
        return MOV
    if major.startswith(b"3g"):
        return THREE_GP
    return MP4


def _is_bmp(head: bytes) -> bool:
    # "BM" alone also starts ordinary text: check the reserved words and the
    # size of the info header too.
    if head[:2] != b"BM" or len(head) < 18:
        return False
    return head[6:10] == b"\0\0\0\0" and int.from_bytes(head[14:18], "little") in (
        12,
        40,
        52,
        56,
        64,
        108,
        124,
    )


def _sniff_mpeg_audio(head: bytes) -> MediaType | None:
    """An MPEG audio frame header (MP3 without ID3) or an ADTS AAC header."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    version = (head[1] >> 3) & 0b11
    layer = (head[1] >> 1) & 0b11
    if layer == 0:  # ADTS (AAC) uses layer bits 00 with the 12-bit sync
        return AAC if head[1] & 0xF6 == 0xF0 else None
    bitrate = head[2] >> 4
    rate = (head[2] >> 2) & 0b11
    if version == 1 or bitrate in (0, 15) or rate == 3:
        return None
    return MP3


def _sniff_text(data: bytes) -> MediaType | None:
    sample = data[:_SNIFF_TEXT_BYTES]
    if sample.startswith(codecs.BOM_UTF8):
        sample = sample[len(codecs.BOM_UTF8) :]
    if _TEXT_CONTROL.search(sample):
        return None
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the sample window is still text.
        if len(data) <= _SNIFF_TEXT_BYTES or exc.start < len(sample) - 3:
            return None
        text = sample[: exc.start].decode("utf-8")
    start = text.lstrip().lower()
    if start.startswith(("<!doctype html", "<html")):
        return HTML
    if start.startswith("<svg") or (start.startswith("<?xml") and "<svg" in start[:1024]):
        return SVG
    return PLAIN


def _claimed_kind(name: str, declared_mime: str | None) -> str | None:
    """image/audio/video if the name or the declared type says so."""
    for mime in (declared_mime, mimetypes.guess_type(name)[0]):
        major = (mime or "").split("/", 1)[0].strip().lower()
        if major in (IMAGE, AUDIO, VIDEO):
            return major
    return None


def describe(mt: MediaType | None) -> str:
    """What a sniffed type is, in words: "an HTML page", "a PNG file"."""
    if mt is None:
        return "an unrecognised binary file"
    if mt == HTML:
        return "an HTML page"
    if mt.kind == TEXT:
        return "plain text"
    return {
        "application/pdf": "a PDF document",
        "application/zip": "a ZIP archive",
        "application/gzip": "a gzip archive",
        "image/svg+xml": "an SVG drawing",
    }.get(mt.mime, f"a {mt.ext.upper()} file")


def _ext_of(name: str) -> str:
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return ext if re.fullmatch(r"[a-z0-9]{1,10}", ext) else ""


def inspect_attachment(
    name: str,
    declared_mime: str | None,
    data: bytes,
    *,
    max_bytes: int,
    max_pixels: int,
    max_audio_seconds: float = MAX_UPLOAD_AUDIO_SECONDS,
    max_video_seconds: float = MAX_UPLOAD_VIDEO_SECONDS,
) -> MediaType:
    """Accept an attachment and say what it really is, or raise InputRejected.

    Images are opened lazily: the header's size is checked against
    ``max_pixels`` before a single pixel is decoded, so a decompression bomb
    costs nothing; only then is the image decoded to catch truncation.
    Audio is decoded whole (counting samples, up to the cap) and video is
    demuxed whole with its first frame decoded, so a damaged file or one
    longer than the cap never reaches the store.  CPU-bound: call it from a
    worker thread.
    """
    if len(data) > max_bytes:
        raise InputRejected(ErrorCode.FILE_TOO_LARGE, file=name, size=len(data), limit=max_bytes)
    if not data:
        raise InputRejected(ErrorCode.FILE_EMPTY, file=name)
    found = sniff(data)
    claimed = _claimed_kind(name, declared_mime)
    if claimed is not None and (found is None or found.kind in (TEXT, FILE)):
        raise InputRejected(
            ErrorCode.FILE_NOT_KIND, file=name, kind=claimed, content=describe(found)
        )
    if found is None:
        return MediaType(FILE, "application/octet-stream", _ext_of(name) or "bin")
    if found.kind == IMAGE:
        _check_image(name, found, data, max_pixels)
    if found.kind == AUDIO:
        _check_audio(name, found, data, max_audio_seconds)
    if found.kind == VIDEO:
        return _check_video(name, found, data, max_video_seconds, max_pixels, max_audio_seconds)
    if found == PLAIN:
        return _TEXT_BY_EXT.get(_ext_of(name), PLAIN)
    return found


class TooManyPixels(ValueError):
    """An image larger (in pixels) than accepted; ``size`` when the header said."""

    def __init__(self, size: tuple[int, int] | None, limit: int) -> None:
        where = f"{size[0]}×{size[1]} pixels" if size else "too many pixels"
        super().__init__(f"the image is {where}; at most {limit:,} are accepted")
        self.size = size
        self.limit = limit


def verify_image(data: bytes, found: MediaType, max_pixels: int) -> tuple[int, int]:
    """Decode the whole image under the bomb limits; its (width, height).

    The header's size is checked against ``max_pixels`` (and Pillow's own
    limit) before a pixel is decoded.  Raises :class:`TooManyPixels`, or
    ValueError when the type is not one Pillow reads here or the bytes are
    damaged or truncated.
    """
    fmt = _PIL_FORMATS.get(found.mime)
    if fmt is None:
        raise ValueError(f"{found.ext.upper()} images can't be read here")
    try:
        # Local to this block: Pillow's own bomb warning becomes an error.
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[fmt]) as im:
                width, height = im.size  # from the header; nothing decoded yet
                if width * height > max_pixels:
                    raise TooManyPixels((width, height), max_pixels)
                if fmt == "JPEG":
                    # Every byte is still read and entropy-decoded (a cut or
                    # damaged file fails as before), the picture made at an
                    # eighth of its size: a 12-megapixel photo's check took
                    # 120 ms, 42 ms so (here), before the planning call.
                    im.draft(None, (max(1, width // 8), max(1, height // 8)))
                im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise TooManyPixels(None, min(max_pixels, Image.MAX_IMAGE_PIXELS or max_pixels)) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        if isinstance(exc, TooManyPixels):
            raise
        raise ValueError(f"not a readable {found.ext.upper()} image: {exc}") from exc
    return width, height


def _check_image(name: str, found: MediaType, data: bytes, max_pixels: int) -> None:
    if found.mime not in _PIL_FORMATS:
        raise InputRejected(ErrorCode.IMAGE_FORMAT, file=name, format=found.ext)
    try:
        verify_image(data, found, max_pixels)
    except TooManyPixels as exc:
        if exc.size is None:
            raise InputRejected(ErrorCode.IMAGE_TOO_LARGE, file=name, limit=exc.limit) from None
        width, height = exc.size
        raise InputRejected(
            ErrorCode.IMAGE_TOO_LARGE, file=name, width=width, height=height, limit=max_pixels
        ) from None
    except ValueError as exc:
        raise _damaged(name, found) from exc


def _damaged(name: str, found: MediaType) -> InputRejected:
    return InputRejected(ErrorCode.FILE_DAMAGED, file=name, format=found.ext)


def _check_audio(name: str, found: MediaType, data: bytes, max_seconds: float) -> None:
    from core.experts.audio import measure_audio  # codecs load on first use

    try:
        measured = measure_audio(data, max_seconds=max_seconds)
    except ValueError as exc:
        raise _damaged(name, found) from exc
    if measured.whole:
        return
    if measured.seconds > max_seconds:
        raise InputRejected(ErrorCode.MEDIA_TOO_LONG, file=name, kind=AUDIO, seconds=max_seconds)
    raise InputRejected(ErrorCode.AUDIO_TOO_DENSE, file=name)


def _check_video(
    name: str,
    found: MediaType,
    data: bytes,
    max_seconds: float,
    max_pixels: int,
    max_audio_seconds: float,
) -> MediaType:
    from core.experts.video import FramesTooLarge, NoVideoStream, measure_video

    try:
        measured = measure_video(data, max_seconds=max_seconds, max_pixels=max_pixels)
    except NoVideoStream as exc:
        sound = _AUDIO_ONLY.get(found.mime)
        if sound is None:
            raise _damaged(name, found) from exc
        _check_audio(name, sound, data, max_audio_seconds)
        return sound
    except FramesTooLarge:
        raise InputRejected(ErrorCode.VIDEO_FRAMES_TOO_LARGE, file=name, limit=max_pixels) from None
    except ValueError as exc:
        raise _damaged(name, found) from exc
    if not measured.whole:
        raise InputRejected(ErrorCode.MEDIA_TOO_LONG, file=name, kind=VIDEO, seconds=max_seconds)
    return found
