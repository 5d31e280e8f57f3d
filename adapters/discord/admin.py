"""``/usage`` and ``/config``: what the bot used, and the server's own settings.

``/usage [since] [server]`` shows the caller's usage on this server, per
model; with ``server:true`` an admin sees the whole server's.  ``/config
show`` lists the settings this server set (anyone may look); ``/config set
KEY VALUE`` and ``/config unset KEY`` are for admins: Manage Server (or
Administrator), or a role in ``DISCORD_ADMIN_ROLES``.  The core checks keys
and values and says what it accepts; every answer is private.
"""

from __future__ import annotations

from discord import app_commands

from adapters.chat import reports
from adapters.chat.messages import error_text
from adapters.chat.render import ERROR_ICON
from adapters.discord.interactions import Inter, asked_by_admin, conversation_of, refuse, tell
from adapters.discord.surface import MARKUP
from core.errors import InputRejected

NOT_ADMIN = (
    "Only the server's admins can change its settings (Manage Server, or a role the bot's "
    "operator named in DISCORD_ADMIN_ROLES)."
)
# Offered as you type (the core checks every key; a task's pin is pinned_model.TASK).
KEYS = (
    "llm_model",
    "model_selection",
    "allowed_tasks",
    "language",
    "requests_per_user_per_minute",
    "requests_per_user_per_day",
    "llm_tokens_per_user_per_day",
    "requests_per_server_per_minute",
    "requests_per_server_per_day",
    "llm_tokens_per_server_per_day",
)
CHOICES_SHOWN = 25  # Discord's maximum for autocomplete


@app_commands.command(name="usage", description="What your requests used here (admins: all)")
@app_commands.describe(
    since="How far back: 7d, 12h, 30m or a date such as 2026-05-01 (default: all)",
    server="The whole server's usage (admins only)",
)
async def usage(
    interaction: Inter,
    since: app_commands.Range[str, 1, 40] | None = None,
    server: bool = False,
) -> None:
    await interaction.response.defer(ephemeral=True, thinking=True)
    try:
        report = await interaction.client.agent.usage(
            conversation_of(interaction),
            str(interaction.user.id),
            server_wide=server,
            is_admin=asked_by_admin(interaction),
            since=since,
        )
    except InputRejected as exc:
        await tell(interaction, f"{ERROR_ICON} {error_text(exc)}")
        return
    await tell(interaction, reports.usage(report, MARKUP))


config = app_commands.Group(
    name="config", description="This server's own settings for me", guild_only=True
)


async def _key_autocomplete(interaction: Inter, current: str) -> list[app_commands.Choice[str]]:
    tasks = sorted(interaction.client.agent.models())
    keys = [*KEYS, *(f"pinned_model.{t}" for t in tasks)]
    wanted = current.lower().strip()
    return [app_commands.Choice(name=k, value=k) for k in keys if wanted in k][:CHOICES_SHOWN]


@config.command(name="show", description="The settings this server set (the rest are the bot's)")
async def config_show(interaction: Inter) -> None:
    await interaction.response.defer(ephemeral=True, thinking=True)
    values = await interaction.client.agent.settings(conversation_of(interaction))
    await tell(interaction, reports.settings(values, MARKUP))


@config.command(name="set", description="Set one of this server's settings (admins)")
@app_commands.describe(
    key="e.g. language, llm_model, pinned_model.text-to-image", value="Its value"
)
@app_commands.autocomplete(key=_key_autocomplete)
async def config_set(
    interaction: Inter,
    key: app_commands.Range[str, 1, 100],
    value: app_commands.Range[str, 1, 1000],
) -> None:
    await _configure(interaction, key, value)


@config.command(name="unset", description="Unset one of this server's settings (admins)")
@app_commands.describe(key="The setting to unset: it follows the bot's own again")
@app_commands.autocomplete(key=_key_autocomplete)
async def config_unset(interaction: Inter, key: app_commands.Range[str, 1, 100]) -> None:
    await _configure(interaction, key, None)


async def _configure(interaction: Inter, key: str, value: str | None) -> None:
    admin = asked_by_admin(interaction)
    if not admin:  # in memory: refused at once, privately
        await refuse(interaction, NOT_ADMIN)
        return
    await interaction.response.defer(ephemeral=True, thinking=True)
    try:
        values = await interaction.client.agent.configure(
            conversation_of(interaction),
            key,
            value,
            user_id=str(interaction.user.id),
            is_admin=admin,
        )
    except InputRejected as exc:
        await tell(interaction, f"{ERROR_ICON} {error_text(exc)}")
        return
    changed = f"{key} (unset)" if value is None else key
    await tell(interaction, reports.settings(values, MARKUP, changed=changed))
