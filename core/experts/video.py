"""Video encoding and frame sampling the experts share (PyAV, Pillow, NumPy).

Pure, CPU-bound functions: callers run them in a worker thread
(``core.threads.work``).  Unreadable input raises ``ValueError``.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from fractions import Fraction

import av
import numpy as np
from PIL import Image, ImageOps

from core.experts.audio import Measured

MAX_VIDEO_FRAMES = 4000
MAX_VIDEO_PIXELS = 8192 * 8192
MAX_VIDEO_SECONDS = 600.0
MAX_FRAME_RATE = 240  # what measuring reads per second of the cap, at most


class NoVideoStream(ValueError):
    """The container is readable but holds no video (often: sound only)."""


class FramesTooLarge(ValueError):
    """The video's frames have more pixels than are accepted."""


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


def measure_video(
    data: bytes, *, max_seconds: float = MAX_VIDEO_SECONDS, max_pixels: int = MAX_VIDEO_PIXELS
) -> Measured:
    """Check that ``data`` is a video and measure it: its first frame is
    decoded (and its size checked against ``max_pixels``), every packet of the
    video stream is read for its timestamp.

    Reading stops once past ``max_seconds`` or past ``MAX_FRAME_RATE`` packets
    per second of the cap, which ``whole=False`` reports.  Raises
    :class:`NoVideoStream`, :class:`FramesTooLarge`, or ValueError when the
    bytes are not a readable video or no frame decodes.
    """
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise NoVideoStream("the file has no video stream")
            stream = container.streams.video[0]
            _check_size(stream.codec_context.width, stream.codec_context.height, max_pixels)
            max_packets = int(max_seconds * MAX_FRAME_RATE) + 1
            start: float | None = None
            end = 0.0
            packets = 0
            decoded = False
            for packet in container.demux(stream):
                if packet.size == 0:  # the end-of-stream marker
                    continue
                packets += 1
                if not decoded:
                    decoded = _decodes(packet.decode(), max_pixels)
                stamp = packet.pts if packet.pts is not None else packet.dts
                if stamp is not None and packet.time_base is not None:
                    t0 = float(stamp * packet.time_base)
                    start = t0 if start is None else min(start, t0)
                    end = max(end, float((stamp + (packet.duration or 0)) * packet.time_base))
                seconds = _span(start, end, packets, stream)
                if seconds > max_seconds or packets > max_packets:
                    if not decoded:
                        raise ValueError("no frame of the video could be decoded")
                    return Measured(seconds, whole=False)
            if not decoded:  # frames the decoder still holds (B-frame delay)
                decoded = _decodes(stream.codec_context.decode(None), max_pixels)
            if not decoded:
                raise ValueError("no frame of the video could be decoded")
            return Measured(_span(start, end, packets, stream), whole=True)
    except av.FFmpegError as exc:
        raise ValueError(f"not a readable video: {exc}") from exc


def _check_size(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise FramesTooLarge(f"video frames of {width}×{height} pixels are too large")


def _decodes(frames: Sequence[av.VideoFrame] | Iterator[av.VideoFrame], max_pixels: int) -> bool:
    for frame in frames:
        _check_size(frame.width, frame.height, max_pixels)
        return True
    return False


def _span(start: float | None, end: float, packets: int, stream: av.VideoStream) -> float:
    """Seconds from the first timestamp to the end of the last packet, or
    (no timestamps) the packet count at the stream's frame rate."""
    if start is not None:
        return max(0.0, end - start)
    rate = stream.average_rate or stream.guessed_rate or 25
    return packets / float(rate)
