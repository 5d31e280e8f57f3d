"""The text generation tasks on tiny models, through LocalExpert.run as a user's
downloaded model would run.

The models are scripted (see ``tiny_models``): the decoder-only GPT-2 answers
" hello world" to a prompt ending in "?", "." or ":" and stops; the BART
encoder-decoder writes "hello" until the token limit.  So the tests can check
the exact text the backend hands on: the prompt and special tokens gone,
whitespace trimmed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.experts.local import LocalExpert
from core.experts.local_tasks import MAX_NEW_TOKENS
from core.results import TaskInputs
from tests.core.experts.local.inputs import model
from tests.said import raises_saying

pytestmark = pytest.mark.local


def _repeats(text: str, word: str) -> bool:
    """``text`` is ``word`` again and again until the backend's token limit (a
    forced first or last special token may take one place)."""
    words = text.split()
    return set(words) == {word} and MAX_NEW_TOKENS - 2 <= len(words) <= MAX_NEW_TOKENS


QUESTION = TaskInputs(text="what is the cat doing?")
ARTICLE = TaskInputs(text="the cat sat on the mat all day. it was a good day.")


async def test_text_generation_returns_only_the_continuation(
    expert: LocalExpert, chatty_gpt2: Path
) -> None:
    m = model("text-generation", chatty_gpt2)
    assert expert.can_run("text-generation", m)
    result = await expert.run("text-generation", m, QUESTION)
    assert result.text == "hello world"  # not the prompt, not <|endoftext|>
    assert result.as_text() == "hello world"


async def test_conversational_with_a_chat_template(expert: LocalExpert, chatty_gpt2: Path) -> None:
    """The tokenizer has a chat template: the message goes in as a user turn and
    only the assistant's reply comes back (not "user: …")."""
    m = model("conversational", chatty_gpt2)
    result = await expert.run("conversational", m, TaskInputs(text="hi, who are you?"))
    assert result.text == "hello world"


async def test_conversational_with_an_encoder_decoder(
    expert: LocalExpert, seq2seq_bart: Path
) -> None:
    """blenderbot and GODEL are encoder-decoders: the whole model generates (a
    text-generation pipeline would load only a random-headed decoder)."""
    m = model("conversational", seq2seq_bart)
    result = await expert.run("conversational", m, TaskInputs(text="hi, who are you?"))
    assert result.text is not None
    assert _repeats(result.text, "hello")


@pytest.mark.parametrize("task", ["summarization", "translation", "text2text-generation"])
async def test_seq2seq_tasks(expert: LocalExpert, seq2seq_bart: Path, task: str) -> None:
    m = model(task, seq2seq_bart)
    assert expert.can_run(task, m)
    result = await expert.run(task, m, ARTICLE)
    assert result.text is not None
    # Generation stops at the backend's limit; special tokens (<s>, </s>) dropped.
    assert _repeats(result.text, "hello")
    assert result.text == result.text.strip()


async def test_summarization_with_a_decoder_only_model(
    expert: LocalExpert, chatty_gpt2: Path
) -> None:
    """A decoder-only model picked for summarization is prompted with the text;
    its chat template is used as it would be for a chat model."""
    m = model("summarization", chatty_gpt2)
    result = await expert.run("summarization", m, ARTICLE)
    assert result.text == "hello world"


async def test_generation_needs_text(expert: LocalExpert, seq2seq_bart: Path) -> None:
    from core.errors import TaskFailed

    with raises_saying(TaskFailed, "needs a text") as info:
        await expert.run("summarization", model("summarization", seq2seq_bart), TaskInputs())
    assert not info.value.retryable
