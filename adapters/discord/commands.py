"""Slash commands: /ask, /plan, /models, /forget, /help (and /usage, /config
from :mod:`adapters.discord.admin`).

Every command that may be slow defers *first* (nothing but in-memory checks
before it), so Discord's 3-second deadline is never at risk; ``/ask`` records
the request as a durable job (one insert, given at most ``DiscordConfig.accept_within``
seconds) just before, so no deferred request is lost to a restart, and its
turn starts while the defer is in flight (nothing is posted to the
interaction before the defer is done: :func:`~adapters.discord.interactions.defer_and_process`).
Access and declared attachment sizes are checked before the defer because
they cost microseconds and let a refusal be ephemeral straight away.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands

from adapters.chat import reports
from adapters.chat.render import CANNOT_TAKE, ERROR_ICON
from adapters.chat.text import split_text
from adapters.discord import admin
from adapters.discord.buttons import plan_view
from adapters.discord.incoming import check_attachments
from adapters.discord.interactions import (
    Inter,
    access_refusal,
    asked_by_admin,
    conversation_of,
    defer_and_process,
    refuse,
    send_chunks,
)
from adapters.discord.jobs import KIND as JOB_KIND
from adapters.discord.jobs import interaction_payload
from adapters.discord.surface import MESSAGE_LIMIT, RENDERER
from core.types import Request, new_request_id

if TYPE_CHECKING:
    from adapters.discord.client import DiscordBot

log = logging.getLogger(__name__)

HELP = """**How to use me**
`/ask prompt [file1..3]` — I plan AI tasks, pick Hugging Face models, run them and answer (with any files they make).
`/plan prompt` — show the tasks and models I would use, without running them, with an estimate and a **Run** button.
`/models [task]` — candidate models, for one task or all.
`/forget` — clear this channel's conversation (your own messages; the whole channel if you can manage messages).
`/usage [since] [server]` — what your requests (or, for admins, the server's) used. `/config` — the server's own settings (admins).
Under each answer: 🔁 **Run again** on other models, 🔎 **Details**, 🗑️ **Delete**.
You can also mention me with a message and attachments, or DM me. Each thread is its own conversation and can use the files of its channel."""

MODEL_CHOICES_SHOWN = 25  # Discord's maximum for autocomplete


def _request(interaction: Inter, text: str) -> Request:
    user = interaction.user
    return Request(
        conversation=conversation_of(interaction),
        user_id=str(user.id),
        text=text,
        request_id=interaction.extras.setdefault("request_id", new_request_id()),
        user_name=user.display_name,
        is_admin=asked_by_admin(interaction),
    )


@app_commands.command(name="ask", description="Ask me: I plan AI tasks, run models and answer")
@app_commands.describe(
    prompt="What you want", file1="A file to use", file2="Another file", file3="Another file"
)
async def ask(
    interaction: Inter,
    prompt: app_commands.Range[str, 1, 4000],
    file1: discord.Attachment | None = None,
    file2: discord.Attachment | None = None,
    file3: discord.Attachment | None = None,
) -> None:
    bot = interaction.client
    files = [f for f in (file1, file2, file3) if f is not None]
    refusal = check_attachments(files, bot.config)
    if refusal:
        await refuse(interaction, refusal)
        return
    # Recorded (one insert, bounded) before Discord is told we have it; the
    # files stay on the CDN until the job runs.
    rid = interaction.extras.setdefault("request_id", new_request_id())
    payload = interaction_payload(interaction, prompt, files, is_admin=asked_by_admin(interaction))
    try:
        accepted = await asyncio.wait_for(
            bot.agent.accept(
                JOB_KIND,
                conversation_of(interaction),
                payload,
                request_id=rid,
                dedup=f"discord:interaction:{interaction.id}",
                upload_bytes=sum(f.size for f in files),
            ),
            bot.config.accept_within,
        )
    except Exception:
        log.exception("discord request %s: could not be recorded", rid)
        await refuse(interaction, CANNOT_TAKE)
        return
    await defer_and_process(interaction, accepted, f"discord request {rid}")


@app_commands.command(
    name="plan", description="Show the tasks and models I would use, with an estimate, then Run"
)
@app_commands.describe(prompt="What you want")
async def plan(interaction: Inter, prompt: app_commands.Range[str, 1, 4000]) -> None:
    await interaction.response.defer(thinking=True)
    request = _request(interaction, prompt)
    preview = await interaction.client.agent.plan_only(request)
    if preview.error:
        await send_chunks(interaction, RENDERER.plan(preview))
        return
    text = (
        f"{RENDERER.plan(preview)}\n{reports.estimate(preview.steps)}\n"
        f"Press **Run** to run exactly this plan (only {interaction.user.mention} can)."
    )
    await send_chunks(interaction, text, plan_view(interaction.user.id, request.request_id))


async def _task_autocomplete(interaction: Inter, current: str) -> list[app_commands.Choice[str]]:
    names = sorted(interaction.client.agent.models())
    wanted = current.lower().replace(" ", "-")
    return [app_commands.Choice(name=n, value=n) for n in names if wanted in n][
        :MODEL_CHOICES_SHOWN
    ]


@app_commands.command(name="models", description="List candidate models, for one task or all")
@app_commands.describe(task="A task such as text-to-image (leave empty for all)")
@app_commands.autocomplete(task=_task_autocomplete)
async def models(interaction: Inter, task: str | None = None) -> None:
    chunks = split_text(RENDERER.models(interaction.client.agent.models(task)), MESSAGE_LIMIT)
    await interaction.response.send_message(chunks[0], ephemeral=True)
    for chunk in chunks[1:]:
        await interaction.followup.send(chunk, ephemeral=True)


@app_commands.command(name="forget", description="Clear this channel's conversation with me")
async def forget(interaction: Inter) -> None:
    await interaction.response.defer(ephemeral=True, thinking=True)
    everyone = interaction.guild_id is None or interaction.permissions.manage_messages
    user_id = None if everyone else str(interaction.user.id)
    removed = await interaction.client.agent.forget(conversation_of(interaction), user_id)
    whose = "this conversation's" if everyone else "your"
    await interaction.followup.send(
        f"🧹 Forgot {removed} of {whose} message{'s' if removed != 1 else ''} here.",
        ephemeral=True,
    )


@app_commands.command(name="help", description="How to use me")
async def help_(interaction: Inter) -> None:
    await interaction.response.send_message(HELP, ephemeral=True)


COMMANDS: tuple[app_commands.Command[Any, ..., Any] | app_commands.Group, ...] = (
    ask,
    plan,
    models,
    forget,
    help_,
    admin.usage,
    admin.config,
)


class BotTree(app_commands.CommandTree["DiscordBot"]):
    """The command tree with the access lists and the one catch-all for errors."""

    async def interaction_check(self, interaction: Inter, /) -> bool:
        reason = access_refusal(interaction)
        if reason is None:
            return True
        if interaction.type is discord.InteractionType.application_command:
            await interaction.response.send_message(f"{ERROR_ICON} {reason}", ephemeral=True)
        return False

    async def on_error(self, interaction: Inter, error: app_commands.AppCommandError, /) -> None:
        rid = interaction.extras.setdefault("request_id", new_request_id())
        cause = getattr(error, "original", error)
        command = interaction.command.name if interaction.command else "?"
        log.error(
            "discord request %s: /%s failed",
            rid,
            command,
            exc_info=(type(cause), cause, cause.__traceback__),
        )
        if interaction.type is not discord.InteractionType.application_command:
            return
        try:
            await refuse(interaction, RENDERER.sorry(rid))
        except discord.HTTPException:
            log.warning("discord request %s: could not report the error", rid, exc_info=True)


def install(tree: app_commands.CommandTree[DiscordBot]) -> None:
    for command in COMMANDS:
        tree.add_command(command)
