"""Slack as a :class:`~adapters.chat.surface.Surface`: one thread of a channel
(or a DM), bound once.

The status message is a message in the thread, edited with ``chat.update``
(remembered on the job, so a resumed job or the queue's notice is taken
over); the answer is posted there in mrkdwn, split to Slack's size, with
the files uploaded into the thread (Slack's three upload steps); a private
word is an ephemeral message to the person in the thread.

Each answer post is recorded on the job the moment Slack confirms it, and
carries message metadata naming the job and the part; a resumed job looks
its first unrecorded post up before making it (:mod:`adapters.slack.posted`),
so a post Slack took just before the process died is not made twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat import Limits, OutFile
from adapters.chat.at_once import at_once
from adapters.chat.files import answer_messages
from adapters.slack.config import SlackConfig
from adapters.slack.mrkdwn import MESSAGE_LIMIT, RENDERER
from adapters.slack.posted import PostLookup, part_metadata
from core.types import AgentAPI, Job, Posted, Resource, Uploading

log = logging.getLogger(__name__)

FILES_PER_MESSAGE = 10


class SlackSurface:
    def __init__(
        self,
        agent: AgentAPI,
        client: AsyncWebClient,
        config: SlackConfig,
        *,
        channel: str,
        thread_ts: str | None,
        user: str,
        job: Job | None = None,
        request_id: str = "",
        lookup: PostLookup | None = None,
    ) -> None:
        self._agent = agent
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._user = user
        self._job = job
        self._lookup = lookup or PostLookup()
        self._request_id = request_id or (job.request_id if job is not None else "")
        self.ts: str | None = Posted.of(job).ts or None
        self._limits = Limits(
            MESSAGE_LIMIT, config.max_upload_bytes, FILES_PER_MESSAGE, config.status_interval
        )

    @property
    def limits(self) -> Limits:
        return self._limits

    async def post_status(self, text: str) -> None:
        if self.ts is not None:  # the queue's notice, or the status a stopped process left
            await self.edit_status(text)
            return
        response = await self._client.chat_postMessage(
            channel=self._channel, thread_ts=self._thread_ts, text=text, unfurl_links=False
        )
        self.ts = str(response["ts"])
        await Posted(ts=self.ts).save(self._job)

    async def edit_status(self, text: str) -> None:
        if self.ts is None:
            await self.post_status(text)
            return
        await self._client.chat_update(channel=self._channel, ts=self.ts, text=text)

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        messages = await answer_messages(
            self._agent, RENDERER, text, files, self.limits, self._request_id
        )
        # Each post is one step, recorded on the job as soon as Slack has it:
        # a job resumed after its process died mid-answer posts only the rest,
        # and first looks up the one step Slack may have taken unrecorded.
        step = 0
        done = self._posted()
        for message in messages:
            if message.text:
                step += 1
                if step > done:
                    await self._post_text(step, message.text, first=step == done + 1)
            if message.files:
                step += 1
                if step > done:
                    await self._upload(step, message.files, first=step == done + 1)
        if done:
            log.info(
                "slack request %s: %d of %d answer posts were made before a restart",
                self._request_id,
                min(done, step),
                step,
            )

    async def _post_text(self, step: int, text: str, *, first: bool) -> None:
        job = self._job
        if first and job is not None and job.resumed:
            oldest = self.ts or str(job.payload.get("ts") or "") or None
            ts = await self._lookup.find_part(
                self._client,
                channel=self._channel,
                thread_ts=self._thread_ts,
                oldest=oldest,
                job=job.id,
                part=step,
            )
            if ts is not None:
                log.info(
                    "slack request %s: answer post %d was made before a restart (%s)",
                    self._request_id,
                    step,
                    ts,
                )
                await self._mark_posted(step)
                return
        await self._client.chat_postMessage(
            channel=self._channel,
            thread_ts=self._thread_ts,
            text=text,
            mrkdwn=True,
            unfurl_links=False,
            unfurl_media=False,
            metadata=part_metadata(job.id, step) if job is not None else None,
        )
        await self._mark_posted(step)

    async def _upload(self, step: int, files: Sequence[OutFile], *, first: bool) -> None:
        """Upload ``files`` into the thread in Slack's three steps, the
        files' ids recorded on the job before the upload is completed: a
        resumed job finds out whether that upload was shared, and if not
        deletes its files (a share still on its way goes with them) and
        uploads anew."""
        earlier = Posted.of(self._job).uploading
        if first and earlier is not None and earlier.step == step:
            ids = earlier.files
            if ids and await self._lookup.shared(
                self._client, file_id=ids[0], channel=self._channel
            ):
                log.info(
                    "slack request %s: upload %d was made before a restart",
                    self._request_id,
                    step,
                )
                await self._mark_posted(step)
                return
            for file_id in ids:
                await self._delete_file(file_id)
        # Each file's URL, then each file's bytes, all files at once: one
        # round trip to Slack and one to its upload host for the lot, not one
        # each per file (a picture of each of 6 tasks: 12 round trips less).
        got = await at_once(
            [self._client.files_getUploadURLExternal(filename=f.name, length=f.size) for f in files]
        )
        targets = [(str(g["file_id"]), str(g["upload_url"])) for g in got]
        ids = [file_id for file_id, _ in targets]
        uploading = Uploading(step=step, files=ids)
        await Posted.of(self._job).model_copy(update={"uploading": uploading}).save(self._job)
        timeout = aiohttp.ClientTimeout(total=self._client.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await at_once(
                [
                    self._send_bytes(session, url, f)
                    for (_, url), f in zip(targets, files, strict=True)
                ]
            )
        await self._client.files_completeUploadExternal(
            files=[
                {"id": file_id, "title": f.name}
                for (file_id, _), f in zip(targets, files, strict=True)
            ],
            channel_id=self._channel,
            thread_ts=self._thread_ts,
        )
        await self._mark_posted(step)
        log.info("slack request %s: uploaded %d files", self._request_id, len(files))

    async def _send_bytes(self, session: aiohttp.ClientSession, url: str, file: OutFile) -> None:
        """Step 2 of an upload: the bytes, to the URL Slack handed out for them."""
        tls: dict[str, Any] = {"ssl": self._client.ssl} if self._client.ssl is not None else {}
        async with session.post(url, data=file.data, proxy=self._client.proxy, **tls) as response:
            body = await response.text()
            if response.status != 200:
                raise SlackRequestError(
                    f"Slack refused the upload of {file.name} ({response.status}: {body[:200]})"
                )

    async def _delete_file(self, file_id: str) -> None:
        """Remove an upload a stopped process left unrecorded (best effort)."""
        try:
            await self._client.files_delete(file=file_id)
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as e:
            log.info("slack request %s: file %s not deleted (%s)", self._request_id, file_id, e)

    def _posted(self) -> int:
        """How many of the answer's posts an earlier attempt of the job made."""
        return Posted.of(self._job).posted

    async def _mark_posted(self, steps: int) -> None:
        ref = Posted.of(self._job).model_copy(update={"uploading": None, "posted": steps})
        await ref.save(self._job)

    async def tell_privately(self, text: str) -> None:
        await self._client.chat_postEphemeral(
            channel=self._channel, user=self._user, thread_ts=self._thread_ts, text=text
        )
