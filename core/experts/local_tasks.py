"""Per-task adapters of the local backend: load a model directory, run it, normalise.

Each adapter is a pair of plain, blocking functions (the backend calls them in
a worker thread): ``load(path, ctx)`` builds a ``transformers`` or
``diffusers`` pipeline from a directory, and ``run(pipe, inputs)`` turns one
call's output into a :class:`TaskResult`.  torch, transformers and diffusers
are imported inside the functions: the base install has none of them.

The diffusers adapters live in :mod:`core.experts.local_diffusion`.
transformers 5 dropped the summarization, translation, text2text, image-to-text,
question-answering and VQA pipelines; those adapters call the model classes
directly, as the pipelines used to.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from core.errors import TaskFailed
from core.experts import media
from core.results import Answer, Blob, Box, Entity, Label, Segment, TaskInputs, TaskResult

TOP_K = 5
MAX_NEW_TOKENS = 128


@dataclass(frozen=True, slots=True)
class LoadContext:
    """What a loader needs besides the directory."""

    device: str  # "cpu", "cuda", "cuda:1"…
    resolve: Callable[[str], Path | None]  # a model id → its local directory
    controlnet_base: str  # the Stable Diffusion model a bare ControlNet plugs into
    steps: int | None = None  # diffusion steps; None = the pipeline's default

    @property
    def half(self) -> bool:
        return self.device.startswith("cuda")

    def dtype(self) -> Any:
        import torch

        return torch.float16 if self.half else torch.float32


@dataclass(frozen=True, slots=True)
class Adapter:
    library: str  # the package the loader needs besides torch
    load: Callable[[Path, LoadContext], Any]
    run: Callable[[Any, TaskInputs], TaskResult]


# --- inputs --------------------------------------------------------------------


def need_text(inputs: TaskInputs) -> str:
    if not inputs.text or not inputs.text.strip():
        raise TaskFailed("this task needs a text argument", retryable=False)
    return inputs.text


def need_image(inputs: TaskInputs) -> Image.Image:
    if inputs.image is None:
        raise TaskFailed("this task needs an image argument", retryable=False)
    try:
        im = Image.open(io.BytesIO(inputs.image.data))
        im.load()
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise TaskFailed(f"the image could not be read: {exc}", retryable=False) from exc
    return ImageOps.exif_transpose(im).convert("RGB")


def _audio(inputs: TaskInputs, sampling_rate: int) -> dict[str, Any]:
    if inputs.audio is None:
        raise TaskFailed("this task needs an audio argument", retryable=False)
    try:
        samples, sr = media.decode_audio(inputs.audio.data, target_sr=sampling_rate)
    except ValueError as exc:
        raise TaskFailed(f"the audio could not be read: {exc}", retryable=False) from exc
    return {"raw": samples, "sampling_rate": sr}


def png_bytes(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def png_blob(im: Image.Image) -> Blob:
    return Blob(kind="image", mime="image/png", data=png_bytes(im.convert("RGB")))


def _labels(raw: Any) -> tuple[Label, ...]:
    if raw and isinstance(raw[0], list):  # one list per input
        raw = raw[0]
    items = [Label(str(d["label"]), float(d["score"])) for d in raw]
    return tuple(sorted(items, key=lambda x: -x.score))


def _generated(raw: Any) -> str:
    """The text of a generation pipeline's first output (a string or a chat)."""
    first = raw[0] if isinstance(raw, list) else raw
    if isinstance(first, list):
        first = first[0]
    text = first.get("generated_text", "") if isinstance(first, dict) else first
    if isinstance(text, list):  # chat input: the conversation with the reply last
        text = text[-1].get("content", "") if text else ""
    return str(text).strip()


# --- transformers pipelines ----------------------------------------------------------


def _pipeline(ptask: str) -> Callable[[Path, LoadContext], Any]:
    def load(path: Path, ctx: LoadContext) -> Any:
        from transformers import pipeline
        from transformers.utils import logging as tf_logging

        tf_logging.disable_progress_bar()  # a server's log, not a terminal
        # ``path`` is always an existing directory, which transformers reads
        # without asking the Hub.  (pipeline() forwards local_files_only to
        # the pipeline class too, where most reject it, so it is not passed.)
        return pipeline(ptask, model=str(path), device=ctx.device, dtype=ctx.dtype())  # type: ignore[call-overload]

    return load


def _run_text_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(labels=_labels(pipe(need_text(inputs), top_k=TOP_K)))


def _run_token_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(need_text(inputs), aggregation_strategy="simple")
    return TaskResult(
        entities=tuple(
            Entity(
                word=str(d["word"]),
                group=str(d.get("entity_group") or d.get("entity")),
                score=float(d["score"]),
                start=None if d.get("start") is None else int(d["start"]),
                end=None if d.get("end") is None else int(d["end"]),
            )
            for d in raw
        )
    )


def _run_text_gen(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(need_text(inputs), max_new_tokens=MAX_NEW_TOKENS, return_full_text=False)
    return TaskResult(text=_generated(raw))


def _run_chat(pipe: Any, inputs: TaskInputs) -> TaskResult:
    if getattr(pipe.tokenizer, "chat_template", None):
        chat = [{"role": "user", "content": need_text(inputs)}]
        return TaskResult(text=_generated(pipe(chat, max_new_tokens=MAX_NEW_TOKENS)))
    return _run_text_gen(pipe, inputs)


def _run_image_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(labels=_labels(pipe(need_image(inputs), top_k=TOP_K)))


def _run_detection(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(need_image(inputs))
    boxes = tuple(
        Box(
            str(d["label"]),
            float(d["score"]),
            *(float(d["box"][k]) for k in ("xmin", "ymin", "xmax", "ymax")),
        )
        for d in raw
    )
    return TaskResult(boxes=tuple(sorted(boxes, key=lambda b: -b.score)))


def _run_segmentation(pipe: Any, inputs: TaskInputs) -> TaskResult:
    segments = []
    for d in pipe(need_image(inputs)):
        mask = d.get("mask")
        score = d.get("score")
        segments.append(
            Segment(
                label=str(d.get("label") or "segment"),
                score=None if score is None else float(score),
                mask=None if mask is None else png_bytes(mask.convert("L")),
            )
        )
    return TaskResult(segments=tuple(segments))


def _run_doc_qa(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(image=need_image(inputs), question=need_text(inputs), top_k=1)
    raw = raw if isinstance(raw, list) else [raw]
    # Donut answers None when its output lacks <s_answer>…</s_answer>, and has no score.
    found = [d for d in raw if d.get("answer")]
    if not found:
        raise TaskFailed("the model found no answer in the document")
    return TaskResult(
        answers=tuple(
            Answer(str(d["answer"]).strip(), None if d.get("score") is None else float(d["score"]))
            for d in found
        )
    )


def _run_tts(pipe: Any, inputs: TaskInputs) -> TaskResult:
    out = pipe(need_text(inputs))
    data, mime = media.encode_speech(np.asarray(out["audio"]), int(out["sampling_rate"]))
    return TaskResult(media=(Blob(kind="audio", mime=mime, data=data),))


def _sampling_rate(pipe: Any) -> int:
    return int(getattr(pipe.feature_extractor, "sampling_rate", 16000))


def _run_audio_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(labels=_labels(pipe(_audio(inputs, _sampling_rate(pipe)), top_k=TOP_K)))


def _run_asr(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(text=str(pipe(_audio(inputs, _sampling_rate(pipe)))["text"]).strip())


def _softmax_top(logits: Any, id2label: dict[int, str]) -> tuple[Label, ...]:
    probs = logits.float().softmax(-1)[0]
    k = min(TOP_K, probs.shape[-1])
    scores, ids = probs.topk(k)
    return tuple(
        Label(str(id2label.get(int(i), f"LABEL_{int(i)}")), float(s))
        for s, i in zip(scores, ids, strict=True)
    )


def _run_video_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    """Frames spread over the whole clip (the pipeline itself reads only a path
    and takes the first frames), then the pipeline's processor and model."""
    import torch

    if inputs.video is None:
        raise TaskFailed("this task needs a video argument", retryable=False)
    model = pipe.model
    count = int(getattr(model.config, "num_frames", 16) or 16)
    try:
        frames = media.decode_video_frames(inputs.video.data, num_frames=count)
    except ValueError as exc:
        raise TaskFailed(f"the video could not be read: {exc}", retryable=False) from exc
    frames = [frames[min(len(frames) - 1, i * len(frames) // count)] for i in range(count)]
    if pipe.video_processor is not None:
        batch = pipe.video_processor(
            [np.stack(frames)], do_sample_frames=False, return_tensors="pt"
        )
    else:
        batch = pipe.image_processor(list(frames), return_tensors="pt")
    with torch.inference_mode():
        logits = model(**_on(model, batch)).logits
    return TaskResult(labels=_softmax_top(logits, model.config.id2label))


# --- transformers models called directly --------------------------------------------------


def _config(path: Path) -> Any:
    from transformers import AutoConfig
    from transformers.utils import logging as tf_logging

    tf_logging.disable_progress_bar()  # the loaders below print no bars either
    return AutoConfig.from_pretrained(path, local_files_only=True)


def _on(model: Any, batch: Any) -> dict[str, Any]:
    """``batch`` on the model's device, floating tensors in its dtype (fp16 on GPU)."""
    return {
        k: v.to(model.device, model.dtype) if v.is_floating_point() else v.to(model.device)
        for k, v in batch.items()
    }


def _generate(tok: Any, model: Any, batch: Any) -> str:
    """What ``model`` generates from ``batch``, decoded by ``tok`` (a tokenizer or processor)."""
    import torch

    with torch.inference_mode():
        out = model.generate(**_on(model, batch), max_new_tokens=MAX_NEW_TOKENS)
    return str(tok.decode(out[0], skip_special_tokens=True)).strip()


def _load_seq2seq(path: Path, ctx: LoadContext) -> Any:
    if not getattr(_config(path), "is_encoder_decoder", False):
        return _pipeline("text-generation")(path, ctx)  # a decoder-only model: prompt it
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=ctx.dtype(), local_files_only=True)
    return (tok, model.to(ctx.device).eval())


def _seq2seq_runner(task: str) -> Callable[[Any, TaskInputs], TaskResult]:
    def run(loaded: Any, inputs: TaskInputs) -> TaskResult:
        if not isinstance(loaded, tuple):
            return _run_chat(loaded, inputs)
        tok, model = loaded
        params = getattr(model.config, "task_specific_params", None) or {}
        key = task if task in params else next((k for k in params if k.startswith(task)), None)
        prefix = str((params.get(key) or {}).get("prefix", "")) if key else ""
        enc = tok(prefix + need_text(inputs), return_tensors="pt", truncation=True)
        return TaskResult(text=_generate(tok, model, enc))

    return run


def _load_auto(kind: str) -> Callable[[Path, LoadContext], Any]:
    def load(path: Path, ctx: LoadContext) -> Any:
        import transformers

        _config(path)
        auto = getattr(transformers, kind)
        proc = transformers.AutoProcessor.from_pretrained(path, local_files_only=True)
        model = auto.from_pretrained(path, dtype=ctx.dtype(), local_files_only=True)
        return (proc, model.to(ctx.device).eval())

    return load


def _load_captioner(path: Path, ctx: LoadContext) -> Any:
    """VisionEncoderDecoder checkpoints (vit-gpt2, TrOCR) ship no processor, which the
    image-text-to-text pipeline needs: they are called directly, as transformers 4's
    image-to-text pipeline did.  BLIP, GIT and chat VLMs go through the pipeline."""
    if _config(path).model_type != "vision-encoder-decoder":
        return _pipeline("image-text-to-text")(path, ctx)
    import transformers

    images = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = transformers.VisionEncoderDecoderModel.from_pretrained(
        path, dtype=ctx.dtype(), local_files_only=True
    )
    return (images, tok, model.to(ctx.device).eval())


def _run_image_to_text(loaded: Any, inputs: TaskInputs) -> TaskResult:
    image = need_image(inputs)
    if isinstance(loaded, tuple):  # a VisionEncoderDecoder
        images, tok, model = loaded
        return TaskResult(text=_generate(tok, model, images(image, return_tensors="pt")))
    if not inputs.text:  # the pipeline insists on a prompt, which captioners do without
        proc = loaded.processor
        return TaskResult(
            text=_generate(proc, loaded.model, proc(images=image, return_tensors="pt"))
        )
    raw = loaded(images=image, text=inputs.text, max_new_tokens=MAX_NEW_TOKENS)
    return TaskResult(text=_generated(raw))


def _load_doc_qa(path: Path, ctx: LoadContext) -> Any:
    """Donut reads the page itself; LayoutLM models need words and boxes from
    Tesseract OCR, which the pipeline runs only when pytesseract is installed."""
    from transformers.utils import is_pytesseract_available

    if _config(path).model_type != "vision-encoder-decoder" and not is_pytesseract_available():
        raise TaskFailed(
            "this document-question-answering model needs Tesseract OCR: "
            "pip install pytesseract and install the tesseract-ocr package"
        )
    return _pipeline("document-question-answering")(path, ctx)


def _load_tts(path: Path, ctx: LoadContext) -> Any:
    if _config(path).model_type == "speecht5":  # the pipeline would fetch a vocoder from the Hub
        raise TaskFailed(
            "SpeechT5 needs a separate HiFi-GAN vocoder and speaker x-vectors, "
            "which the local backend does not load; use a VITS (MMS) or Bark model"
        )
    return _pipeline("text-to-audio")(path, ctx)


def _run_qa(loaded: Any, inputs: TaskInputs) -> TaskResult:
    """Extractive QA: the best span inside the context ("question\\ncontext")."""
    import torch

    tok, model = loaded
    question, _, context = need_text(inputs).partition("\n")
    if not context.strip():
        raise TaskFailed("question-answering needs 'question\\ncontext'", retryable=False)
    enc = tok(
        question,
        context,
        return_tensors="pt",
        truncation="only_second",
        return_offsets_mapping=True,
    )
    offsets = enc.pop("offset_mapping")[0].tolist()
    in_context = [s == 1 for s in enc.sequence_ids(0)]
    with torch.inference_mode():
        out = model(**enc.to(model.device))
    start = out.start_logits[0].float().softmax(-1).cpu().numpy()
    end = out.end_logits[0].float().softmax(-1).cpu().numpy()
    best = (0.0, 0, 0)
    for i in (i for i, c in enumerate(in_context) if c):
        for j in range(i, min(i + 30, len(in_context))):
            if in_context[j] and start[i] * end[j] > best[0]:
                best = (float(start[i] * end[j]), i, j)
    score, i, j = best
    answer = context[offsets[i][0] : offsets[j][1]] if score else ""
    return TaskResult(answers=(Answer(answer.strip(), score),))


def _load_vqa(path: Path, ctx: LoadContext) -> Any:
    archs = getattr(_config(path), "architectures", None) or []
    if any(a.endswith("ForQuestionAnswering") for a in archs):  # ViLT classifies, BLIP writes
        return _load_auto("AutoModelForVisualQuestionAnswering")(path, ctx)
    return _pipeline("image-text-to-text")(path, ctx)


def _run_vqa(loaded: Any, inputs: TaskInputs) -> TaskResult:
    import torch

    if not isinstance(loaded, tuple):
        return TaskResult(
            answers=(Answer(_generated(loaded(images=need_image(inputs), text=need_text(inputs)))),)
        )
    proc, model = loaded
    enc = proc(images=need_image(inputs), text=need_text(inputs), return_tensors="pt")
    if model.can_generate():  # BLIP writes its answer
        return TaskResult(answers=(Answer(_generate(proc, model, enc)),))
    with torch.inference_mode():  # ViLT picks one of its answer labels
        logits = model(**_on(model, enc)).logits
    labels = _softmax_top(logits, model.config.id2label)
    return TaskResult(answers=tuple(Answer(x.label, x.score) for x in labels))


TF = "transformers"

TRANSFORMERS_ADAPTERS: dict[str, Adapter] = {
    "text-classification": Adapter(TF, _pipeline("text-classification"), _run_text_cls),
    "token-classification": Adapter(TF, _pipeline("token-classification"), _run_token_cls),
    "text2text-generation": Adapter(TF, _load_seq2seq, _seq2seq_runner("text2text-generation")),
    "summarization": Adapter(TF, _load_seq2seq, _seq2seq_runner("summarization")),
    "translation": Adapter(TF, _load_seq2seq, _seq2seq_runner("translation")),
    "question-answering": Adapter(TF, _load_auto("AutoModelForQuestionAnswering"), _run_qa),
    "conversational": Adapter(TF, _load_seq2seq, _seq2seq_runner("conversational")),
    "text-generation": Adapter(TF, _pipeline("text-generation"), _run_text_gen),
    "image-to-text": Adapter(TF, _load_captioner, _run_image_to_text),
    "visual-question-answering": Adapter(TF, _load_vqa, _run_vqa),
    "document-question-answering": Adapter(TF, _load_doc_qa, _run_doc_qa),
    "image-classification": Adapter(TF, _pipeline("image-classification"), _run_image_cls),
    "object-detection": Adapter(TF, _pipeline("object-detection"), _run_detection),
    "image-segmentation": Adapter(TF, _pipeline("image-segmentation"), _run_segmentation),
    "video-classification": Adapter(TF, _pipeline("video-classification"), _run_video_cls),
    "text-to-speech": Adapter(TF, _load_tts, _run_tts),
    "audio-classification": Adapter(TF, _pipeline("audio-classification"), _run_audio_cls),
    "automatic-speech-recognition": Adapter(
        TF, _pipeline("automatic-speech-recognition"), _run_asr
    ),
}
