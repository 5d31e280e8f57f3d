"""``/plan`` → **Run**: the plan is shown with its models and an estimate, and
nothing runs until the person who asked presses Run; then exactly that plan
runs (no new planning, no new choice of models), once — also when the button
is pressed on a new client after a restart."""

from __future__ import annotations

import copy
from pathlib import Path

from adapters.discord.buttons import ALREADY_RUN, NOT_YOURS_RUN, b36
from tests.adapters.discord.conftest import Harness, running_bot
from tests.adapters.discord.helpers import plan, step
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.discord_fake import APP_ID, CHANNEL_ID, USER_ID, FakeDiscord

EPHEMERAL = 64
FOX = plan(
    step(0, "text-to-image", text="a fox"),
    step(1, "image-to-text", [0], image="<resource>-0"),
)


async def planned(h: Harness) -> tuple[dict[str, object], str, str]:
    """A /plan of the fox; its payload, the plan message's id and its Run button."""
    h.env.llm.reply("plan", FOX)
    p = await h.interact(h.fake.interaction("plan", {"prompt": "draw a fox and describe it"}))
    message = h.fake.original(str(p["token"]))
    [run] = h.fake.buttons(message)
    return p, message, run


async def test_plan_shows_models_and_an_estimate_and_runs_nothing(harness: Harness) -> None:
    h, fake = harness, harness.fake
    p, message, run = await planned(h)
    assert fake.callbacks(p["id"])[0].json == {"type": 5}
    text = fake.messages[message]["content"]
    assert f"`0` **text-to-image** → `{model_a('text-to-image')}`" in text
    assert f"`1` **image-to-text** after 0 → `{model_a('image-to-text')}`" in text
    # the critical path: a drawing (~20 s, at most 300 s) then a caption (~3 s, at most 5 s)
    assert (
        "⏱️ About 23 s of model time (at most 5 min if every model runs to its time limit)"
        " · cost: not published by the provider"
    ) in text
    assert f"only <@{USER_ID}> can" in text
    assert run.startswith(f"hg:run:{b36(USER_ID)}:")
    assert h.env.hf.calls == [] and h.env.llm.calls("answer") == []  # nothing ran


async def test_run_by_someone_else_is_refused_and_runs_nothing(harness: Harness) -> None:
    h, fake = harness, harness.fake
    _, message, run = await planned(h)
    bob = fake.user(fake.next_id(), "bob")
    click = await h.click(message, run, user=bob)
    [cb] = fake.callbacks(click["id"])
    assert cb.json["type"] == 4 and cb.json["data"]["flags"] == EPHEMERAL
    assert cb.json["data"]["content"] == f"❌ {NOT_YOURS_RUN}"
    assert h.env.hf.calls == [] and h.env.llm.calls("answer") == []
    assert fake.buttons(message) == [run]  # still there for the person who asked


async def test_run_runs_exactly_that_plan_once_even_after_a_restart(
    discord_fake: FakeDiscord, agent_env: AgentEnv, tmp_path: Path
) -> None:
    fake = discord_fake
    async with running_bot(agent_env.agent) as bot:
        _, message, run = await planned(Harness(fake, bot, agent_env))
    shown = copy.deepcopy(fake.messages[message])  # as a client shows it, button and all
    planning_calls = len(agent_env.llm.calls())  # the plan, and the choice of models

    async with (
        open_agent_env(tmp_path, agent_env.llm, agent_env.hf) as env,
        running_bot(env.agent) as bot,
    ):
        h = Harness(fake, bot, env)
        env.llm.reply("answer", "A fox, and what it looks like.")
        click = await h.click(message, run)
        assert [c.json for c in fake.callbacks(click["id"])] == [{"type": 5}]

        # the plan ran as shown: both tasks, on the models shown, no new plan or choice
        assert len(env.hf.calls_for(model_a("text-to-image"))) == 1
        assert len(env.hf.calls_for(model_a("image-to-text"))) == 1
        assert len(env.llm.calls()) == planning_calls + 1  # only the answer
        final = fake.edits(click["token"])[-1].content or ""
        assert final.startswith("✅ **Done")
        assert f"✅ 1. image-to-text · `{model_a('image-to-text')}`" in final
        [answer] = fake.followups(click["token"])
        assert answer.content == "A fox, and what it looks like."
        assert [f.filename for f in answer.files] == ["image.png"]

        # the Run button is gone from the plan, and a second press is refused
        removed = fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/{message}$")
        assert removed and removed[-1].json["components"] == []
        again = fake.click(shown, run)  # a client that still shows the button
        await h.interact(again)
        [cb] = fake.callbacks(again["id"])
        assert cb.json["data"]["content"] == f"❌ {ALREADY_RUN}"
        assert len(env.hf.calls_for(model_a("text-to-image"))) == 1
        assert fake.find("POST", rf"^/webhooks/{APP_ID}/{again['token']}$") == []
