"""Attachments in: declared size and host checked first, streamed with a cap."""

from __future__ import annotations

from dataclasses import dataclass, replace

import aiohttp
import pytest

from adapters.discord.config import DiscordConfig
from adapters.discord.incoming import check_attachments, download, download_each
from core.errors import InputRejected
from tests.adapters.discord.conftest import TEST_CONFIG
from tests.fakes.discord_fake import FakeDiscord
from tests.said import raises_saying


@dataclass
class Att:
    filename: str
    size: int
    url: str
    content_type: str | None = None


def _att(payload: dict[str, object]) -> Att:
    return Att(
        str(payload["filename"]),
        int(payload["size"]),  # type: ignore[call-overload]
        str(payload["url"]),
        payload.get("content_type"),  # type: ignore[arg-type]
    )


def test_only_discord_cdn_over_https_by_default() -> None:
    config = DiscordConfig()
    ok = Att("a.png", 10, "https://cdn.discordapp.com/attachments/1/2/a.png")
    media = Att("a.png", 10, "https://media.discordapp.net/attachments/1/2/a.png")
    assert check_attachments([ok, media], config) is None
    for url in (
        "http://cdn.discordapp.com/a.png",
        "https://evil.example/a.png",
        "https://cdn.discordapp.com.evil.example/a.png",
        "http://127.0.0.1/a.png",
    ):
        assert "CDN" in (check_attachments([Att("a.png", 10, url)], config) or "")


def test_declared_size_and_count_are_checked_before_download() -> None:
    config = replace(TEST_CONFIG, max_attachment_bytes=100)
    url = "http://127.0.0.1/x"
    assert "the limit is 100 bytes" in (check_attachments([Att("big.bin", 101, url)], config) or "")
    many = [Att(f"{i}.txt", 1, url) for i in range(4)]
    assert "at most 3" in (check_attachments(many, config) or "")


async def test_download_reads_the_bytes_and_guesses_the_type(discord_fake: FakeDiscord) -> None:
    payload = discord_fake.attachment("photo.png", b"\x89PNG fake")
    async with aiohttp.ClientSession() as session:
        got = await download(session, _att(payload), TEST_CONFIG)
    assert (got.name, got.mime, got.data) == ("photo.png", "image/png", b"\x89PNG fake")


async def test_a_lying_declared_size_is_cut_by_the_streaming_cap(discord_fake: FakeDiscord) -> None:
    config = replace(TEST_CONFIG, max_attachment_bytes=200_000)
    payload = discord_fake.attachment("x.bin", b"\0" * 500_000, declared_size=10)
    async with aiohttp.ClientSession() as session:
        with raises_saying(InputRejected, r"the limit is 195\.3 KB"):
            await download(session, _att(payload), config)


async def test_too_large_declared_size_is_never_fetched(discord_fake: FakeDiscord) -> None:
    config = replace(TEST_CONFIG, max_attachment_bytes=100)
    payload = discord_fake.attachment("x.bin", b"\0" * 1000)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(InputRejected):
            await download_each(session, [_att(payload)], config)
    assert discord_fake.cdn_requests == []


async def test_missing_file_is_a_user_error(discord_fake: FakeDiscord) -> None:
    payload = discord_fake.attachment("gone.txt", b"x")
    discord_fake.cdn.clear()
    async with aiohttp.ClientSession() as session:
        with raises_saying(InputRejected, "HTTP 404"):
            await download_each(session, [_att(payload)], TEST_CONFIG)
