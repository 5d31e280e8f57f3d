"""The buttons: **Run again**, **Details** and **Delete** under every answer,
**Run** under a ``/plan``.

They are persistent: each is a :class:`discord.ui.DynamicItem` whose
``custom_id`` carries all it needs (the request id; for Delete, who asked
and which other messages are the answer's; for Run, who asked), registered
once per client (:func:`register`), so a click on a message an earlier
process posted works after a restart.  What a request was and ran is read
back from the store (``AgentAPI.recall``).

* **Run again** runs the same plan again, each task on its next candidate
  model (the ranking ``/models`` shows), as a new request of whoever clicked.
* **Details** (private): the plan, the models, the timings, the usage.
* **Delete**: the answer's messages and its status message; only the person
  who asked or a member who can manage messages.
* **Run**: the plan ``/plan`` showed, exactly (no new planning), once, and
  only by the person who asked for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import discord
from discord.ui import Button, DynamicItem, Item, View

from adapters.chat import reports
from adapters.chat.render import CANNOT_TAKE
from adapters.discord.interactions import (
    Inter,
    access_refusal,
    asked_by_admin,
    conversation_of,
    defer_and_process,
    ours,
    refuse,
    tell,
)
from adapters.discord.jobs import KIND as JOB_KIND
from adapters.discord.jobs import interaction_payload
from adapters.discord.surface import MARKUP, RENDERER
from core.types import AgentAPI, new_request_id

if TYPE_CHECKING:
    from core.types import PastRequest, PlannedStep

log = logging.getLogger(__name__)

_RID = r"[0-9A-Za-z_-]{1,64}"
_ID36 = r"[0-9a-z]{1,13}"
CUSTOM_ID_MAX = 100  # Discord's limit
Match = re.Match[str]

GONE = "I no longer have that request (it was forgotten, or is too old), so I can't {what}."
NOT_YOURS_DELETE = (
    "Only the person who asked, or someone who can manage messages here, can delete this answer."
)
NOT_YOURS_RUN = "Only the person who asked for this plan can run it."
ALREADY_RUN = "This plan was run already."


def b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def _button(label: str, emoji: str, custom_id: str, style: discord.ButtonStyle) -> Button[View]:
    return Button(label=label, emoji=emoji, custom_id=custom_id, style=style)


# -- the items ---------------------------------------------------------------


class _Handled:
    """What the four buttons share: discord.py calls ``interaction_check`` and
    ``callback`` with any client's interaction (its signature); ours is
    narrowed to ``Interaction[DiscordBot]`` once, here, for ``check`` and
    ``handle``.  A failure is logged and told privately (:func:`_guarded`)."""

    what = "a"

    async def check(self, interaction: Inter) -> bool:
        return await _allowed(interaction)

    async def handle(self, interaction: Inter) -> None:
        raise NotImplementedError

    async def interaction_check(self, interaction: discord.Interaction[discord.Client], /) -> bool:
        return ours(interaction) and await self.check(interaction)

    async def callback(self, interaction: discord.Interaction[discord.Client]) -> None:
        if ours(interaction):
            await _guarded(interaction, self.what, self.handle(interaction))


class RunAgain(_Handled, DynamicItem[Button[View]], template=rf"hg:again:(?P<rid>{_RID})"):
    what = "run again"

    def __init__(self, request_id: str) -> None:
        custom_id = f"hg:again:{request_id}"
        super().__init__(_button("Run again", "🔁", custom_id, discord.ButtonStyle.secondary))
        self.request_id = request_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[discord.Client], item: Item[Any], m: Match, /
    ) -> RunAgain:
        return cls(m["rid"])

    async def handle(self, interaction: Inter) -> None:
        await run_again(interaction, self.request_id)


class Details(_Handled, DynamicItem[Button[View]], template=rf"hg:details:(?P<rid>{_RID})"):
    what = "details"

    def __init__(self, request_id: str) -> None:
        custom_id = f"hg:details:{request_id}"
        super().__init__(_button("Details", "🔎", custom_id, discord.ButtonStyle.secondary))
        self.request_id = request_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[discord.Client], item: Item[Any], m: Match, /
    ) -> Details:
        return cls(m["rid"])

    async def handle(self, interaction: Inter) -> None:
        await show_details(interaction, self.request_id)


class Delete(
    _Handled,
    DynamicItem[Button[View]],
    template=rf"hg:delete:(?P<user>{_ID36}):(?P<ids>[0-9a-z.]*)",
):
    what = "delete"

    def __init__(self, user_id: int, others: Sequence[int] = ()) -> None:
        custom_id = f"hg:delete:{b36(user_id)}:"
        kept: list[str] = []
        for message_id in others:  # as many as the custom id holds (the status first)
            more = b36(message_id)
            if len(custom_id) + len(".".join([*kept, more])) > CUSTOM_ID_MAX:
                log.info("delete button: %d messages left out of it", len(others) - len(kept))
                break
            kept.append(more)
        custom_id += ".".join(kept)
        super().__init__(_button("Delete", "🗑️", custom_id, discord.ButtonStyle.danger))
        self.user_id = user_id
        self.others = tuple(int(x, 36) for x in kept)

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[discord.Client], item: Item[Any], m: Match, /
    ) -> Delete:
        return cls(int(m["user"], 36), [int(x, 36) for x in m["ids"].split(".") if x])

    async def check(self, interaction: Inter) -> bool:
        return True  # whoever may delete may do so where the bot is no longer allowed

    async def handle(self, interaction: Inter) -> None:
        await delete(interaction, self.user_id, self.others)


class RunPlan(
    _Handled, DynamicItem[Button[View]], template=rf"hg:run:(?P<user>{_ID36}):(?P<rid>{_RID})"
):
    what = "run the plan"

    def __init__(self, user_id: int, request_id: str) -> None:
        custom_id = f"hg:run:{b36(user_id)}:{request_id}"
        super().__init__(_button("Run", "▶️", custom_id, discord.ButtonStyle.primary))
        self.user_id = user_id
        self.request_id = request_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[discord.Client], item: Item[Any], m: Match, /
    ) -> RunPlan:
        return cls(int(m["user"], 36), m["rid"])

    async def handle(self, interaction: Inter) -> None:
        await run_plan(interaction, self.user_id, self.request_id)


ITEMS = (RunAgain, Details, Delete, RunPlan)


def register(client: discord.Client) -> None:
    """Handle these buttons on any message, whichever process posted it."""
    client.add_dynamic_items(*ITEMS)


def answer_view(request_id: str, user_id: int, others: Sequence[int]) -> View:
    """The buttons under an answer (``others``: its other messages, to delete too)."""
    view = View(timeout=None)
    view.add_item(RunAgain(request_id))
    view.add_item(Details(request_id))
    view.add_item(Delete(user_id, others))
    return view


def plan_view(user_id: int, request_id: str) -> View:
    view = View(timeout=None)
    view.add_item(RunPlan(user_id, request_id))
    return view


# -- what they do -------------------------------------------------------------


async def _allowed(interaction: Inter) -> bool:
    """The access lists hold for buttons as for commands."""
    reason = access_refusal(interaction)
    if reason is None:
        return True
    await refuse(interaction, reason)
    return False


async def _guarded(interaction: Inter, what: str, work: Awaitable[None]) -> None:
    """The one catch-all for a button: log with the request id, tell privately."""
    try:
        await work
    except Exception:
        rid = interaction.extras.setdefault("request_id", new_request_id())
        log.exception("discord request %s: the %s button failed", rid, what)
        try:
            await refuse(interaction, RENDERER.sorry(rid))
        except discord.HTTPException:
            log.warning("discord request %s: could not report the error", rid, exc_info=True)


async def _recall(interaction: Inter, request_id: str) -> PastRequest | None:
    """The past request, if the store still has it and it was asked here."""
    past = await interaction.client.agent.recall(request_id)
    if past is None or past.conversation != conversation_of(interaction):
        return None
    return past


def next_models(agent: AgentAPI, steps: Sequence[PlannedStep]) -> tuple[PlannedStep, ...]:
    """Each step on the candidate after the one it ran on (the ranking
    ``/models`` shows, wrapping round); a task with one candidate keeps it."""
    out = []
    for step in steps:
        ranked = [c.id for c in agent.models(step.task).get(step.task, ())]
        model = step.model
        if step.model in ranked:
            model = ranked[(ranked.index(step.model) + 1) % len(ranked)]
        elif ranked:
            model = ranked[0]
        out.append(replace(step, model=model, reason="run again on the next candidate"))
    return tuple(out)


async def run_again(interaction: Inter, request_id: str) -> None:
    await _run_approved(interaction, request_id, again=True)


async def show_details(interaction: Inter, request_id: str) -> None:
    await interaction.response.defer(ephemeral=True, thinking=True)
    past = await _recall(interaction, request_id)
    if past is None:
        await tell(interaction, GONE.format(what="show its details"))
        return
    await tell(interaction, reports.details(past, MARKUP))


async def delete(interaction: Inter, user_id: int, others: Sequence[int]) -> None:
    allowed = interaction.user.id == user_id or (
        interaction.guild_id is not None and interaction.permissions.manage_messages
    )
    if not allowed:
        await refuse(interaction, NOT_YOURS_DELETE)
        return
    await interaction.response.defer()  # acknowledged; the messages go next
    channel = interaction.client.get_partial_messageable(interaction.channel_id or 0)
    here = [interaction.message.id] if interaction.message is not None else []
    failed = 0
    for message_id in [*here, *others]:
        try:
            await channel.get_partial_message(message_id).delete()
        except discord.NotFound:
            pass  # gone already
        except discord.HTTPException as exc:
            failed += 1
            log.warning("could not delete message %s: %s", message_id, exc)
    log.info("user %s deleted an answer (%d messages)", interaction.user.id, 1 + len(others))
    if failed:
        await tell(interaction, f"I could not delete {failed} of the answer's messages.")


async def run_plan(interaction: Inter, user_id: int, request_id: str) -> None:
    if interaction.user.id != user_id:
        await refuse(interaction, NOT_YOURS_RUN)
        return
    await _run_approved(interaction, request_id, again=False)


async def _run_approved(interaction: Inter, request_id: str, *, again: bool) -> None:
    """Run a past request's plan as a new request of this person: the plan as
    ``/plan`` showed it (once per plan), or ``again`` on the next models.
    Recorded as a job before the defer, like ``/ask``, within Discord's 3 s."""
    agent = interaction.client.agent
    rid = interaction.extras.setdefault("request_id", new_request_id())
    dedup = f"discord:interaction:{interaction.id}" if again else f"discord:plan:{request_id}"
    try:
        async with asyncio.timeout(interaction.client.config.accept_within):
            past = await _recall(interaction, request_id)
            if past is not None:
                steps = next_models(agent, past.steps) if again else past.steps
                payload = interaction_payload(
                    interaction, past.text, [], is_admin=asked_by_admin(interaction), plan=steps
                )
                key = conversation_of(interaction)
                accepted = await agent.accept(JOB_KIND, key, payload, request_id=rid, dedup=dedup)
    except Exception:
        log.exception("discord request %s: could not be recorded", rid)
        await refuse(interaction, CANNOT_TAKE)
        return
    if past is None:
        what = "run it again" if again else "run that plan"
        await refuse(interaction, GONE.format(what=what) + ("" if again else " Ask /plan again."))
        return
    if not accepted.fresh:
        await refuse(interaction, ALREADY_RUN)
        return
    log.info(
        "discord request %s: the plan of %s, %s", rid, request_id, "again" if again else "approved"
    )
    removing = None
    if not again and interaction.message is not None:  # the Run button has done its work
        removing = asyncio.ensure_future(_remove_run_button(interaction, interaction.message.id))
    try:  # the turn starts while the defer and the removal are in flight
        await defer_and_process(interaction, accepted, f"discord request {rid}")
    finally:
        if removing is not None:
            await removing


async def _remove_run_button(interaction: Inter, message_id: int) -> None:
    channel = interaction.client.get_partial_messageable(interaction.channel_id or 0)
    try:
        await channel.get_partial_message(message_id).edit(view=None)
    except discord.HTTPException as exc:
        log.info("could not remove the Run button: %s", exc)
