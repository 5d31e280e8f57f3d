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
