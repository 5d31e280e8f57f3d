"""Long answer text for tests that need one: varied sentences, never one
piece repeated over and over (the answer stage cuts a model that loops:
core/repeats.py), the same text for the same seed."""

from __future__ import annotations

import random

_VOCABULARY = (
    "the model read your photo and found a small cat sitting on a red sofa near",
    "window while light falls across wooden floor speech file holds answer spoken",
    "aloud clear voice picture shows two boxes drawn around objects it detected",
    "caption says summary gives short version translation turns text into french",
    "depth map marks what is near far each task ran in order results below quiet",
    "morning garden river bridge tall tree yellow leaves autumn wind soft rain",
)
_WORDS = " ".join(_VOCABULARY).split()


def long_prose(chars: int, seed: int = 0) -> str:
    """Sentences of 6–12 words, at least ``chars`` characters in all."""
    rng = random.Random(seed)
    sentences: list[str] = []
    size = 0
    while size < chars:
        words = rng.choices(_WORDS, k=rng.randint(6, 12))
        sentence = " ".join(words).capitalize() + "."
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)
