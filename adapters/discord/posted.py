"""An answer's messages posted once, across a restart.

A job records each answer message the moment Discord returns it; a process
killed between Discord making a message and that record would make the
job's next process post it again.  Two of Discord's own features close that:

* a channel message is sent with a ``nonce`` naming the request and the
  part (:func:`part_nonce`); discord.py sends ``enforce_nonce`` with it, and
  Discord then answers a repeat from the same author within a few minutes
  with the message it already made instead of making another;
* an interaction's follow-up (its webhook takes no nonce) carries
  ``interaction_metadata``: the interaction's id and, on a follow-up, its
  ``original_response_message_id``.  A resumed job reads one page of the
  channel after its last recorded message (:meth:`FollowupLookup.find`) and
  takes a follow-up of its interaction with the part's text and file count
  as made.  That needs the bot to see the channel's history (View Channel
  and Read Message History); where it cannot (a user-installed app, a
  channel it is not in) the part is posted as before, logged once.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection

import discord

log = logging.getLogger(__name__)

NONCE_CHARS = 25  # Discord's limit
PAGE = 100  # messages read per look-up: one call


def part_nonce(request_id: str, part: int) -> str:
    """The nonce of part ``part`` (1-based) of request ``request_id``'s answer."""
    nonce = f"{request_id}.{part}"
    if len(nonce) <= NONCE_CHARS:
        return nonce
    return hashlib.blake2b(nonce.encode(), digest_size=12).hexdigest()  # 24 characters


class FollowupLookup:
    """The look-ups of one process (it says once that it cannot read history)."""

    def __init__(self) -> None:
        self._told = False

    async def find(
        self,
        channel: discord.PartialMessageable,
        *,
        interaction_id: int,
        after: int,
        skip: Collection[int],
        content: str,
        files: int,
    ) -> int | None:
        """The id of a follow-up of ``interaction_id`` made after message
        ``after``, not in ``skip``, with ``content`` and ``files`` attachments;
        None if there is none in the next :data:`PAGE` messages, or the
        channel cannot be read."""
        try:
            async for message in channel.history(limit=PAGE, after=discord.Object(after)):
                meta = message.interaction_metadata
                if (
                    meta is not None
                    and meta.id == interaction_id
                    and meta.original_response_message_id is not None
                    and message.id not in skip
                    and message.content == content
                    and len(message.attachments) == files
                ):
                    return message.id
        except discord.Forbidden as exc:
            self._cannot_read(channel.id, exc)
        except discord.HTTPException as exc:
            log.info("discord: channel %s could not be read back (%s); posting", channel.id, exc)
        return None

    def _cannot_read(self, channel: int, exc: discord.Forbidden) -> None:
        if self._told:
            log.debug("discord: channel %s could not be read back (%s)", channel, exc)
            return
        self._told = True
        log.warning(
            "discord: the bot cannot read the history of channel %s (%s), so a resumed "
            "/ask cannot check which of its answer's messages Discord already has: one "
            "that Discord took just before a crash is posted again. Give the bot View "
            "Channel and Read Message History there.",
            channel,
            exc,
        )
