"""Slack as a :class:`~adapters.chat.surface.Surface`: one thread of a channel
(or a DM), bound once.

The status message is a message in the thread, edited with ``chat.update``
(remembered on the job, so a resumed job or the queue's notice is taken
over); the answer is posted there in mrkdwn, split to Slack's size, with
the files uploaded into the thread (``files_upload_v2``); a private word is
an ephemeral message to the person in the thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat import Limits
from adapters.chat.files import answer_messages
from adapters.slack.config import SlackConfig
from adapters.slack.mrkdwn import MESSAGE_LIMIT, RENDERER
from core.types import AgentAPI, Job, Resource

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
    ) -> None:
        self._agent = agent
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._user = user
        self._job = job
        self._request_id = request_id or (job.request_id if job is not None else "")
        ts = (job.status_ref or {}).get("ts") if job is not None else None
        self.ts: str | None = str(ts) if ts else None
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
        if self._job is not None:
            await self._job.set_status_ref({"ts": self.ts})

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
        # a job resumed after its process died mid-answer posts only the rest.
        step = 0
        done = self._posted()
        for message in messages:
            if message.text:
                step += 1
                if step > done:
                    await self._client.chat_postMessage(
                        channel=self._channel,
                        thread_ts=self._thread_ts,
                        text=message.text,
                        mrkdwn=True,
                        unfurl_links=False,
                        unfurl_media=False,
                    )
                    await self._mark_posted(step)
            if message.files:
                step += 1
                if step <= done:
                    continue
                uploads = [
                    {"filename": f.name, "content": f.data, "title": f.name} for f in message.files
                ]
                await self._client.files_upload_v2(
                    file_uploads=uploads, channel=self._channel, thread_ts=self._thread_ts
                )
                await self._mark_posted(step)
                log.info("slack request %s: uploaded %d files", self._request_id, len(uploads))
        if done:
            log.info(
                "slack request %s: %d of %d answer posts were made before a restart",
                self._request_id,
                min(done, step),
                step,
            )

    def _posted(self) -> int:
        """How many of the answer's posts an earlier attempt of the job made."""
        ref = (self._job.status_ref or {}) if self._job is not None else {}
        posted = ref.get("posted", 0)
        return posted if isinstance(posted, int) else 0

    async def _mark_posted(self, steps: int) -> None:
        if self._job is not None:
            await self._job.set_status_ref({**(self._job.status_ref or {}), "posted": steps})

    async def tell_privately(self, text: str) -> None:
        await self._client.chat_postEphemeral(
            channel=self._channel, user=self._user, thread_ts=self._thread_ts, text=text
        )
