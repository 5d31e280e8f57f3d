"""A loopback Slack Web API, so tests drive the real slack_sdk / slack-bolt.

``/api/{method}`` answers GET and POST with ``"ok": true`` and records every
call (method, merged query/form/JSON arguments, token, arrival time).  Upload
v2 works end to end: ``files.getUploadURLExternal`` hands out an
``upload_url`` on this server, the bytes posted there are kept, and
``files.completeUploadExternal`` ties them to a channel and thread
(:meth:`FakeSlack.uploaded`).  :meth:`FakeSlack.add_file` serves a file at a
``url_private`` that, like Slack, answers its HTML login page when the bot
token is missing (or always, with ``login_page=True``).  Socket Mode works
too: ``apps.connections.open`` hands out a WebSocket on this server, and
:meth:`FakeSlack.socket_send` pushes event envelopes the app must ack.

:meth:`FakeSlack.hold` leaves chosen calls unanswered until the test lets
them go (a bot killed while its call is in the air; with ``after=True`` Slack
has done the call and only its answer is held: the bot dies before it learns
of it), and ``add_file(…, redirect=URL)`` answers a download with a redirect.

Conversations are kept as Slack documents them: ``chat.postMessage`` (and a
completed upload) adds a message to its channel or thread, with the message
``metadata`` it was given, ``chat.update`` / ``chat.delete`` change and remove
it; ``conversations.history`` (a channel's top-level messages, newest first)
and ``conversations.replies`` (a thread, oldest first) read them back with
``oldest`` / ``latest`` / ``inclusive`` / ``limit`` / ``cursor``, and return a
message's metadata only when asked with ``include_all_metadata``.
``files.info`` shows a completed upload's ``shares`` (``public`` for ``C…``
channels, ``private`` otherwise), ``files.delete`` removes it (and its share).
:meth:`FakeSlack.add_message` puts a person's message in a conversation.

The AI-app surface is served too: ``chat.startStream`` / ``appendStream`` /
``stopStream`` keep each streamed message (:meth:`FakeSlack.streams`: its
Markdown, its task cards as last updated, the blocks it ended with) and
refuse to append to a stream that was stopped, as Slack does; the
``assistant.threads.*`` methods answer ``ok``.  :meth:`FakeSlack.lack_feature`
makes chosen methods answer an error every time (``unknown_method``,
``missing_scope``, ``not_allowed_token_type``, ``feature_not_enabled``…): a
workspace or app without the feature.

Tests wait on what the fake received with :meth:`FakeSlack.wait_for` (an
awaited condition, not a sleep).  :func:`signed_request` and the event
builders make the signed Events API requests Slack would send.

Use the ``slack_fake`` fixture, or ``async with make_slack_fake() as fake``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from aiohttp import WSMsgType, web
from slack_sdk.signature import SignatureVerifier

from tests.fakes.loopback import serve

BOT_TOKEN = "xoxb-test-token"
SIGNING_SECRET = "test-signing-secret"
TEAM_ID = "T0TEAM"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
API_APP_ID = "A0APP"

LOGIN_PAGE = (
    b"<!DOCTYPE html><html lang='en'><head><title>Slack</title></head>"
    b"<body><form action='/signin'>Sign in to your workspace</form></body></html>"
)


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    token: str | None
    at: float  # time.monotonic()
    http_method: str = "POST"
    result: dict[str, Any] = field(default_factory=dict)  # what the fake answered


@dataclass
class Upload:
    file_id: str
    filename: str
    length: int
    data: bytes | None = None
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    share_ts: str | None = None  # the message that shared it


def _shown(message: dict[str, Any], metadata: bool) -> dict[str, Any]:
    """A kept message as a method returns it: its metadata only if asked for."""
    shown = dict(message)
    if not metadata:
        shown.pop("metadata", None)
    return shown


@dataclass
class Stream:
    """One streamed message as Slack keeps it (``chat.startStream`` …)."""

    channel: str
    ts: str
    thread_ts: str | None
    args: dict[str, Any]  # what chat.startStream was given
    text: str = ""  # the Markdown appended so far
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # id → last task_update
    task_history: list[dict[str, Any]] = field(default_factory=list)  # every task_update
    plan_titles: list[str] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)  # given to chat.stopStream
    stopped: bool = False
    deleted: bool = False


@dataclass
class _Served:
    data: bytes
    content_type: str
    login_page: bool
    chunked: bool = False
    redirect: str | None = None  # answer 302 to this URL instead


@dataclass
class _Hold:
    method: str
    where: Callable[[dict[str, Any]], bool] | None
    times: int
    released: asyncio.Event
    after: bool = False  # the call is done; only its answer waits


def _ts_key(ts: Any) -> float:
    try:
        return float(str(ts))
    except ValueError:
        return 0.0


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true")


@dataclass
class FakeSlack:
    base_url: str = ""  # http://127.0.0.1:PORT/api/
    root: str = ""  # http://127.0.0.1:PORT
    calls: list[Call] = field(default_factory=list)
    uploads: dict[str, Upload] = field(default_factory=dict)
    downloads: list[dict[str, Any]] = field(default_factory=list)
    # Per-method canned answers merged into {"ok": true, …}.
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    _rate_limits: dict[str, int] = field(default_factory=dict)
    _errors: dict[str, list[str]] = field(default_factory=dict)
    _files: dict[str, _Served] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    # Socket Mode: the open WebSocket and the envelope ids the app acked.
    socket_acks: list[str] = field(default_factory=list)
    _socket: web.WebSocketResponse | None = None
    # Tokens Slack does not accept, with the error every method answers them.
    _refused: dict[str, str] = field(default_factory=dict)
    # Calls held unanswered (and unrecorded) until their event is set.
    _holds: list[_Hold] = field(default_factory=list)
    # Streamed messages by ts, and methods this workspace/app does not have.
    _streams: dict[str, Stream] = field(default_factory=dict)
    _lacking: dict[str, str] = field(default_factory=dict)
    _needed: dict[str, str] = field(default_factory=dict)  # missing_scope: which scope
    # Every conversation's messages (channel id -> messages, in posting order).
    conversations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    # -- test API --------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def texts(self, *methods: str) -> list[str]:
        """The ``text`` of every chat.postMessage / chat.update (or ``methods``)."""
        wanted = methods or ("chat.postMessage", "chat.update")
        return [str(c.args.get("text", "")) for c in self.calls if c.method in wanted]

    def uploaded(self) -> list[Upload]:
        """Uploads that were completed (step 3 done), in order."""
        return [u for u in self.uploads.values() if u.channel is not None]

    async def wait_for(
        self,
        method: str,
        count: int = 1,
        where: Callable[[Call], bool] | None = None,
        within: float = 10.0,
    ) -> list[Call]:
        """Wait until ``count`` calls to ``method`` (matching ``where``) arrived."""

        def matching() -> list[Call]:
            return [c for c in self.calls_to(method) if where is None or where(c)]

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(matching()) >= count), within)
        return matching()

    async def wait_until(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        """Wait until ``predicate`` (read on each call the fake records) holds."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), within)

    def rate_limit(self, method: str, times: int = 1) -> None:
        """Answer the next ``times`` calls to ``method`` with 429 + Retry-After: 0."""
        self._rate_limits[method] = self._rate_limits.get(method, 0) + times

    def fail(self, method: str, error: str = "internal_error", times: int = 1) -> None:
        """Answer the next calls to ``method`` with ``{"ok": false, "error": …}``."""
        self._errors.setdefault(method, []).extend([error] * times)

    def hold(
        self,
        method: str,
        where: Callable[[dict[str, Any]], bool] | None = None,
        times: int = 1,
        *,
        after: bool = False,
    ) -> asyncio.Event:
        """Leave the next ``times`` calls to ``method`` (whose arguments match
        ``where``) unanswered and unrecorded until the returned event is set:
        a caller that dies meanwhile never got its call through.  ``after``:
        Slack does the call (it is recorded, its message posted) and only
        the answer waits: a caller that dies meanwhile never learns of it."""
        hold = _Hold(method, where, times, asyncio.Event(), after)
        self._holds.append(hold)
        return hold.released

    def lack_feature(
        self, *methods: str, error: str = "unknown_method", needed: str | None = None
    ) -> None:
        """Answer every call to ``methods`` with ``{"ok": false, "error": error}``:
        a workspace or app without the feature (no AI-app features, a scope
        missing, an older Slack).  ``needed``: the scope a ``missing_scope``
        answer names."""
        for method in methods:
            self._lacking[method] = error
            if needed is not None:
                self._needed[method] = needed

    def add_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U0USER",
        ts: str | None = None,
        thread_ts: str | None = None,
    ) -> dict[str, Any]:
        """A person's message in ``channel`` (in the thread ``thread_ts``)."""
        message: dict[str, Any] = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts or self._new_ts(),
        }
        if thread_ts:
            message["thread_ts"] = thread_ts
        self._keep(channel, message)
        return message

    def messages_in(self, channel: str, thread_ts: str | None = None) -> list[dict[str, Any]]:
        """The messages Slack has in ``channel`` (or that thread), oldest first."""
        kept = self.conversations.get(channel, [])
        if thread_ts is None:
            return list(kept)
        return [m for m in kept if thread_ts in (m.get("ts"), m.get("thread_ts"))]

    def streams(self) -> list[Stream]:
        """Every streamed message, in the order they were started."""
        return list(self._streams.values())

    def refuse_token(self, token: str, error: str = "invalid_auth") -> None:
        """Answer every call made with ``token`` (bot or app-level) with
        ``{"ok": false, "error": error}``, as Slack does for a wrong or revoked token."""
        self._refused[token] = error

    async def wait_socket(self, within: float = 10.0) -> None:
        """Wait until an app has connected in Socket Mode."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self._socket is not None), within)

    async def socket_send(self, body: dict[str, Any], retry_attempt: int = 0) -> str:
        """Push an Events API envelope over the socket; returns its envelope id."""
        assert self._socket is not None, "no Socket Mode connection"
        envelope_id = f"env-{next(self._ids)}"
        await self._socket.send_json(
            {
                "envelope_id": envelope_id,
                "payload": body,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": "timeout" if retry_attempt else "",
            }
        )
        return envelope_id

    async def socket_drop(self) -> None:
        """Close the Socket Mode connection from Slack's side (the app reconnects)."""
        assert self._socket is not None, "no Socket Mode connection"
        await self._socket.close()

    async def wait_socket_ack(self, envelope_id: str, within: float = 10.0) -> None:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: envelope_id in self.socket_acks), within
            )

    def add_file(
        self,
        name: str,
        data: bytes,
        mimetype: str = "image/png",
        *,
        served_type: str | None = None,
        login_page: bool = False,
        size: int | None = None,
        chunked: bool = False,
        redirect: str | None = None,
    ) -> dict[str, Any]:
        """Serve ``data`` and return the Slack file object an event carries.

        ``login_page``: serve Slack's HTML sign-in page instead (what a bot
        without the ``files:read`` scope gets).  ``size`` overrides the
        declared size; ``chunked`` sends no Content-Length.  ``redirect``:
        answer ``302 Found`` with that ``Location`` (absolute or relative),
        as Slack does when it moves a download to another of its hosts.
        """
        file_id = f"F{next(self._ids):07d}"
        self._files[file_id] = _Served(data, served_type or mimetype, login_page, chunked, redirect)
        url = f"{self.root}/files-pri/{TEAM_ID}-{file_id}/{name}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(data) if size is None else size,
            "mode": "hosted",
            "is_external": False,
            "url_private": url,
            "url_private_download": url + "?download=1",
        }

    # -- server side -----------------------------------------------------

    async def _record(self, call: Call) -> None:
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    async def handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            raw = await request.read()
            if request.content_type == "application/json":
                args.update(json.loads(raw or b"{}"))
            elif raw:
                args.update(parse_qsl(raw.decode(), keep_blank_values=True))
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else args.get("token")
        answer_after: asyncio.Event | None = None
        for hold in list(self._holds):
            if hold.method == method and (hold.where is None or hold.where(args)):
                hold.times -= 1
                if hold.times <= 0:
                    self._holds.remove(hold)
                if hold.after:
                    answer_after = hold.released
                else:
                    await hold.released.wait()
                break
        call = Call(method, args, token, time.monotonic(), request.method)
        status, headers = 200, {}
        body: dict[str, Any] = {"ok": True}
        if self._rate_limits.get(method):
            self._rate_limits[method] -= 1
            status, body, headers = 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "0"}
        elif self._errors.get(method):
            body = {"ok": False, "error": self._errors[method].pop(0)}
        elif method in self._lacking:
            needed = self._needed.get(method)  # missing_scope: which one, as Slack says
            body = {
                "ok": False,
                "error": self._lacking[method],
                **({"needed": needed} if needed else {}),
            }
        elif not token:
            body = {"ok": False, "error": "not_authed"}
        elif token in self._refused:
            body = {"ok": False, "error": self._refused[token]}
        else:
            body.update(self._answer(method, args))
            body.update(self.answers.get(method, {}))
        call.result = body
        await self._record(call)
        if answer_after is not None:
            await answer_after.wait()
        return web.json_response(body, status=status, headers=headers)

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "url": "https://fake.slack.com/",
                "team": "Fake Team",
                "user": "hugginggpt",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
                "is_enterprise_install": False,
            }
        if method == "apps.connections.open":
            return {"url": f"{self.root.replace('http', 'ws', 1)}/socket"}
        if method == "chat.postMessage":
            ts = self._new_ts()
            message = self._bot_message(ts, text=args.get("text", ""))
            if args.get("thread_ts"):
                message["thread_ts"] = args["thread_ts"]
            metadata = args.get("metadata")
            if isinstance(metadata, str):  # form-encoded: a JSON string
                metadata = json.loads(metadata)
            if metadata:
                message["metadata"] = metadata
            self._keep(str(args.get("channel")), message)
            return {"channel": args.get("channel"), "ts": ts, "message": _shown(message, False)}
        if method == "chat.update":
            for edited in self.conversations.get(str(args.get("channel")), []):
                if edited["ts"] == args.get("ts"):
                    edited["text"] = args.get("text", edited.get("text", ""))
            return {"channel": args.get("channel"), "ts": args.get("ts"), "text": args.get("text")}
        if method == "chat.delete":
            if args.get("ts") in self._streams:
                self._streams[str(args["ts"])].deleted = True
            conversation = self.conversations.get(str(args.get("channel")), [])
            conversation[:] = [m for m in conversation if m["ts"] != args.get("ts")]
            return {"channel": args.get("channel"), "ts": args.get("ts")}
        if method in ("conversations.history", "conversations.replies"):
            return self._read_conversation(method, args)
        if method == "files.info":
            upload = self.uploads.get(str(args.get("file")))
            if upload is None or upload.channel is None:
                return {"ok": False, "error": "file_not_found"}
            return {"file": self._file_object(upload)}
        if method == "files.delete":
            upload = self.uploads.pop(str(args.get("file")), None)
            if upload is None:
                return {"ok": False, "error": "file_not_found"}
            for messages in self.conversations.values():
                messages[:] = [
                    m
                    for m in messages
                    if upload.file_id not in [f["id"] for f in m.get("files", [])]
                ]
            return {}
        if method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            return self._stream(method, args)
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._ids):07d}"
            self.uploads[file_id] = Upload(
                file_id, str(args.get("filename")), int(args.get("length", 0))
            )
            return {"upload_url": f"{self.root}/upload/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":
            files = args.get("files")
            files = json.loads(files) if isinstance(files, str) else files or []
            done = []
            channel = args.get("channel_id") or args.get("channels")
            ts = self._new_ts()
            for item in files:
                upload = self.uploads[item["id"]]
                upload.title = item.get("title")
                upload.channel = channel
                upload.thread_ts = args.get("thread_ts")
                upload.share_ts = ts
                done.append({"id": upload.file_id, "name": upload.filename, "title": upload.title})
            if channel:  # the message that shares them
                message = self._bot_message(ts, text=args.get("initial_comment") or "")
                message["files"] = done
                message["upload"] = True
                if args.get("thread_ts"):
                    message["thread_ts"] = args["thread_ts"]
                self._keep(str(channel), message)
            return {"files": done}
        return {}

    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ids):06d}"

    def _bot_message(self, ts: str, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "user": BOT_USER_ID,
            "bot_id": BOT_ID,
            "app_id": API_APP_ID,
            "text": text,
            "ts": ts,
        }

    def _keep(self, channel: str, message: dict[str, Any]) -> None:
        self.conversations.setdefault(channel, []).append(message)

    def _read_conversation(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """``conversations.history`` / ``.replies``: one page of messages in
        ``[oldest, latest]`` (bounds included with ``inclusive``); history is
        the channel's top level (a thread shows as its parent), newest first;
        replies the thread (parent first), oldest first."""
        channel = str(args.get("channel"))
        if method == "conversations.replies":
            thread = str(args.get("ts"))
            found = self.messages_in(channel, thread)
            if not found:
                return {"ok": False, "error": "thread_not_found"}
        else:
            found = [m for m in self.messages_in(channel) if m.get("thread_ts") in (None, m["ts"])]
            found.reverse()
        inclusive = _truthy(args.get("inclusive"))
        if args.get("oldest"):
            low = _ts_key(args["oldest"])
            found = [
                m
                for m in found
                if _ts_key(m["ts"]) > low or (inclusive and _ts_key(m["ts"]) == low)
            ]
        if args.get("latest"):
            high = _ts_key(args["latest"])
            found = [
                m
                for m in found
                if _ts_key(m["ts"]) < high or (inclusive and _ts_key(m["ts"]) == high)
            ]
        start = int(args.get("cursor") or 0)
        limit = int(args.get("limit") or 100)
        page = found[start : start + limit]
        more = start + limit < len(found)
        metadata = _truthy(args.get("include_all_metadata"))
        return {
            "messages": [_shown(m, metadata) for m in page],
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _file_object(self, upload: Upload) -> dict[str, Any]:
        """A completed upload as ``files.info`` shows it."""
        share = {"ts": upload.share_ts, "channel_name": "general", "team_id": TEAM_ID}
        if upload.thread_ts:
            share["thread_ts"] = upload.thread_ts
        channel = str(upload.channel)
        where = "public" if channel.startswith("C") else "private"
        return {
            "id": upload.file_id,
            "name": upload.filename,
            "title": upload.title,
            "size": upload.length,
            "user": BOT_USER_ID,
            "shares": {where: {channel: [share]}},
            "channels": [channel] if where == "public" else [],
            "groups": [channel] if channel.startswith("G") else [],
            "ims": [channel] if channel.startswith("D") else [],
        }

    def _stream(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """The streaming methods, as Slack documents them: a stream is started
        in a thread, appended to and stopped once; a stopped (or unknown)
        stream takes nothing more."""
        channel = str(args.get("channel") or "")
        if method == "chat.startStream":
            if not args.get("thread_ts"):
                return {"ok": False, "error": "invalid_arguments"}
            ts = f"{int(time.time())}.{next(self._ids):06d}"
            stream = Stream(channel, ts, str(args["thread_ts"]), dict(args))
            self._streams[ts] = stream
        else:
            found = self._streams.get(str(args.get("ts")))
            if found is None or found.deleted:
                return {"ok": False, "error": "message_not_found"}
            if found.stopped:
                return {"ok": False, "error": "message_not_in_streaming_state"}
            stream = found
        if args.get("markdown_text"):
            stream.text += str(args["markdown_text"])
        for chunk in args.get("chunks") or []:
            kind = chunk.get("type")
            if kind == "markdown_text":
                stream.text += str(chunk.get("text", ""))
            elif kind == "task_update":
                stream.tasks[str(chunk["id"])] = dict(chunk)
                stream.task_history.append(dict(chunk))
            elif kind == "plan_update":
                stream.plan_titles.append(str(chunk.get("title", "")))
        if method == "chat.stopStream":
            stream.stopped = True
            stream.blocks = list(args.get("blocks") or [])
            message = {"type": "message", "ts": stream.ts, "text": stream.text}
            return {"channel": channel, "ts": stream.ts, "message": message}
        return {"channel": channel, "ts": stream.ts}

    async def handle_socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "hello", "num_connections": 1, "debug_info": {}})
        async with self._changed:
            self._socket = ws
            self._changed.notify_all()
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    envelope_id = json.loads(message.data).get("envelope_id")
                    async with self._changed:
                        self.socket_acks.append(envelope_id)
                        self._changed.notify_all()
        finally:
            self._socket = None
        return ws

    async def handle_upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        data = await request.read()
        upload = self.uploads.get(file_id)
        if upload is None:
            return web.Response(status=404, text="unknown upload")
        upload.data = data
        await self._record(
            Call("upload", {"file_id": file_id, "size": len(data)}, None, time.monotonic())
        )
        return web.Response(text=f"OK - {len(data)}")

    async def handle_download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["key"].rsplit("-", 1)[-1]
        served = self._files.get(file_id)
        auth = request.headers.get("Authorization")
        self.downloads.append({"file_id": file_id, "authorization": auth})
        if served is None:
            return web.Response(status=404, text="file not found")
        if served.redirect is not None:
            return web.Response(status=302, headers={"Location": served.redirect})
        if served.login_page or auth != f"Bearer {BOT_TOKEN}":
            return web.Response(body=LOGIN_PAGE, content_type="text/html")
        if served.chunked:
            response = web.StreamResponse(headers={"Content-Type": served.content_type})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for start in range(0, len(served.data), 8192):
                await response.write(served.data[start : start + 8192])
            await response.write_eof()
            return response
        return web.Response(body=served.data, headers={"Content-Type": served.content_type})


@asynccontextmanager
async def make_slack_fake(fake: FakeSlack | None = None) -> AsyncIterator[FakeSlack]:
    """Start a fake Slack on 127.0.0.1 (ephemeral port); stop it on exit.
    ``fake``: serve this one (a subclass that also tallies, say)."""
    fake = fake if fake is not None else FakeSlack()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/api/{method}", fake.handle_api)
    app.router.add_post("/upload/{file_id}", fake.handle_upload)
    app.router.add_get("/files-pri/{key}/{name}", fake.handle_download)
    app.router.add_get("/socket", fake.handle_socket)
    async with serve(app) as root:
        fake.root = root
        fake.base_url = f"{root}/api/"
        try:
            yield fake
        finally:
            if fake._socket is not None:
                await fake._socket.close()


@pytest.fixture
async def slack_fake() -> AsyncIterator[FakeSlack]:
    """A running fake Slack Web API (function scope)."""
    async with make_slack_fake() as fake:
        yield fake


# -- Events API requests --------------------------------------------------

_event_ids = itertools.count(1)


def event_body(event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
    """The ``event_callback`` envelope Slack posts for one event."""
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM_ID,
        "api_app_id": API_APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{next(_event_ids):08d}",
        "event_time": int(time.time()),
        "authorizations": [
            {
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }


def mention_event(
    text: str,
    *,
    channel: str = "C0CHAN",
    user: str = "U0USER",
    ts: str | None = None,
    thread_ts: str | None = None,
    files: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An ``app_mention`` event; ``text`` gets the bot's mention in front."""
    ts = ts or f"{int(time.time())}.{next(_event_ids):06d}"
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": user,
        "text": f"<@{BOT_USER_ID}> {text}",
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": TEAM_ID,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
    return event


def dm_event(
    text: str,
    *,
    channel: str = "D0DM",
    user: str = "U0USER",
    ts: str | None = None,
    thread_ts: str | None = None,
    files: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` event in a DM (``message.im``)."""
    ts = ts or f"{int(time.time())}.{next(_event_ids):06d}"
    event: dict[str, Any] = {
        "type": "message",
        "channel_type": "im",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": TEAM_ID,
        **extra,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
        event.setdefault("subtype", "file_share")
    return event


def signed_headers(
    raw_body: str,
    secret: str = SIGNING_SECRET,
    *,
    timestamp: int | None = None,
    retry_num: int | None = None,
) -> dict[str, str]:
    """The headers Slack signs an Events API request with."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": SignatureVerifier(secret).generate_signature(
            timestamp=ts, body=raw_body
        ),
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return headers


def signed_request(
    body: dict[str, Any], secret: str = SIGNING_SECRET, **kw: Any
) -> tuple[str, dict[str, str]]:
    """``(raw_body, headers)`` for posting ``body`` as Slack would."""
    raw = json.dumps(body)
    return raw, signed_headers(raw, secret, **kw)


# -- the AI-app surface: assistant threads and interactivity ---------------


def assistant_thread_started(
    *, channel: str = "D0DM", thread_ts: str, user: str = "U0USER", viewing: str = "C0CHAN"
) -> dict[str, Any]:
    """The ``assistant_thread_started`` event: the person opened a new chat
    with the app (``viewing``: the channel they were looking at)."""
    return {
        "type": "assistant_thread_started",
        "assistant_thread": {
            "user_id": user,
            "context": {"channel_id": viewing, "team_id": TEAM_ID, "enterprise_id": None},
            "channel_id": channel,
            "thread_ts": thread_ts,
        },
        "event_ts": f"{int(time.time())}.{next(_event_ids):06d}",
    }


def assistant_message(
    text: str, *, thread_ts: str, channel: str = "D0DM", user: str = "U0USER", **extra: Any
) -> dict[str, Any]:
    """A person's message in an assistant thread (a ``message.im`` reply in
    the thread the app's chat started)."""
    return dm_event(text, channel=channel, user=user, thread_ts=thread_ts, **extra)


def feedback_click(
    value: str,
    *,
    message_ts: str,
    thread_ts: str | None,
    channel: str = "D0DM",
    user: str = "U0USER",
    action_id: str = "feedback",
) -> dict[str, Any]:
    """The ``block_actions`` payload Slack sends when a person clicks one of
    a message's feedback buttons (``value``: that button's value)."""
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    message: dict[str, Any] = {
        "type": "message",
        "ts": message_ts,
        "user": BOT_USER_ID,
        "bot_id": BOT_ID,
        "text": "",
    }
    if thread_ts:
        container["thread_ts"] = message["thread_ts"] = thread_ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "someone", "name": "someone", "team_id": TEAM_ID},
        "api_app_id": API_APP_ID,
        "token": "legacy-verification-token",
        "container": container,
        "trigger_id": f"{next(_event_ids)}.trigger",
        "team": {"id": TEAM_ID, "domain": "fake"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "directmessage"},
        "message": message,
        "state": {"values": {}},
        "response_url": "https://hooks.slack.com/actions/T0TEAM/1/fake",
        "actions": [
            {
                "type": "feedback_buttons",
                "action_id": action_id,
                "block_id": "feedback",
                "value": value,
                "action_ts": f"{int(time.time())}.000001",
            }
        ],
    }


def signed_form(
    payload: dict[str, Any], secret: str = SIGNING_SECRET, **kw: Any
) -> tuple[str, dict[str, str]]:
    """``(raw_body, headers)`` for an interaction: Slack posts it form-encoded
    as ``payload=<JSON>``."""
    raw = urlencode({"payload": json.dumps(payload)})
    headers = signed_headers(raw, secret, **kw)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    return raw, headers
