"""Finding an answer post Slack already has, when a job is resumed.

A job records each answer post the moment Slack confirms it; a process killed
between Slack taking a post and that record would make the job's next process
post it again.  So every answer message carries message metadata naming the
job and the part (``event_type`` :data:`EVENT_TYPE`), and a resumed job looks
its first unrecorded part up before posting it: one or two pages of the
thread (``conversations.replies``) or of the channel
(``conversations.history``) since the status message, read with
``include_all_metadata``.  File uploads carry no metadata: the surface records
the upload's file ids before completing it, and a resumed job asks
``files.info`` whether those files were shared into the channel.

Reading the conversation needs the app's ``*:history`` scope for that kind of
conversation; without it (or on any other failure) the part is posted as
before (it may then appear twice), and a missing scope is logged once per
process and scope.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

EVENT_TYPE = "hugginggpt_answer"
PAGE = 100  # messages per look-up call
PAGES = 2  # at most this many calls per look-up


def part_metadata(job: int, part: int) -> dict[str, Any]:
    """The message metadata of part ``part`` (1-based) of job ``job``'s answer."""
    return {"event_type": EVENT_TYPE, "event_payload": {"job": job, "part": part}}


def is_part(message: Mapping[str, Any], job: int, part: int) -> bool:
    """``message`` (as the history methods return it) is that part."""
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping) or metadata.get("event_type") != EVENT_TYPE:
        return False
    payload = metadata.get("event_payload")
    if not isinstance(payload, Mapping):
        return False
    return str(payload.get("job")) == str(job) and str(payload.get("part")) == str(part)


def _error(e: SlackApiError) -> str:
    return str(e.response.get("error") or "") if e.response is not None else ""


class PostLookup:
    """The look-ups of one process (it remembers which scopes it found missing,
    to say so once)."""

    def __init__(self) -> None:
        self._missing: set[str] = set()

    async def find_part(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str | None,
        oldest: str | None,
        job: int,
        part: int,
    ) -> str | None:
        """The ts of the message that is part ``part`` of ``job``'s answer, if
        Slack has it (posted after ``oldest``); None if not, or if the
        conversation cannot be read."""
        cursor: str | None = None
        for _ in range(PAGES):
            try:
                if thread_ts is not None:
                    page = await client.conversations_replies(
                        channel=channel,
                        ts=thread_ts,
                        oldest=oldest,
                        include_all_metadata=True,
                        limit=PAGE,
                        cursor=cursor,
                    )
                else:
                    page = await client.conversations_history(
                        channel=channel,
                        oldest=oldest,
                        include_all_metadata=True,
                        limit=PAGE,
                        cursor=cursor,
                    )
            except SlackApiError as e:
                self._unreadable(channel, e)
                return None
            except (aiohttp.ClientError, TimeoutError) as e:
                log.info("slack: %s could not be read back (%s); posting", channel, e)
                return None
            for message in page.get("messages") or ():
                if isinstance(message, Mapping) and is_part(message, job, part):
                    return str(message.get("ts"))
            meta = page.get("response_metadata")
            cursor = meta.get("next_cursor") if isinstance(meta, Mapping) else None
            if not cursor:
                return None
        return None

    def _unreadable(self, channel: str, e: SlackApiError) -> None:
        error = _error(e)
        if error != "missing_scope":
            log.info("slack: %s could not be read back (%s); posting", channel, error)
            return
        needed = str(e.response.get("needed") or "a *:history scope")
        if needed in self._missing:
            log.debug("slack: %s could not be read back (missing %s)", channel, needed)
            return
        self._missing.add(needed)
        log.warning(
            "slack: the app lacks the %s scope, so a resumed request cannot check which "
            "of its answer's posts Slack already has: one that Slack took just before a "
            "crash is posted again. Add the scope (adapters/slack_manifest.yaml) and "
            "reinstall the app.",
            needed,
        )

    async def shared(self, client: AsyncWebClient, *, file_id: str, channel: str) -> bool:
        """Whether the file ``file_id`` (an upload of ours) is shared into
        ``channel`` (``files.info``: its public or private shares)."""
        try:
            info = await client.files_info(file=file_id)
        except SlackApiError as e:
            log.info("slack: file %s: %s; uploading it again", file_id, _error(e))
            return False
        except (aiohttp.ClientError, TimeoutError) as e:
            log.info("slack: file %s could not be checked (%s); uploading it again", file_id, e)
            return False
        file = info.get("file")
        shares = file.get("shares") if isinstance(file, Mapping) else None
        if not isinstance(shares, Mapping):
            return False
        return any(
            isinstance(where, Mapping) and channel in where
            for where in (shares.get("public"), shares.get("private"))
        )
