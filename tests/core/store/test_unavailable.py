"""A database that is not there surfaces as StoreUnavailable, quickly."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import StoreUnavailable
from core.store import Repo
from tests.core.store.builders import CHANNEL, turn


async def test_every_call_says_store_unavailable(dead_repo: Repo) -> None:
    async with asyncio.timeout(10):
        assert not await dead_repo.db.ping()
        with pytest.raises(StoreUnavailable):
            await dead_repo.db.upgrade()
        with pytest.raises(StoreUnavailable, match="load the conversation history"):
            await dead_repo.load_history(CHANNEL)
        with pytest.raises(StoreUnavailable, match="save the turn"):
            await dead_repo.save_turn(turn(CHANNEL, "q", "a"))
        with pytest.raises(StoreUnavailable):
            await dead_repo.forget(CHANNEL)
        with pytest.raises(StoreUnavailable):
            await dead_repo.claim_event("slack", "E1")
        with pytest.raises(StoreUnavailable):
            await dead_repo.taken_handles(CHANNEL)
