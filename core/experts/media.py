"""Media post-processing the experts and adapters share (Pillow, soundfile, PyAV).

Pure, CPU-bound functions: callers run them in a worker thread
(``asyncio.to_thread``).  Everything takes and returns bytes so results can go
straight into a :class:`core.results.Blob` or the store.  Unreadable input
raises ``ValueError``.
"""

from __future__ import annotations

import colorsys
import io
import os
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from fractions import Fraction

import av
import numpy as np
import soundfile as sf
from PIL import Image, ImageDraw, ImageFont, ImageOps, UnidentifiedImageError

from core.mediatypes import sniff
from core.results import Box, Segment

# Distinct, readable colours; further labels get colours derived from a hash.
_PALETTE = (
    (230, 25, 75),
    (60, 180, 75),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (250, 190, 212),
    (0, 128, 128),
    (170, 110, 40),
    (128, 0, 0),
)
# Anchor colours of the "inferno" colour map, dark (near) to bright (far).
_INFERNO = (
    (0, 0, 4),
    (40, 11, 84),
    (101, 21, 110),
    (159, 42, 99),
    (212, 72, 66),
    (245, 125, 21),
    (250, 193, 39),
    (252, 255, 164),
)
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
MAX_AUDIO_SECONDS = 1800.0
MAX_VIDEO_FRAMES = 4000
MAX_VIDEO_PIXELS = 8192 * 8192


# --- images ------------------------------------------------------------------


def _open(data: bytes) -> Image.Image:
    try:
        im = Image.open(io.BytesIO(data))
        im.load()
    except (
        UnidentifiedImageError,
        OSError,
        ValueError,
        SyntaxError,
        Image.DecompressionBombError,
    ) as exc:
        raise ValueError(f"not a readable image: {exc}") from exc
    # Pipelines apply the EXIF orientation too, so coordinates line up.
    return ImageOps.exif_transpose(im)


def _open_rgb(data: bytes) -> Image.Image:
    return _open(data).convert("RGB")


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def label_colours(labels: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """One colour per distinct label, in order of first appearance."""
    out: dict[str, tuple[int, int, int]] = {}
    for label in labels:
        if label in out:
            continue
        n = len(out)
        if n < len(_PALETTE):
            out[label] = _PALETTE[n]
        else:
            hue = (zlib.crc32(label.encode()) % 360) / 360
            r, g, b = colorsys.hsv_to_rgb(hue, 0.8, 0.95)
            out[label] = (round(r * 255), round(g * 255), round(b * 255))
    return out


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (ImportError, OSError):  # Pillow built without FreeType
        return ImageFont.load_default()


def _ink(colour: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on ``colour``."""
    r, g, b = colour
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


def draw_boxes(image: bytes, boxes: Sequence[Box]) -> bytes:
    """The image as PNG with a coloured rectangle and a "label 0.93" caption per box."""
    im = _open_rgb(image)
    w, h = im.size
    draw = ImageDraw.Draw(im)
    width = max(2, round(min(w, h) / 200))
    font = _font(max(10, min(w, h) // 40))
    colours = label_colours([b.label for b in boxes])
    for box in boxes:
        x0 = min(max(min(box.xmin, box.xmax), 0), w - 1)
        x1 = min(max(max(box.xmin, box.xmax), 0), w - 1)
        y0 = min(max(min(box.ymin, box.ymax), 0), h - 1)
        y1 = min(max(max(box.ymin, box.ymax), 0), h - 1)
        colour = colours[box.label]
        draw.rectangle((x0, y0, x1, y1), outline=colour, width=width)
        caption = f"{box.label} {box.score:.2f}"
        left, top, right, bottom = draw.textbbox((0, 0), caption, font=font)
        tw, th = right - left + 4, bottom - top + 4
        tx = min(x0, max(w - tw, 0))
        ty = y0 - th if y0 - th >= 0 else min(y0 + width, max(h - th, 0))
        draw.rectangle((tx, ty, tx + tw, ty + th), fill=colour)
        draw.text((tx + 2 - left, ty + 2 - top), caption, fill=_ink(colour), font=font)
    return _png(im)


def mask_overlay(image: bytes, segments: Sequence[Segment], *, alpha: float = 0.5) -> bytes:
    """The image as PNG with a translucent colour over each segment's mask.

    A legend strip (swatch + label) is added *below* the image, so no pixel
    outside the masks is touched.  Masks of another size are resized.
    """
    im = _open_rgb(image)
    with_mask = [s for s in segments if s.mask]
    colours = label_colours([s.label for s in with_mask])
    level = round(255 * min(max(alpha, 0.0), 1.0))
    for seg in with_mask:
        assert seg.mask is not None
        mask = _open(seg.mask).convert("L")
        if mask.size != im.size:
            mask = mask.resize(im.size, Image.Resampling.NEAREST)
        im.paste(colours[seg.label], mask=mask.point(lambda v: level if v > 127 else 0))
    if not colours:
        return _png(im)
    return _png(_with_legend(im, colours))


def _with_legend(im: Image.Image, colours: dict[str, tuple[int, int, int]]) -> Image.Image:
    w, h = im.size
    font = _font(max(10, min(max(w, 200), 1200) // 45))
    probe = ImageDraw.Draw(im)
    line = int(probe.textbbox((0, 0), "Ag", font=font)[3]) + 6
    pad, swatch = 6, line - 6
    x, y, spots = pad, pad, []
    for label in colours:
        item = swatch + 4 + round(probe.textlength(label, font=font)) + 2 * pad
        if x > pad and x + item > w:
            x, y = pad, y + line
        spots.append((label, x, y))
        x += item
    out = Image.new("RGB", (w, h + y + line + pad), (255, 255, 255))
    out.paste(im, (0, 0))
    draw = ImageDraw.Draw(out)
    for label, lx, ly in spots:
        draw.rectangle((lx, h + ly, lx + swatch, h + ly + swatch), fill=colours[label])
        draw.text((lx + swatch + 4, h + ly), label, fill=(0, 0, 0), font=font)
    return out


def _colour_map() -> np.ndarray:
    anchors = np.array(_INFERNO, dtype=np.float64)
    xs = np.linspace(0, 255, len(anchors))
    return np.stack(
        [np.interp(np.arange(256), xs, anchors[:, c]) for c in range(3)], axis=1
    ).astype(np.uint8)


def depth_to_image(depth: np.ndarray | bytes) -> bytes:
    """A depth map (array, or an image such as a 16-bit PNG) as a colour PNG."""
    arr = np.asarray(_open(depth), dtype=np.float64) if isinstance(depth, bytes) else depth
    arr = np.squeeze(np.asarray(arr, dtype=np.float64))
    if arr.ndim == 3 and arr.shape[-1] in (3, 4):
        arr = arr[..., :3].mean(axis=-1)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"a depth map must be 2-D, got shape {np.shape(depth)}")
    finite = np.isfinite(arr)
    if not finite.any():
        arr = np.zeros_like(arr)
    else:
        lo, hi = arr[finite].min(), arr[finite].max()
        arr = np.where(finite, arr, lo)
        arr = (arr - lo) / (hi - lo) if hi > lo else np.zeros_like(arr)
    index = np.clip(np.rint(arr * 255), 0, 255).astype(np.uint8)
    return _png(Image.fromarray(_colour_map()[index], mode="RGB"))


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) as displayed (EXIF rotation applied), without decoding pixels."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            orientation = im.getexif().get(0x0112, 1)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f"not a readable image: {exc}") from exc
    return (h, w) if orientation in (5, 6, 7, 8) else (w, h)


def fit_image(data: bytes, max_bytes: int, *, max_side: int | None = None) -> tuple[bytes, str]:
    """Re-encode (and if need be shrink) an image until it is at most ``max_bytes``.

    Returns the original when it already fits.  Otherwise tries JPEG (WEBP
    when the image has transparency) at falling quality, then halves the
    size and tries again.  Raises ValueError when even a tiny image won't fit.
    """
    im = _open(data)
    source = sniff(data)
    source_mime = source.mime if source is not None else "application/octet-stream"
    if len(data) <= max_bytes and (max_side is None or max(im.size) <= max_side):
        return data, source_mime
    alpha = im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info)
    im = im.convert("RGBA" if alpha else "RGB")
    if max_side is not None and max(im.size) > max_side:
        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        if source_mime == "image/png":  # a lossless graphic may fit once it is smaller
            out = _encode(im, "PNG", None)
            if len(out) <= max_bytes:
                return out, "image/png"
    lossy = "WEBP" if alpha else "JPEG"
    while True:
        for quality in (85, 70, 55, 40):
            out = _encode(im, lossy, quality)
            if len(out) <= max_bytes:
                return out, f"image/{lossy.lower()}"
        if min(im.size) < 32:
            raise ValueError(f"cannot fit the image into {max_bytes} bytes")
        im = im.resize((max(1, im.width // 2), max(1, im.height // 2)), Image.Resampling.LANCZOS)


def _encode(im: Image.Image, fmt: str, quality: int | None) -> bytes:
    buf = io.BytesIO()
    if fmt == "PNG":
        im.save(buf, format="PNG", optimize=True)
    elif fmt == "WEBP":
        im.save(buf, format="WEBP", quality=quality, method=4)
    else:
        im.save(buf, format="JPEG", quality=quality, optimize=True, progressive=True)
    return buf.getvalue()


# --- audio -------------------------------------------------------------------


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
    """Audio that plays on phones and in chat clients: OGG/Opus, else MP3, else WAV."""
    x = np.asarray(samples, dtype=np.float32)
    x = x[:, None] if x.ndim == 1 else x
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError("no samples to encode")
    if x.shape[1] > x.shape[0]:  # (channels, frames) as some pipelines return
        x = x.T
    x = np.clip(np.nan_to_num(x), -1.0, 1.0)
    attempts = (
        ("OGG", "OPUS", "audio/ogg", _OPUS_RATES, 48000),
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


# --- video -------------------------------------------------------------------


def _as_rgb_image(frame: np.ndarray | Image.Image) -> Image.Image:
    if isinstance(frame, Image.Image):
        return frame.convert("RGB")
    arr = np.asarray(frame)
    if arr.dtype != np.uint8:
        scale = 255.0 if arr.size and float(np.nanmax(arr)) <= 1.0 else 1.0
        arr = np.clip(np.nan_to_num(arr.astype(np.float64)) * scale, 0, 255).astype(np.uint8)
    if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):
        arr = np.moveaxis(arr, 0, -1)  # channels first → last
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    return Image.fromarray(arr).convert("RGB")


def _video_codec() -> str:
    for name in ("libx264", "h264", "libopenh264", "mpeg4"):
        try:
            av.Codec(name, "w")
        except (av.FFmpegError, ValueError):  # UnknownCodecError is a ValueError
            continue
        return name
    raise ValueError("no video encoder is available")


def encode_video(frames: Sequence[np.ndarray | Image.Image], fps: int = 8) -> bytes:
    """An MP4 (H.264, yuv420p, even dimensions) that plays in browsers and on phones."""
    if not frames:
        raise ValueError("no frames to encode")
    images = [_as_rgb_image(f) for f in frames]
    w, h = images[0].size
    w, h = max(2, w - w % 2), max(2, h - h % 2)
    # A real file, not BytesIO: "+faststart" (index first, so phones can play
    # while downloading) rewrites the file after encoding.
    with tempfile.TemporaryDirectory(prefix="video-") as tmp:
        path = os.path.join(tmp, "out.mp4")
        with av.open(path, mode="w", format="mp4", options={"movflags": "+faststart"}) as out:
            codec = _video_codec()
            stream = out.add_stream(codec, rate=Fraction(fps))
            assert isinstance(stream, av.VideoStream)
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            if codec == "libx264":
                stream.options = {"crf": "23", "preset": "veryfast"}
            for im in images:
                if im.size != (w, h):
                    im = im.resize((w, h), Image.Resampling.BILINEAR)
                frame = av.VideoFrame.from_ndarray(np.asarray(im), format="rgb24")
                out.mux(stream.encode(frame))
            out.mux(stream.encode(None))
        with open(path, "rb") as f:
            return f.read()


def _to_rgb_array(frame: av.VideoFrame, size: int | None) -> np.ndarray:
    im = Image.fromarray(frame.to_ndarray(format="rgb24"))
    if size is not None:
        # Shorter side to `size`, centre crop: what video classifiers expect.
        im = ImageOps.fit(im, (size, size), Image.Resampling.BILINEAR)
    return np.asarray(im.convert("RGB"))


def decode_video_frames(
    data: bytes,
    *,
    num_frames: int = 16,
    size: int | None = 224,
    max_decoded: int = MAX_VIDEO_FRAMES,
) -> list[np.ndarray]:
    """``num_frames`` RGB frames (H, W, 3 uint8) evenly spread over the video.

    Decodes at most ``max_decoded`` frames, refuses frames over
    ``MAX_VIDEO_PIXELS`` and keeps at most ``2 * num_frames`` converted frames
    in memory: when the count is unknown it keeps every k-th frame and
    doubles k whenever the buffer fills.
    """
    if num_frames < 1:
        raise ValueError("num_frames must be at least 1")
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise ValueError("the file has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            cc = stream.codec_context
            if cc.width * cc.height > MAX_VIDEO_PIXELS:
                raise ValueError(f"video frames of {cc.width}×{cc.height} are too large")
            total = stream.frames if 0 < stream.frames <= max_decoded else 0
            if total:
                return _take_known(container.decode(stream), total, num_frames, size)
            return _take_strided(container.decode(stream), num_frames, size, max_decoded)
    except av.FFmpegError as exc:
        raise ValueError(f"not a readable video: {exc}") from exc


def _take_known(
    decoded: Iterator[av.VideoFrame], total: int, num_frames: int, size: int | None
) -> list[np.ndarray]:
    wanted = sorted(set(np.linspace(0, total - 1, min(num_frames, total)).round().astype(int)))
    out: list[np.ndarray] = []
    for i, frame in enumerate(decoded):
        if frame.width * frame.height > MAX_VIDEO_PIXELS:
            raise ValueError("video frame too large")
        if i == wanted[len(out)]:
            out.append(_to_rgb_array(frame, size))
            if len(out) == len(wanted):
                break
    if not out:
        raise ValueError("the video holds no frames")
    return out


def _take_strided(
    decoded: Iterator[av.VideoFrame], num_frames: int, size: int | None, max_decoded: int
) -> list[np.ndarray]:
    kept: list[tuple[int, np.ndarray]] = []
    stride = 1
    for i, frame in enumerate(decoded):
        if i >= max_decoded:
            break
        if frame.width * frame.height > MAX_VIDEO_PIXELS:
            raise ValueError("video frame too large")
        if i % stride:
            continue
        kept.append((i, _to_rgb_array(frame, size)))
        if len(kept) >= 2 * num_frames:
            stride *= 2
            kept = [(j, a) for j, a in kept if j % stride == 0]
    if not kept:
        raise ValueError("the video holds no frames")
    picks = np.linspace(0, len(kept) - 1, min(num_frames, len(kept))).round().astype(int)
    return [kept[p][1] for p in sorted(set(picks.tolist()))]
