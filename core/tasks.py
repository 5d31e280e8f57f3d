"""The task table: the 24 tasks of the HuggingGPT paper, named by their
Hugging Face pipeline tags, with the paper's names as aliases, plus
depth-estimation (the paper reaches depth only inside ControlNet; a depth map
of its own is a resource later tasks and turns can use).

Every other part (planner spec, validation, selection, execution) reads this
table, so adding a task is one row here plus an expert that can run it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# Modalities an argument or an output can have.
TEXT = "text"
IMAGE = "image"
AUDIO = "audio"
VIDEO = "video"
MODALITIES = (TEXT, IMAGE, AUDIO, VIDEO)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    area: str
    args: tuple[str, ...]  # required argument modalities
    optional: tuple[str, ...]  # optional argument modalities
    output: str  # the modality of the main output
    aliases: tuple[str, ...]
    summary: str  # one line for the planner's task specification


def _t(
    name: str,
    area: str,
    args: tuple[str, ...],
    output: str,
    aliases: tuple[str, ...],
    summary: str,
    optional: tuple[str, ...] = (),
) -> TaskSpec:
    return TaskSpec(name, area, args, optional, output, aliases, summary)


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        _t(
            "text-classification",
            "nlp",
            (TEXT,),
            TEXT,
            ("Text-CLS", "sentiment-analysis"),
            "label a text (sentiment, topic, toxicity)",
        ),
        _t(
            "token-classification",
            "nlp",
            (TEXT,),
            TEXT,
            ("Token-CLS", "ner"),
            "label words in a text (named entities, parts of speech)",
        ),
        _t(
            "text2text-generation",
            "nlp",
            (TEXT,),
            TEXT,
            ("Text2text-Generation",),
            "rewrite or transform a text (paraphrase, correct grammar, answer from text)",
        ),
        _t(
            "summarization",
            "nlp",
            (TEXT,),
            TEXT,
            ("Summarization",),
            "shorten a long text to its key points",
        ),
        _t(
            "translation",
            "nlp",
            (TEXT,),
            TEXT,
            ("Translation",),
            "translate a text into another language (say which in the text)",
        ),
        _t(
            "question-answering",
            "nlp",
            (TEXT,),
            TEXT,
            ("Question-Answering", "qa"),
            "answer a question from a context; text holds 'question\\ncontext'",
        ),
        _t("conversational", "nlp", (TEXT,), TEXT, ("Conversation", "chat"), "reply in a dialogue"),
        _t(
            "text-generation",
            "nlp",
            (TEXT,),
            TEXT,
            ("Text-Generation",),
            "continue or write a text from a prompt",
        ),
        _t(
            "tabular-classification",
            "nlp",
            (TEXT,),
            TEXT,
            ("Tabular-CLS",),
            "classify a row of a table given as text (CSV)",
        ),
        _t(
            "image-to-text",
            "cv",
            (IMAGE,),
            TEXT,
            ("Image-to-Text", "image-captioning", "captioning"),
            "describe an image in words (caption)",
        ),
        _t(
            "text-to-image",
            "cv",
            (TEXT,),
            IMAGE,
            ("Text-to-Image",),
            "draw an image from a description",
        ),
        _t(
            "visual-question-answering",
            "cv",
            (TEXT, IMAGE),
            TEXT,
            ("VQA",),
            "answer a question about an image",
        ),
        _t(
            "image-segmentation",
            "cv",
            (IMAGE,),
            IMAGE,
            ("Segmentation", "Image-Segmentation"),
            "split an image into labelled regions (mask overlay)",
        ),
        _t(
            "document-question-answering",
            "cv",
            (TEXT, IMAGE),
            TEXT,
            ("DQA", "document-qa"),
            "answer a question about a document image (invoice, form)",
        ),
        _t(
            "image-classification",
            "cv",
            (IMAGE,),
            TEXT,
            ("Image-CLS", "Image-Classification"),
            "label what an image shows",
        ),
        _t(
            "image-to-image",
            "cv",
            (IMAGE,),
            IMAGE,
            ("Image-to-image",),
            "change an image following an instruction in text",
            optional=(TEXT,),
        ),
        _t(
            "object-detection",
            "cv",
            (IMAGE,),
            IMAGE,
            ("Object-Detection", "detection"),
            "find and box objects in an image (boxed image + labels)",
        ),
        _t(
            "controlnet-sd",
            "cv",
            (IMAGE, TEXT),
            IMAGE,
            ("ControlNet-SD", "controlnet", "canny-control", "pose-control", "depth-control"),
            "draw a new image from a text that follows an image's edges, pose or depth",
        ),
        _t(
            "depth-estimation",
            "cv",
            (IMAGE,),
            IMAGE,
            ("Depth-Estimation", "depth"),
            "estimate how far each pixel is (a viewable depth map)",
        ),
        _t(
            "text-to-video",
            "video",
            (TEXT,),
            VIDEO,
            ("Text-to-Video",),
            "make a short video from a description",
        ),
        _t(
            "video-classification",
            "video",
            (VIDEO,),
            TEXT,
            ("Video-CLS",),
            "label what a video shows",
        ),
        _t(
            "text-to-speech",
            "audio",
            (TEXT,),
            AUDIO,
            ("Text-to-Speech", "tts"),
            "speak a text aloud (audio file)",
        ),
        _t(
            "audio-classification",
            "audio",
            (AUDIO,),
            TEXT,
            ("Audio-CLS",),
            "label a sound or a spoken command",
        ),
        _t(
            "automatic-speech-recognition",
            "audio",
            (AUDIO,),
            TEXT,
            ("ASR", "speech-to-text"),
            "transcribe speech in an audio file",
        ),
        _t(
            "audio-to-audio",
            "audio",
            (AUDIO,),
            AUDIO,
            ("Audio-to-Audio", "speech-enhancement"),
            "clean up or separate the sounds of an audio file",
        ),
    )
}


_SEPARATORS = re.compile(r"[\s_\-]+")


def _norm(name: str) -> str:
    return _SEPARATORS.sub("", name).casefold()


_BY_ALIAS: dict[str, str] = {}
for _spec in TASKS.values():
    _BY_ALIAS[_norm(_spec.name)] = _spec.name
    for _alias in _spec.aliases:
        _BY_ALIAS[_norm(_alias)] = _spec.name


@functools.lru_cache(maxsize=1024)  # asked for every task of the table, every request
def canonical_task(name: str) -> str | None:
    """The canonical task name for a name or alias (case, spaces, ``_`` and
    ``-`` ignored), or None when it names no task we know."""
    return _BY_ALIAS.get(_norm(name))


def spec(name: str) -> TaskSpec:
    return TASKS[name]


# Tasks whose calls take minutes (video) or tens of seconds (image/audio generation).
VIDEO_WORK = frozenset({"text-to-video"})
MEDIA_WORK = frozenset(
    {"text-to-image", "image-to-image", "controlnet-sd", "text-to-speech", "audio-to-audio"}
)


@dataclass(frozen=True, slots=True)
class TaskTimeouts:
    """How long one model call may take, by the kind of work (seconds)."""

    classic: float = 120.0
    media: float = 300.0
    video: float = 900.0

    def for_task(self, task: str) -> float:
        if task in VIDEO_WORK:
            return self.video
        if task in MEDIA_WORK:
            return self.media
        return self.classic

    def typical(self, task: str) -> float:
        """How long one call usually takes (seconds): a rough figure for
        estimates, never a limit."""
        if task in VIDEO_WORK:
            return 120.0
        if task in MEDIA_WORK:
            return 20.0
        return 3.0

    @property
    def longest(self) -> float:
        return max(self.classic, self.media, self.video)
