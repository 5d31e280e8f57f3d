"""Inputs and catalog entries for the local-inference tests (no torch here)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from core.catalog import ModelInfo
from core.results import Blob


def model(task: str, path: Path | None = None, model_id: str | None = None) -> ModelInfo:
    """A catalog entry as a user writes it: ``local`` points at the directory."""
    return ModelInfo(id=model_id or f"tiny/{task}", task=task, local=str(path) if path else None)


def png(size: tuple[int, int] = (48, 40)) -> Blob:
    """A white picture with a black square: edges to find, something to label."""
    im = Image.new("RGB", size, "white")
    im.paste((0, 0, 0), (10, 10, 30, 30))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return Blob(kind="image", mime="image/png", data=buf.getvalue())


def sine_wav(seconds: float = 1.0, sr: int = 16000) -> Blob:
    import soundfile as sf

    t = np.arange(int(seconds * sr)) / sr
    buf = io.BytesIO()
    sf.write(buf, (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), sr, format="WAV")
    return Blob(kind="audio", mime="audio/wav", data=buf.getvalue())
