"""Tiny, randomly initialised models saved the way a real checkpoint is.

Each builder writes a directory that ``save_pretrained`` produced (configs,
weights, tokenizer or processor files), so the local backend loads it exactly
as it loads a model downloaded from the Hub.  Nothing is downloaded: every
config is written here, tokenizers are built from hand-written vocabularies.
Sizes follow the smallest configs of transformers' and diffusers' own tests.

Where a random model would give no usable output (a detector whose scores
stay below the pipeline's threshold, a tagger that says "O" everywhere) one
output bias is raised so the pipeline's post-processing has something to
return.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

WORDS = ["hello", "world", "my", "name", "is", "sarah", "and", "i", "live", "in", "london"]
WORDS += ["what", "where", "does", "a", "cat", "dog", "the", "good", "bad", "movie", "?", ".", ","]
BERT_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

torch.manual_seed(0)


def _bert_tokenizer(path: Path):  # type: ignore[no-untyped-def]
    from transformers import BertTokenizer

    vocab = BERT_SPECIAL + WORDS
    vocab_file = path / "vocab.txt"
    path.mkdir(parents=True, exist_ok=True)
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer(vocab=str(vocab_file))
    # transformers 5: vocab_file= is silently ignored; vocab= must take.
    assert len(tok) == len(vocab), (len(tok), len(vocab))
    return tok


def _bert_config(**kw: object):  # type: ignore[no-untyped-def]
    from transformers import BertConfig

    return BertConfig(
        vocab_size=len(BERT_SPECIAL) + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
        **kw,
    )


def text_classifier(path: Path) -> Path:
    from transformers import BertForSequenceClassification

    tok = _bert_tokenizer(path)
    labels = {0: "NEGATIVE", 1: "POSITIVE"}
    cfg = _bert_config(id2label=labels, label2id={v: k for k, v in labels.items()})
    BertForSequenceClassification(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def token_classifier(path: Path) -> Path:
    from transformers import BertForTokenClassification

    tok = _bert_tokenizer(path)
    labels = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
    model = BertForTokenClassification(
        _bert_config(id2label=labels, label2id={v: k for k, v in labels.items()})
    )
    with torch.no_grad():
        model.classifier.bias[1] = 20.0  # every word a person: entities to group
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def question_answerer(path: Path) -> Path:
    from transformers import BertForQuestionAnswering

    tok = _bert_tokenizer(path)
    BertForQuestionAnswering(_bert_config()).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def image_classifier(path: Path) -> Path:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessorPil

    labels = {0: "cat", 1: "dog", 2: "bird"}
    cfg = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    ViTForImageClassification(cfg).save_pretrained(path)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def object_detector(path: Path) -> Path:
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessorPil

    labels = {0: "cat", 1: "dog"}
    cfg = YolosConfig(
        image_size=[32, 32],
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        num_detection_tokens=4,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    model = YolosForObjectDetection(cfg)
    with torch.no_grad():  # "cat" far above the 0.5 threshold for every token
        model.class_labels_classifier.layers[-1].bias[0] = 20.0
    model.save_pretrained(path)
    YolosImageProcessorPil(
        size={"shortest_edge": 32, "longest_edge": 64}, do_pad=False
    ).save_pretrained(path)
    return path


def segmenter(path: Path) -> Path:
    from transformers import (
        SegformerConfig,
        SegformerForSemanticSegmentation,
        SegformerImageProcessorPil,
    )

    labels = {0: "sky", 1: "grass"}
    cfg = SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        decoder_hidden_size=16,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    SegformerForSemanticSegmentation(cfg).save_pretrained(path)
    SegformerImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def depth_estimator(path: Path) -> Path:
    """GLPN (a metric depth model: larger is farther) with transformers' test sizes
    halved; its processor floors each side to a multiple of 32."""
    from transformers import GLPNConfig, GLPNForDepthEstimation, GLPNImageProcessorPil

    torch.manual_seed(0)
    cfg = GLPNConfig(
        num_encoder_blocks=4,
        depths=[1, 1, 1, 1],
        sr_ratios=[8, 4, 2, 1],
        hidden_sizes=[8, 8, 16, 16],
        num_attention_heads=[1, 1, 2, 2],
        decoder_hidden_size=16,
    )
    GLPNForDepthEstimation(cfg).save_pretrained(path)
    GLPNImageProcessorPil().save_pretrained(path)
    return path


def video_classifier(path: Path) -> Path:
    from transformers import (
        VideoMAEConfig,
        VideoMAEForVideoClassification,
        VideoMAEImageProcessorPil,
    )

    labels = {0: "dancing", 1: "cooking", 2: "running"}
    cfg = VideoMAEConfig(
        image_size=32,
        patch_size=8,
        num_frames=4,
        tubelet_size=2,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    VideoMAEForVideoClassification(cfg).save_pretrained(path)
    VideoMAEImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(path)
    return path


def audio_classifier(path: Path) -> Path:
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForSequenceClassification,
    )

    labels = {0: "yes", 1: "no"}
    cfg = Wav2Vec2Config(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=20,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 8),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        classifier_proj_size=8,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    Wav2Vec2ForSequenceClassification(cfg).save_pretrained(path)
    Wav2Vec2FeatureExtractor(sampling_rate=16000).save_pretrained(path)
    return path


def speech_recognizer(path: Path) -> Path:
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
        Wav2Vec2Processor,
    )

    path.mkdir(parents=True, exist_ok=True)
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{c: i + 3 for i, c in enumerate("abcdefgh")}}
    (path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = Wav2Vec2CTCTokenizer(str(path / "vocab.json"))
    assert len(tok) >= len(vocab), (len(tok), len(vocab))
    cfg = Wav2Vec2Config(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=20,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 8),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        pad_token_id=0,
    )
    model = Wav2Vec2ForCTC(cfg)
    with torch.no_grad():  # say "a" everywhere, so the transcript is not empty
        model.lm_head.bias[3] = 20.0
    model.save_pretrained(path)
    Wav2Vec2Processor(
        feature_extractor=Wav2Vec2FeatureExtractor(sampling_rate=16000), tokenizer=tok
    ).save_pretrained(path)
    return path


# --- diffusers --------------------------------------------------------------------


def _clip_tokenizer():  # type: ignore[no-untyped-def]
    from transformers import CLIPTokenizer

    special = ["<|startoftext|>", "<|endoftext|>"]
    letters = [c for c in "abcdefghijklmnopqrstuvwxyz"]
    vocab = {t: i for i, t in enumerate(special + letters + [c + "</w>" for c in letters])}
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=16)


def _clip_text_encoder(hidden: int):  # type: ignore[no-untyped-def]
    from transformers import CLIPTextConfig, CLIPTextModel

    return CLIPTextModel(
        CLIPTextConfig(
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
            hidden_size=hidden,
            intermediate_size=37,
            layer_norm_eps=1e-05,
            num_attention_heads=4,
            num_hidden_layers=2,
            vocab_size=54,
            max_position_embeddings=16,
        )
    )


def _vae():  # type: ignore[no-untyped-def]
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=[4, 8],
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
        up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"],
        latent_channels=4,
        norm_num_groups=2,
        sample_size=32,
    )


def _scheduler():  # type: ignore[no-untyped-def]
    from diffusers import DDIMScheduler

    return DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )


def stable_diffusion(path: Path) -> Path:
    """A StableDiffusionPipeline drawing 64×64 images (32×32 latents)."""
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(4, 8),
        layers_per_block=1,
        sample_size=32,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=2,
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        scheduler=_scheduler(),
        vae=_vae(),
        text_encoder=_clip_text_encoder(32),
        tokenizer=_clip_tokenizer(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(path)
    return path


def controlnet(path: Path) -> Path:
    """A bare ControlNet matching :func:`stable_diffusion`'s UNet, saved alone
    (as ``lllyasviel/sd-controlnet-canny`` is): it needs that base model."""
    from diffusers import ControlNetModel

    torch.manual_seed(0)
    ControlNetModel(
        block_out_channels=(4, 8),
        layers_per_block=1,
        in_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        cross_attention_dim=32,
        conditioning_embedding_out_channels=(4, 8),
        norm_num_groups=2,
    ).save_pretrained(path)
    return path


def text_to_video(path: Path) -> Path:
    """A TextToVideoSDPipeline making 32×32 frames (diffusers' test config)."""
    from diffusers import TextToVideoSDPipeline, UNet3DConditionModel

    torch.manual_seed(0)
    unet = UNet3DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=16,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
        up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
        cross_attention_dim=8,
        attention_head_dim=4,
        norm_num_groups=2,
    )
    pipe = TextToVideoSDPipeline(
        unet=unet,
        scheduler=_scheduler(),
        vae=_vae(),
        text_encoder=_clip_text_encoder(8),
        tokenizer=_clip_tokenizer(),
    )
    pipe.save_pretrained(path)
    index = json.loads((path / "model_index.json").read_text())
    assert index["_class_name"] == "TextToVideoSDPipeline", index
    return path


# --- generation: byte-level tokenizers and scripted decoders ----------------------
#
# A random decoder writes random bytes (or nothing but spaces and specials), so
# the generation models below are *scripted*: their output is fixed by a few
# weights set by hand, which lets the tests check the exact text the backend
# returns (prompt stripped, specials dropped, Donut's tags parsed).

GPT2_SPECIAL = ["<|endoftext|>"]  # GPT-2's bos, eos and unk at once
GEN_WORDS = ["Ġhello", "Ġworld"]  # whole words a decoder can emit (Ġ is a space)
DONUT_TAGS = ["<s_docvqa>", "<s_question>", "</s_question>", "<s_answer>", "</s_answer>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
# After any of these prompt endings the scripted GPT-2 says " hello world" and stops.
PROMPT_ENDS = ("?", ".", ":")


def _byte_vocab(special: list[str]) -> dict[str, int]:
    """Specials, the 256 byte symbols of byte-level BPE, then :data:`GEN_WORDS`.

    No merges: any text encodes byte by byte, and the whole words exist only
    to be generated (decoding needs no merges)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = special + list(bytes_to_unicode().values()) + GEN_WORDS
    return {t: i for i, t in enumerate(tokens)}


def _gpt2_tokenizer(extra_special: list[str] | None = None):  # type: ignore[no-untyped-def]
    from transformers import GPT2Tokenizer

    tok = GPT2Tokenizer(vocab=_byte_vocab(GPT2_SPECIAL), merges=[])
    if extra_special:
        tok.add_special_tokens({"pad_token": "<pad>", "additional_special_tokens": extra_special})
    return tok


def _gpt2_config(vocab_size: int, **kw: object):  # type: ignore[no-untyped-def]
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=vocab_size,
        n_positions=256,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
        **kw,
    )


def _script(model, steps: dict[int, int]) -> None:  # type: ignore[no-untyped-def]
    """Turn a GPT2LMHeadModel into a lookup table: after token ``a`` it says ``steps[a]``.

    Every block's output projection is zeroed, so the last hidden state is the
    layer-normed embedding of the current token alone; the head's row for
    ``b`` is then set to (a multiple of) that vector for each ``a → b``."""
    gpt = model.transformer
    with torch.no_grad():
        for block in gpt.h:
            parts = [block.attn, block.mlp, getattr(block, "crossattention", None)]
            for part in filter(None, parts):
                part.c_proj.weight.zero_()
                part.c_proj.bias.zero_()
        gpt.wpe.weight.zero_()
        gpt.ln_f.weight.fill_(1.0)
        gpt.ln_f.bias.zero_()
        normed = torch.nn.functional.layer_norm(gpt.wte.weight, (gpt.wte.weight.shape[1],))
        head = model.lm_head.weight
        for b in set(steps.values()):
            head[b] = 4 * sum(normed[a] for a, nxt in steps.items() if nxt == b)
        for a, b in steps.items():  # the script holds: each step wins by far
            assert int((head @ normed[a]).argmax()) == b, (a, b)


def _hello_world(vocab: dict[str, int], start: list[int]) -> dict[int, int]:
    """start → " hello" → " world" → end of text."""
    hello, world = vocab["Ġhello"], vocab["Ġworld"]
    return {**dict.fromkeys(start, hello), hello: world, world: vocab["<|endoftext|>"]}


def chatty_gpt2(path: Path) -> Path:
    """A decoder-only model with a chat template that answers " hello world"
    to any prompt ending in one of :data:`PROMPT_ENDS`."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    tok = _gpt2_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    vocab = tok.get_vocab()
    model = GPT2LMHeadModel(_gpt2_config(len(vocab)))
    _script(model, _hello_world(vocab, [vocab[c] for c in PROMPT_ENDS]))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def seq2seq_bart(path: Path) -> Path:
    """An encoder-decoder (BART, like bart-large-cnn or blenderbot) that writes
    " hello" over and over: its final logits bias favours that one token."""
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer

    torch.manual_seed(0)
    vocab = _byte_vocab(["<s>", "<pad>", "</s>", "<unk>"])
    vocab["<mask>"] = len(vocab)
    tok = BartTokenizer(vocab=vocab, merges=[])
    cfg = BartConfig(
        vocab_size=len(vocab),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_position_embeddings=256,
        # as t5-base has: the runner puts the prefix in front of the input
        task_specific_params={"translation_en_to_fr": {"prefix": "translate English to French: "}},
    )
    model = BartForConditionalGeneration(cfg)
    with torch.no_grad():
        model.final_logits_bias[0, vocab["Ġhello"]] = 50.0
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


# --- image + text ---------------------------------------------------------------------


def vit_gpt2_captioner(path: Path) -> Path:
    """A VisionEncoderDecoder like nlpconnect/vit-gpt2-image-captioning, with no
    processor file (as that checkpoint has), captioning every image " hello world"."""
    from transformers import (
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        ViTConfig,
        ViTImageProcessorPil,
    )

    torch.manual_seed(0)
    tok = _gpt2_tokenizer()
    vocab = tok.get_vocab()
    encoder = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
    )
    cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, _gpt2_config(len(vocab)))
    cfg.decoder_start_token_id = cfg.pad_token_id = cfg.eos_token_id = 0
    model = VisionEncoderDecoderModel(config=cfg)
    _script(model.decoder, _hello_world(vocab, [0]))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def donut(path: Path) -> Path:
    """A Donut-style document reader (DonutSwin encoder + a text decoder) whose
    decoder answers ``<s_answer> hello</s_answer>`` to any question."""
    from transformers import (
        DonutImageProcessorPil,
        DonutSwinConfig,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
    )

    torch.manual_seed(0)
    tok = _gpt2_tokenizer(DONUT_TAGS)
    vocab = tok.get_vocab()
    encoder = DonutSwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4
    )
    cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, _gpt2_config(len(vocab)))
    cfg.decoder_start_token_id = vocab["<s_docvqa>"]
    cfg.pad_token_id, cfg.eos_token_id = vocab["<pad>"], vocab["<|endoftext|>"]
    model = VisionEncoderDecoderModel(config=cfg)
    hello, close = vocab["Ġhello"], vocab["</s_answer>"]
    _script(model.decoder, {vocab["<s_answer>"]: hello, hello: close, close: cfg.eos_token_id})
    model.save_pretrained(path)
    tok.save_pretrained(path)
    DonutImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


VQA_WORDS = [*BERT_SPECIAL, "[DEC]", "what", "is", "the", "cat", "doing", "?", "a", "photo", "of"]
VQA_LABELS = {0: "yes", 1: "no", 2: "sleeping", 3: "running"}


def _vqa_tokenizer(path: Path, **kw: str):  # type: ignore[no-untyped-def]
    from transformers import BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(VQA_WORDS) + "\n", encoding="utf-8")
    tok = BertTokenizer(vocab=str(path / "vocab.txt"), **kw)
    assert len(tok) == len(VQA_WORDS), (len(tok), len(VQA_WORDS))
    return tok


def vilt_vqa(path: Path) -> Path:
    """A ViLT answer classifier like dandelin/vilt-b32-finetuned-vqa."""
    from transformers import (
        ViltConfig,
        ViltForQuestionAnswering,
        ViltImageProcessorPil,
        ViltProcessor,
    )

    torch.manual_seed(0)
    tok = _vqa_tokenizer(path)
    cfg = ViltConfig(
        vocab_size=len(VQA_WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        image_size=32,
        patch_size=8,
        max_position_embeddings=40,
        id2label=VQA_LABELS,
        label2id={v: k for k, v in VQA_LABELS.items()},
    )
    ViltForQuestionAnswering(cfg).save_pretrained(path)
    images = ViltImageProcessorPil(size={"shortest_edge": 32}, size_divisor=32)
    ViltProcessor(image_processor=images, tokenizer=tok).save_pretrained(path)
    return path


def blip(path: Path, architecture: str) -> Path:
    """A BLIP model (``BlipForQuestionAnswering`` like Salesforce/blip-vqa-base,
    ``BlipForConditionalGeneration`` like blip-image-captioning-base) whose
    text decoder says "cat" over and over (its output bias favours it)."""
    import transformers
    from transformers import (
        BlipConfig,
        BlipImageProcessorPil,
        BlipProcessor,
        BlipTextConfig,
        BlipVisionConfig,
    )

    torch.manual_seed(0)
    tok = _vqa_tokenizer(path, bos_token="[DEC]")
    ids = {t: i for i, t in enumerate(VQA_WORDS)}
    text = BlipTextConfig(
        vocab_size=len(VQA_WORDS),
        hidden_size=32,
        encoder_hidden_size=32,
        intermediate_size=37,
        projection_dim=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=256,
        bos_token_id=ids["[DEC]"],
        eos_token_id=ids["[SEP]"],
        sep_token_id=ids["[SEP]"],
        pad_token_id=ids["[PAD]"],
    )
    vision = BlipVisionConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        intermediate_size=37,
        projection_dim=32,
        num_hidden_layers=2,
        num_attention_heads=2,
    )
    cfg = BlipConfig(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        projection_dim=32,
        image_text_hidden_size=32,
    )
    model = getattr(transformers, architecture)(cfg)
    with torch.no_grad():
        model.text_decoder.cls.predictions.bias[ids["cat"]] = 30.0
    model.save_pretrained(path)
    images = BlipImageProcessorPil(size={"height": 32, "width": 32})
    BlipProcessor(image_processor=images, tokenizer=tok).save_pretrained(path)
    return path


# --- speech -------------------------------------------------------------------------


def vits(path: Path) -> Path:
    """A VITS text-to-speech model like facebook/mms-tts-eng: characters in, a
    waveform out, no phonemizer (``phonemize=False``, as the MMS models have)."""
    from transformers import VitsConfig, VitsModel, VitsTokenizer

    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    chars = ["<pad>", "<unk>", " ", *"abcdefghijklmnopqrstuvwxyz'"]
    (path / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(chars)}))
    tok = VitsTokenizer(str(path / "vocab.json"), phonemize=False, add_blank=True)
    cfg = VitsConfig(
        vocab_size=len(chars),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        ffn_dim=16,
        flow_size=16,
        spectrogram_bins=20,
        upsample_initial_channel=16,
        upsample_rates=[8, 2],
        upsample_kernel_sizes=[16, 4],
        resblock_kernel_sizes=[3, 5],
        resblock_dilation_sizes=[[1, 3], [1, 3]],
        duration_predictor_filter_channels=16,
        duration_predictor_num_flows=2,
        prior_encoder_num_flows=2,
        prior_encoder_num_wavenet_layers=2,
        posterior_encoder_num_wavenet_layers=2,
        depth_separable_num_layers=2,
        sampling_rate=16000,
    )
    VitsModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def config_only(path: Path, model_type: str) -> Path:
    """Just the config.json of a ``model_type`` model: enough for the checks a
    loader makes before it reads any weight."""
    from transformers import AutoConfig

    AutoConfig.for_model(model_type).save_pretrained(path)
    return path
