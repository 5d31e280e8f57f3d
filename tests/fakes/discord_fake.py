"""A loopback Discord REST server, so tests drive the real ``discord.py``.

``discord.http.Route.BASE`` is pointed at the fake (this also covers
webhooks, i.e. interaction follow-ups) for as long as the fake runs.  It
answers what a bot needs: login (``GET /users/@me``,
``GET /oauth2/applications/@me``), interaction callbacks (the
``?with_response=1`` shape), webhook follow-ups and edits, channel messages,
typing, and command syncs.  Every request is recorded as a
:class:`DiscordCall` with its JSON body and multipart files, and tests wait
for calls with :meth:`FakeDiscord.wait_for` (no sleeps).  :meth:`FakeDiscord.hold`
keeps a call unanswered until the test lets it go (a process "killed" with a
call in the air: the call never got through; with ``after=True`` Discord has
done the call and only its answer waits: the process dies before it learns
of it).

It also plays the gateway (``fake.gateway``, a
:class:`~tests.fakes.discord_gateway.FakeGateway`): ``GET /gateway/bot`` names
its websocket, so a bot started with ``start()`` (e.g. ``python -m bot run
discord`` with ``DISCORD_API_BASE``) connects, identifies and gets READY, and
:meth:`FakeDiscord.dispatch` sends it events such as INTERACTION_CREATE.

It keeps the messages the bot made (``fake.messages``, by id, as Discord
would return them, components included): an interaction's response keeps
one id however often it is edited, a channel message edited keeps its id, a
deleted one is gone (deleting it again answers 404 Unknown Message), and
:meth:`FakeDiscord.click` builds the INTERACTION_CREATE of a person pressing
a button on one of them.  As Discord documents: a message made by an
interaction's response or follow-up carries ``interaction_metadata`` (the
interaction's id, type and user; a follow-up also its
``original_response_message_id``); ``GET /channels/{id}/messages``
(``before`` / ``after`` / ``limit``, newest first) lists a channel's
messages, ephemeral ones not; and a channel message sent with a ``nonce``
and ``enforce_nonce`` (discord.py always sends both) returns the message the
same author made with that nonce within :attr:`FakeDiscord.nonce_window`
seconds ("a few minutes") instead of making another.

It also plays Discord's CDN: :meth:`FakeDiscord.attachment` stores bytes under
``/cdn/…`` and returns the attachment payload pointing there.  Payload
builders (:meth:`FakeDiscord.interaction`, :meth:`FakeDiscord.message`, …)
produce complete gateway payloads for ``parse_interaction_create`` and
``parse_message_create``.

Every JSON answer carries ``Content-Type: application/json`` exactly:
discord.py does not parse ``application/json; charset=utf-8``.

Use the ``discord_fake`` fixture, or ``async with make_discord_fake() as fake``
elsewhere (benchmarks).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import discord.http
import discord.utils
import pytest
from aiohttp import web

from tests.fakes.discord_gateway import PATH as GATEWAY_PATH
from tests.fakes.discord_gateway import FakeGateway
from tests.fakes.loopback import serve

APP_ID = 900000000000000001
BOT_ID = 900000000000000002
GUILD_ID = 700000000000000001
CHANNEL_ID = 710000000000000001
USER_ID = 720000000000000001
DEFAULT_LIMIT = 10 * 1024 * 1024
API = "/api/v10"


@dataclass
class FilePart:
    field: str
    filename: str
    content_type: str
    data: bytes


@dataclass
class DiscordCall:
    """One request the fake received (``at`` is ``time.monotonic()``)."""

    method: str
    path: str  # without the /api/v10 prefix
    query: dict[str, str]
    json: Any | None
    files: list[FilePart] = field(default_factory=list)
    at: float = 0.0
    answer: Any | None = None  # the JSON the fake answered with

    @property
    def message_id(self) -> str | None:
        return self.answer.get("id") if isinstance(self.answer, dict) else None

    @property
    def content(self) -> str | None:
        return (self.json or {}).get("content") if isinstance(self.json, dict) else None

    @property
    def flags(self) -> int:
        return int((self.json or {}).get("flags") or 0) if isinstance(self.json, dict) else 0


@dataclass
class _Hold:
    method: str
    pattern: re.Pattern[str]
    where: Callable[[DiscordCall], bool] | None
    times: int
    released: asyncio.Event
    after: bool = False  # the call is done; only its answer waits


@dataclass
class _Failure:
    method: str
    pattern: re.Pattern[str]
    status: int
    code: int
    times: int


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(payload).encode(), status=status, content_type="application/json"
    )


def _option_type(value: Any) -> int:
    """An application command option's type: BOOLEAN 5, INTEGER 4, else STRING 3."""
    if isinstance(value, bool):
        return 5
    return 4 if isinstance(value, int) else 3


def _now() -> str:
    return datetime.now(UTC).isoformat()


class FakeDiscord:
    """State, payload builders and assertions helpers; see the module docstring."""

    def __init__(self) -> None:
        self.base_url = ""
        self.calls: list[DiscordCall] = []
        self.cdn: dict[str, bytes] = {}
        self.cdn_requests: list[str] = []
        self._ids = itertools.count(1)
        self._cond = asyncio.Condition()
        self._failures: list[_Failure] = []
        self._holds: list[_Hold] = []
        self.held: list[DiscordCall] = []  # calls a hold keeps waiting now
        self._token_channels: dict[str, str] = {}
        self.messages: dict[str, dict[str, Any]] = {}  # what the bot posted, as it is now
        self._originals: dict[str, str] = {}  # interaction token -> its response's message id
        self._interactions: dict[str, dict[str, Any]] = {}  # token -> interaction_metadata
        # enforce_nonce: (author id, nonce) -> (message id, when it was made)
        self._nonces: dict[tuple[str, str], tuple[str, float]] = {}
        self.nonce_window = 180.0  # seconds a nonce is remembered ("a few minutes")
        self.bot_user = {
            "id": str(BOT_ID),
            "username": "hugginggpt",
            "discriminator": "0",
            "global_name": "HuggingGPT",
            "avatar": None,
            "bot": True,
            "verified": True,
            "flags": 0,
            "mfa_enabled": False,
        }
        self.gateway = FakeGateway(self, APP_ID)

    # -- test API --------------------------------------------------------

    def next_id(self) -> int:
        """A fresh snowflake dated now (discord.py derives expiry from it)."""
        return discord.utils.time_snowflake(datetime.now(UTC)) + next(self._ids) % (1 << 22)

    def find(self, method: str, pattern: str) -> list[DiscordCall]:
        """Calls with this method whose path matches ``pattern`` (a regex, searched)."""
        rx = re.compile(pattern)
        return [c for c in self.calls if c.method == method and rx.search(c.path)]

    async def wait_for(
        self, method: str, pattern: str, count: int = 1, within: float = 10.0
    ) -> list[DiscordCall]:
        """Wait until at least ``count`` matching calls arrived; return them all."""

        def enough() -> bool:
            return len(self.find(method, pattern)) >= count

        async with self._cond:
            await asyncio.wait_for(self._cond.wait_for(enough), within)
        return self.find(method, pattern)

    async def wait_until(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        async with self._cond:
            await asyncio.wait_for(self._cond.wait_for(predicate), within)

    async def dispatch(self, event: str, data: dict[str, Any]) -> int:
        """Send a gateway event (op 0) to the connected bot; its sequence number."""
        return await self.gateway.dispatch(event, data)

    def fail(self, method: str, pattern: str, status: int, code: int = 0, times: int = 1) -> None:
        """Answer the next ``times`` matching calls with a Discord error."""
        self._failures.append(_Failure(method, re.compile(pattern), status, code, times))

    def hold(
        self,
        method: str,
        pattern: str,
        where: Callable[[DiscordCall], bool] | None = None,
        times: int = 1,
        *,
        after: bool = False,
    ) -> asyncio.Event:
        """Leave the next ``times`` matching calls (``where`` their call, if
        given) unanswered and unrecorded until the returned event is set; a
        call whose caller has gone by then (a killed process) is dropped, as
        one that never got through.  ``after``: Discord does the call (it is
        recorded, its message made) and only the answer waits: a caller that
        dies meanwhile never learns of it.  ``fake.held`` has the calls waiting."""
        held = _Hold(method, re.compile(pattern), where, times, asyncio.Event(), after)
        self._holds.append(held)
        return held.released

    def callbacks(self, interaction_id: int | str) -> list[DiscordCall]:
        return self.find("POST", rf"^/interactions/{interaction_id}/[^/]+/callback$")

    def followups(self, token: str) -> list[DiscordCall]:
        return self.find("POST", rf"^/webhooks/{APP_ID}/{re.escape(token)}$")

    def original(self, token: str) -> str:
        """The id of the interaction's response message (made by its callback)."""
        return self._originals[token]

    def edits(self, token: str) -> list[DiscordCall]:
        return self.find("PATCH", rf"^/webhooks/{APP_ID}/{re.escape(token)}/messages/@original$")

    def _remember_interaction(
        self,
        token: str,
        interaction_id: int,
        kind: int,
        user: dict[str, Any],
        guild_id: int | None,
        clicked: str | None = None,
    ) -> None:
        """The ``interaction_metadata`` of the messages this interaction makes."""
        metadata: dict[str, Any] = {
            "id": str(interaction_id),
            "type": kind,
            "user": user,
            "authorizing_integration_owners": {"0": str(guild_id)}
            if guild_id
            else {"1": user["id"]},
        }
        if clicked is not None:
            metadata["interacted_message_id"] = clicked
        self._interactions[token] = metadata

    # -- payload builders ------------------------------------------------

    def user(self, user_id: int = USER_ID, name: str = "alice") -> dict[str, Any]:
        return {
            "id": str(user_id),
            "username": name,
            "discriminator": "0",
            "global_name": name.title(),
            "avatar": None,
            "public_flags": 0,
        }

    def member(
        self, user: dict[str, Any], roles: Iterable[int] = (), permissions: int = 0
    ) -> dict[str, Any]:
        return {
            "user": user,
            "roles": [str(r) for r in roles],
            "joined_at": _now(),
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "nick": None,
            "avatar": None,
            "premium_since": None,
            "communication_disabled_until": None,
            "permissions": str(permissions),
        }

    def text_channel(
        self, channel_id: int = CHANNEL_ID, guild_id: int = GUILD_ID
    ) -> dict[str, Any]:
        return {
            "id": str(channel_id),
            "type": 0,
            "guild_id": str(guild_id),
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }

    def thread(
        self, thread_id: int, parent_id: int = CHANNEL_ID, guild_id: int = GUILD_ID
    ) -> dict[str, Any]:
        return {
            "id": str(thread_id),
            "type": 11,
            "guild_id": str(guild_id),
            "parent_id": str(parent_id),
            "owner_id": str(USER_ID),
            "name": "a thread",
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now(),
                "locked": False,
            },
        }

    def dm_channel(self, channel_id: int, user: dict[str, Any]) -> dict[str, Any]:
        return {"id": str(channel_id), "type": 1, "recipients": [user], "last_message_id": None}

    def attachment(
        self,
        filename: str,
        data: bytes,
        content_type: str | None = None,
        *,
        declared_size: int | None = None,
        url: str | None = None,
    ) -> dict[str, Any]:
        """Serve ``data`` on the fake CDN; the payload Discord would send for it."""
        att_id = str(self.next_id())
        key = f"{att_id}/{filename}"
        self.cdn[key] = data
        link = url or f"{self.base_url}/cdn/{key}"
        payload: dict[str, Any] = {
            "id": att_id,
            "filename": filename,
            "size": len(data) if declared_size is None else declared_size,
            "url": link,
            "proxy_url": link,
        }
        if content_type:
            payload["content_type"] = content_type
        return payload

    def interaction(
        self,
        name: str,
        options: dict[str, Any] | None = None,
        *,
        attachments: dict[str, dict[str, Any]] | None = None,
        guild_id: int | None = GUILD_ID,
        channel: dict[str, Any] | None = None,
        user: dict[str, Any] | None = None,
        roles: Iterable[int] = (),
        permissions: int = 0,
        size_limit: int = DEFAULT_LIMIT,
        subcommand: str | None = None,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for slash command ``name`` (or its
        ``subcommand``).

        ``options`` are string, integer or boolean options (typed by their
        value); ``attachments`` maps option name to an :meth:`attachment`
        payload (type 11, resolved by id).
        """
        interaction_id = self.next_id()
        token = f"tok{interaction_id}"
        user = user or self.user()
        if channel is None:
            channel = self.text_channel() if guild_id else self.dm_channel(self.next_id(), user)
        self._token_channels[token] = channel["id"]
        self._remember_interaction(token, interaction_id, 2, user, guild_id)
        opts: list[dict[str, Any]] = [
            {"name": k, "type": _option_type(v), "value": v} for k, v in (options or {}).items()
        ]
        resolved: dict[str, Any] = {}
        for opt_name, att in (attachments or {}).items():
            opts.append({"name": opt_name, "type": 11, "value": att["id"]})
            resolved.setdefault("attachments", {})[att["id"]] = att
        data: dict[str, Any] = {"id": str(self.next_id()), "name": name, "type": 1}
        if subcommand is not None:  # /name subcommand: the options are the subcommand's
            opts = [{"name": subcommand, "type": 1, "options": opts}]
        if opts:
            data["options"] = opts
        if resolved:
            data["resolved"] = resolved
        if guild_id:
            data["guild_id"] = str(guild_id)
        return self._interaction_payload(
            2, interaction_id, token, channel, user, guild_id, roles, permissions,
            {"attachment_size_limit": size_limit, "data": data},
        )  # fmt: skip

    def _interaction_payload(
        self,
        kind: int,
        interaction_id: int,
        token: str,
        channel: dict[str, Any],
        user: dict[str, Any],
        guild_id: int | None,
        roles: Iterable[int],
        permissions: int,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """The fields every INTERACTION_CREATE of ``kind`` carries, then ``extra``."""
        payload: dict[str, Any] = {
            "id": str(interaction_id),
            "application_id": str(APP_ID),
            "type": kind,
            "token": token,
            "version": 1,
            "channel_id": channel["id"],
            "channel": channel,
            "locale": "en-US",
            "app_permissions": str(discord.Permissions.all().value),
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(guild_id)}
            if guild_id
            else {"1": user["id"]},
            "context": 0 if guild_id else 1,
            **extra,
        }
        if guild_id:
            payload["guild_id"] = str(guild_id)
            payload["guild_locale"] = "en-US"
            payload["member"] = self.member(user, roles, permissions)
        else:
            payload["user"] = user
        return payload

    def click(
        self,
        message: dict[str, Any] | str,
        custom_id: str,
        *,
        user: dict[str, Any] | None = None,
        roles: Iterable[int] = (),
        permissions: int = 0,
        guild_id: int | None = GUILD_ID,
        channel: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE (type 3) for pressing the button ``custom_id``
        on ``message`` (a message the bot posted, or its id)."""
        msg = self.messages[message] if isinstance(message, str) else message
        ids = [
            c.get("custom_id")
            for row in msg.get("components") or ()
            for c in row.get("components") or ()
        ]
        assert custom_id in ids, f"no button {custom_id!r} on the message: {ids}"
        interaction_id = self.next_id()
        token = f"tok{interaction_id}"
        user = user or self.user()
        if channel is None:
            channel = (
                self.text_channel(int(msg["channel_id"]), guild_id)
                if guild_id
                else self.dm_channel(int(msg["channel_id"]), user)
            )
        self._token_channels[token] = channel["id"]
        self._remember_interaction(token, interaction_id, 3, user, guild_id, msg["id"])
        return self._interaction_payload(
            3, interaction_id, token, channel, user, guild_id, roles, permissions,
            {
                "attachment_size_limit": DEFAULT_LIMIT,
                "message": json.loads(json.dumps(msg)),
                "data": {"custom_id": custom_id, "component_type": 2},
            },
        )  # fmt: skip

    def buttons(self, message: dict[str, Any] | str) -> list[str]:
        """The custom ids of the buttons on a message the bot posted."""
        msg = self.messages[message] if isinstance(message, str) else message
        return [
            c["custom_id"]
            for row in msg.get("components") or ()
            for c in row.get("components") or ()
            if "custom_id" in c
        ]

    def message(
        self,
        content: str,
        *,
        channel_id: int = CHANNEL_ID,
        guild_id: int | None = GUILD_ID,
        author: dict[str, Any] | None = None,
        mention_bot: bool = True,
        attachments: Iterable[dict[str, Any]] = (),
        roles: Iterable[int] = (),
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload (a user's message, optionally mentioning the bot)."""
        author = author or self.user()
        payload = self._message_object(str(channel_id), content, author)
        payload["mentions"] = [self.bot_user] if mention_bot else []
        payload["attachments"] = list(attachments)
        if guild_id:
            payload["guild_id"] = str(guild_id)
            member = self.member(author, roles)
            member.pop("user")
            payload["member"] = member
        return payload

    def guild(
        self,
        guild_id: int = GUILD_ID,
        channels: Iterable[dict[str, Any]] = (),
        threads: Iterable[dict[str, Any]] = (),
        premium_tier: int = 0,
    ) -> dict[str, Any]:
        """A GUILD_CREATE payload, to put a guild in the client's cache."""
        return {
            "id": str(guild_id),
            "name": "Test guild",
            "icon": None,
            "owner_id": str(USER_ID),
            "unavailable": False,
            "member_count": 2,
            "large": False,
            "premium_tier": premium_tier,
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [
                {
                    "id": str(guild_id),
                    "name": "@everyone",
                    "color": 0,
                    "hoist": False,
                    "position": 0,
                    "permissions": str(discord.Permissions.general().value),
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "channels": [{k: v for k, v in c.items() if k != "guild_id"} for c in channels],
            "threads": list(threads),
            "members": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "joined_at": _now(),
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "preferred_locale": "en-US",
        }

    def _message_object(
        self, channel_id: str, content: str, author: dict[str, Any], files: list[FilePart] = ()
    ) -> dict[str, Any]:
        attachments = []
        for part in files:
            att_id = str(self.next_id())
            attachments.append(
                {
                    "id": att_id,
                    "filename": part.filename,
                    "size": len(part.data),
                    "url": f"{self.base_url}/cdn/{att_id}/{part.filename}",
                    "proxy_url": f"{self.base_url}/cdn/{att_id}/{part.filename}",
                    "content_type": part.content_type,
                }
            )
        return {
            "id": str(self.next_id()),
            "channel_id": channel_id,
            "type": 0,
            "content": content,
            "author": author,
            "attachments": attachments,
            "embeds": [],
            "mentions": [],
            "mention_roles": [],
            "pinned": False,
            "mention_everyone": False,
            "tts": False,
            "timestamp": _now(),
            "edited_timestamp": None,
            "flags": 0,
            "components": [],
        }

    # -- server side -----------------------------------------------------

    async def _read(self, request: web.Request) -> DiscordCall:
        body: Any | None = None
        files: list[FilePart] = []
        if request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            async for part in reader:
                if part.name == "payload_json":
                    body = json.loads(await part.text())
                else:
                    files.append(
                        FilePart(
                            part.name or "",
                            part.filename or "",
                            part.headers.get("Content-Type", ""),
                            bytes(await part.read()),
                        )
                    )
        elif request.can_read_body:
            raw = await request.read()
            body = json.loads(raw) if raw else None
        path = request.path.removeprefix(API)
        return DiscordCall(request.method, path, dict(request.query), body, files, time.monotonic())

    async def _record(self, call: DiscordCall) -> None:
        call.at = time.monotonic()
        async with self._cond:
            self.calls.append(call)
            self._cond.notify_all()

    def _hold_for(self, call: DiscordCall) -> _Hold | None:
        for held in self._holds:
            if (
                held.method == call.method
                and held.pattern.search(call.path)
                and (held.where is None or held.where(call))
            ):
                held.times -= 1
                if held.times <= 0:
                    self._holds.remove(held)
                return held
        return None

    async def _wait_out(self, call: DiscordCall, held: _Hold) -> None:
        async with self._cond:
            self.held.append(call)
            self._cond.notify_all()
        try:
            await held.released.wait()
        finally:
            self.held.remove(call)

    def _take_failure(self, call: DiscordCall) -> _Failure | None:
        for failure in self._failures:
            if failure.method == call.method and failure.pattern.search(call.path):
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
                return failure
        return None

    async def handle_api(self, request: web.Request) -> web.StreamResponse:
        call = await self._read(request)
        held = self._hold_for(call)
        if held is not None and not held.after:
            await self._wait_out(call, held)
            if request.transport is None:  # the caller has gone
                return web.Response(status=499)  # nobody to answer: not recorded, not done
        await self._record(call)
        failure = self._take_failure(call)
        if failure is not None:
            return _json({"message": "simulated failure", "code": failure.code}, failure.status)
        response = self._answer(call)
        if isinstance(response, web.Response) and response.content_type == "application/json":
            assert isinstance(response.body, bytes)
            call.answer = json.loads(response.body)
        if held is not None and held.after:  # done; the answer waits
            await self._wait_out(call, held)
        return response

    def _post(
        self, call: DiscordCall, channel_id: str, message_id: str | None = None
    ) -> dict[str, Any]:
        """A message the bot posts (or, with ``message_id``, edits): kept as Discord has it."""
        body = call.json if isinstance(call.json, dict) else {}
        old = self.messages.get(message_id or "")
        if old is None:
            msg = self._message_object(channel_id, body.get("content") or "", self.bot_user)
            if message_id is not None:
                msg["id"] = message_id
        else:
            msg = dict(old)
            msg["edited_timestamp"] = _now()
            if "content" in body:
                msg["content"] = body.get("content") or ""
        if call.files:
            msg["attachments"] = self._message_object(channel_id, "", self.bot_user, call.files)[
                "attachments"
            ]
        if "components" in body:
            msg["components"] = body.get("components") or []
        if "flags" in body or old is None:
            msg["flags"] = call.flags
        if "message_reference" in body:
            msg["message_reference"] = body["message_reference"]
        if old is None and body.get("nonce") is not None:
            msg["nonce"] = body["nonce"]
        self.messages[msg["id"]] = msg
        return msg

    def _same_nonce(self, call: DiscordCall) -> dict[str, Any] | None:
        """``enforce_nonce``: the message the bot made with this nonce within
        the window, if it still exists (that one is answered, none is made)."""
        body = call.json if isinstance(call.json, dict) else {}
        nonce = body.get("nonce")
        if nonce is None or not body.get("enforce_nonce"):
            return None
        made = self._nonces.get((str(self.bot_user["id"]), str(nonce)))
        if made is None or time.monotonic() - made[1] > self.nonce_window:
            return None
        return self.messages.get(made[0])

    def _keep_nonce(self, call: DiscordCall, msg: dict[str, Any]) -> None:
        body = call.json if isinstance(call.json, dict) else {}
        if body.get("nonce") is not None and body.get("enforce_nonce"):
            key = (str(self.bot_user["id"]), str(body["nonce"]))
            self._nonces[key] = (msg["id"], time.monotonic())

    def _history(self, channel_id: str, query: dict[str, str]) -> list[dict[str, Any]]:
        """``GET /channels/{id}/messages``: up to ``limit`` (default 50, at
        most 100) messages before / after an id, newest first."""
        limit = min(int(query.get("limit") or 50), 100)
        found = sorted(
            (
                m
                for m in self.messages.values()
                if m["channel_id"] == channel_id and not int(m.get("flags") or 0) & 64
            ),
            key=lambda m: int(m["id"]),
        )
        if "after" in query:
            found = [m for m in found if int(m["id"]) > int(query["after"])][:limit]
        else:
            if "before" in query:
                found = [m for m in found if int(m["id"]) < int(query["before"])]
            found = found[-limit:]
        return list(reversed(found))

    def _unknown_message(self) -> web.Response:
        return _json({"message": "Unknown Message", "code": 10008}, 404)

    def _answer(self, call: DiscordCall) -> web.StreamResponse:
        m, path = call.method, call.path
        if m == "GET" and path == "/users/@me":
            return _json(self.bot_user)
        if m == "GET" and path == "/oauth2/applications/@me":
            return _json(
                {
                    "id": str(APP_ID),
                    "name": "HuggingGPT",
                    "icon": None,
                    "description": "",
                    "rpc_origins": [],
                    "bot_public": True,
                    "bot_require_code_grant": False,
                    "owner": self.user(USER_ID, "owner"),
                    "summary": "",
                    "verify_key": "0" * 64,
                    "flags": 0,
                    "team": None,
                }
            )
        if m == "GET" and path in ("/gateway", "/gateway/bot"):
            return _json(self.gateway.info())
        if match := re.fullmatch(r"/interactions/(\d+)/([^/]+)/callback", path):
            kind = int((call.json or {}).get("type", 0))
            data = (call.json or {}).get("data") or {}
            flags = int(data.get("flags") or 0)
            if kind in (4, 5):  # a new message: the interaction's response
                token = match[2]
                original = self._post(
                    DiscordCall("POST", path, {}, {**data, "flags": flags}),
                    self._token_channels.get(token, str(CHANNEL_ID)),
                )
                if token in self._interactions:
                    original["interaction_metadata"] = dict(self._interactions[token])
                self._originals[token] = original["id"]
            return _json(
                {
                    "interaction": {
                        "id": match[1],
                        "type": 2,
                        "response_message_loading": kind == 5,
                        "response_message_ephemeral": bool(flags & 64),
                    },
                    "resource": {"type": kind},
                }
            )
        if match := re.fullmatch(rf"/webhooks/{APP_ID}/([^/]+)(?:/messages/([^/]+))?", path):
            token = match[1]
            channel_id = self._token_channels.get(token, str(CHANNEL_ID))
            target = match[2]
            if target == "@original":
                target = self._originals.setdefault(token, str(self.next_id()))
                if m == "DELETE":
                    self.messages.pop(target, None)
                    return web.Response(status=204)
            if m == "DELETE":
                if self.messages.pop(target or "", None) is None:
                    return self._unknown_message()
                return web.Response(status=204)
            body = self._post(call, channel_id, target)
            body["webhook_id"] = str(APP_ID)
            body["application_id"] = str(APP_ID)
            if target is None and token in self._interactions:  # a follow-up
                metadata = dict(self._interactions[token])
                if token in self._originals:
                    metadata["original_response_message_id"] = self._originals[token]
                body["interaction_metadata"] = metadata
            return _json(body)
        if match := re.fullmatch(r"/channels/(\d+)/messages(?:/(\d+))?", path):
            if m == "DELETE":
                if self.messages.pop(match[2] or "", None) is None:
                    return self._unknown_message()
                return web.Response(status=204)
            if m == "GET" and match[2]:
                known = self.messages.get(match[2])
                return _json(known) if known is not None else self._unknown_message()
            if m == "GET":
                return _json(self._history(match[1], call.query))
            if m == "POST" and (same := self._same_nonce(call)) is not None:
                return _json(same)  # made already: that one, not another
            made = self._post(call, match[1], match[2])
            if m == "POST":
                self._keep_nonce(call, made)
            return _json(made)
        if re.fullmatch(r"/channels/\d+/typing", path):
            return web.Response(status=204)
        if m == "PUT" and (
            match := re.fullmatch(rf"/applications/{APP_ID}(?:/guilds/(\d+))?/commands", path)
        ):
            commands = []
            for cmd in call.json or []:
                commands.append(
                    {
                        **cmd,
                        "id": str(self.next_id()),
                        "application_id": str(APP_ID),
                        "version": "1",
                        **({"guild_id": match[1]} if match[1] else {}),
                    }
                )
            return _json(commands)
        return _json({"message": f"fake has no route {m} {path}", "code": 0}, 404)

    async def handle_cdn(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        self.cdn_requests.append(key)
        data = self.cdn.get(key)
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")


@asynccontextmanager
async def make_discord_fake() -> AsyncIterator[FakeDiscord]:
    """Start the fake on 127.0.0.1 and point discord.py at it until exit."""
    fake = FakeDiscord()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", API + "/{tail:.*}", fake.handle_api)
    app.router.add_get("/cdn/{key:.*}", fake.handle_cdn)
    app.router.add_get(GATEWAY_PATH, fake.gateway.handle_ws)
    old_base = discord.http.Route.BASE
    async with serve(app) as base_url:
        fake.base_url = base_url
        discord.http.Route.BASE = f"{base_url}{API}"
        try:
            yield fake
        finally:
            discord.http.Route.BASE = old_base
            await fake.gateway.close()


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    """A running fake Discord REST server + CDN, with discord.py pointed at it."""
    async with make_discord_fake() as fake:
        yield fake
