"""Local adapters that call transformers model classes directly.

transformers 5 dropped the summarization, translation, text2text,
image-to-text, question-answering and VQA pipelines, so these adapters do
what those pipelines did: tokenise, ``generate`` or pick the best span, and
decode.  Document QA and text-to-speech still run through a pipeline but
first read the model's config to refuse checkpoints that would need a
download (a vocoder) or a missing OCR engine.  Same contract as
:mod:`core.experts.local_tasks`, whose shared pieces this module uses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import TaskCode, TaskFailed
from core.experts.audio import encode_speech
from core.experts.local_tasks import (
    MAX_NEW_TOKENS,
    TF,
    Adapter,
    LoadContext,
    generated_text,
    need_image,
    need_text,
    on_device,
    pipeline_loader,
    run_chat,
    softmax_top,
)
from core.results import Answer, Blob, TaskInputs, TaskResult


def _config(path: Path) -> Any:
    from transformers import AutoConfig
    from transformers.utils import logging as tf_logging

    tf_logging.disable_progress_bar()  # the loaders below print no bars either
    return AutoConfig.from_pretrained(path, local_files_only=True)


def _generate(tok: Any, model: Any, batch: Any) -> str:
    """What ``model`` generates from ``batch``, decoded by ``tok`` (a tokenizer or processor)."""
    import torch

    with torch.inference_mode():
        out = model.generate(**on_device(model, batch), max_new_tokens=MAX_NEW_TOKENS)
    return str(tok.decode(out[0], skip_special_tokens=True)).strip()


def _load_seq2seq(path: Path, ctx: LoadContext) -> Any:
    if not getattr(_config(path), "is_encoder_decoder", False):
        return pipeline_loader("text-generation")(path, ctx)  # a decoder-only model: prompt it
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=ctx.dtype(), local_files_only=True)
    return (tok, model.to(ctx.device).eval())


def _seq2seq_runner(task: str) -> Callable[[Any, TaskInputs], TaskResult]:
    def run(loaded: Any, inputs: TaskInputs) -> TaskResult:
        if not isinstance(loaded, tuple):
            return run_chat(loaded, inputs)
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
        return pipeline_loader("image-text-to-text")(path, ctx)
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
    return TaskResult(text=generated_text(raw))


def _load_doc_qa(path: Path, ctx: LoadContext) -> Any:
    """Donut reads the page itself; LayoutLM models need words and boxes from
    Tesseract OCR, which the pipeline runs only when pytesseract is installed."""
    from transformers.utils import is_pytesseract_available

    if _config(path).model_type != "vision-encoder-decoder" and not is_pytesseract_available():
        raise TaskFailed(TaskCode.NEEDS_TESSERACT)
    return pipeline_loader("document-question-answering")(path, ctx)


def _run_doc_qa(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(image=need_image(inputs), question=need_text(inputs), top_k=1)
    raw = raw if isinstance(raw, list) else [raw]
    # Donut answers None when its output lacks <s_answer>…</s_answer>, and has no score.
    found = [d for d in raw if d.get("answer")]
    if not found:
        raise TaskFailed(TaskCode.NO_ANSWER_FOUND)
    return TaskResult(
        answers=tuple(
            Answer(str(d["answer"]).strip(), None if d.get("score") is None else float(d["score"]))
            for d in found
        )
    )


def _load_tts(path: Path, ctx: LoadContext) -> Any:
    if _config(path).model_type == "speecht5":  # the pipeline would fetch a vocoder from the Hub
        raise TaskFailed(TaskCode.SPEECHT5_UNSUPPORTED)
    return pipeline_loader("text-to-audio")(path, ctx)


def _run_tts(pipe: Any, inputs: TaskInputs) -> TaskResult:
    out = pipe(need_text(inputs))
    data, mime = encode_speech(np.asarray(out["audio"]), int(out["sampling_rate"]))
    return TaskResult(media=(Blob(kind="audio", mime=mime, data=data),))


def _run_qa(loaded: Any, inputs: TaskInputs) -> TaskResult:
    """Extractive QA: the best span inside the context ("question\\ncontext")."""
    import torch

    tok, model = loaded
    question, _, context = need_text(inputs).partition("\n")
    if not context.strip():
        raise TaskFailed(TaskCode.QA_NEEDS_LINES, retryable=False)
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
    return pipeline_loader("image-text-to-text")(path, ctx)


def _run_vqa(loaded: Any, inputs: TaskInputs) -> TaskResult:
    import torch

    if not isinstance(loaded, tuple):
        return TaskResult(
            answers=(
                Answer(generated_text(loaded(images=need_image(inputs), text=need_text(inputs)))),
            )
        )
    proc, model = loaded
    enc = proc(images=need_image(inputs), text=need_text(inputs), return_tensors="pt")
    if model.can_generate():  # BLIP writes its answer
        return TaskResult(answers=(Answer(_generate(proc, model, enc)),))
    with torch.inference_mode():  # ViLT picks one of its answer labels
        logits = model(**on_device(model, enc)).logits
    labels = softmax_top(logits, model.config.id2label)
    return TaskResult(answers=tuple(Answer(x.label, x.score) for x in labels))


DIRECT_ADAPTERS: dict[str, Adapter] = {
    "text2text-generation": Adapter(TF, _load_seq2seq, _seq2seq_runner("text2text-generation")),
    "summarization": Adapter(TF, _load_seq2seq, _seq2seq_runner("summarization")),
    "translation": Adapter(TF, _load_seq2seq, _seq2seq_runner("translation")),
    "question-answering": Adapter(TF, _load_auto("AutoModelForQuestionAnswering"), _run_qa),
    "conversational": Adapter(TF, _load_seq2seq, _seq2seq_runner("conversational")),
    "image-to-text": Adapter(TF, _load_captioner, _run_image_to_text),
    "visual-question-answering": Adapter(TF, _load_vqa, _run_vqa),
    "document-question-answering": Adapter(TF, _load_doc_qa, _run_doc_qa),
    "text-to-speech": Adapter(TF, _load_tts, _run_tts),
}
