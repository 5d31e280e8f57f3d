"""Slack file downloads follow redirects only to Slack's own hosts.

The fake Slack answers a file URL with ``302 Found``: to another of its own
paths (followed, with the token), or to a server on another loopback address
or port (refused before anything is sent there)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from adapters.slack.config import SlackConfig
from adapters.slack.files import MAX_REDIRECTS, download_files, may_follow
from core.errors import InputRejected
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import BOT_TOKEN, FakeSlack
from tests.said import raises_saying


@pytest.fixture
def config(slack_fake: FakeSlack) -> SlackConfig:
    return SlackConfig(bot_token=BOT_TOKEN, api_url=slack_fake.base_url, max_file_bytes=100_000)


class Elsewhere:
    """A server on another host that records what reaches it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(dict(request.headers))
        return web.Response(body=sample_png(), content_type="image/png")


async def _elsewhere(host: str) -> AsyncIterator[Elsewhere]:
    other = Elsewhere()
    app = web.Application()
    app.router.add_get("/{tail:.*}", other.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, 0).start()
        other.url = f"http://{host}:{runner.addresses[0][1]}"
        yield other
    finally:
        await runner.cleanup()


@pytest.fixture
async def other_host() -> AsyncIterator[Elsewhere]:
    async for other in _elsewhere("127.0.0.2"):
        yield other


@pytest.fixture
async def other_port() -> AsyncIterator[Elsewhere]:
    async for other in _elsewhere("127.0.0.1"):
        yield other


async def test_a_redirect_within_slack_is_followed_with_the_token(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    real = slack_fake.add_file("cat.png", sample_png())
    moved = slack_fake.add_file("cat.png", b"", redirect=real["url_private"])
    (got,) = await download_files([moved], config)
    assert (got.mime, got.data) == ("image/png", sample_png())
    assert [d["authorization"] for d in slack_fake.downloads] == [f"Bearer {BOT_TOKEN}"] * 2


async def test_a_relative_redirect_stays_on_slack(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    real = slack_fake.add_file("cat.png", sample_png())
    path = real["url_private"].removeprefix(slack_fake.root)
    moved = slack_fake.add_file("cat.png", b"", redirect=path)
    (got,) = await download_files([moved], config)
    assert got.data == sample_png()


async def test_a_redirect_to_another_host_is_refused_and_nothing_is_sent_there(
    slack_fake: FakeSlack, config: SlackConfig, other_host: Elsewhere
) -> None:
    moved = slack_fake.add_file("cat.png", b"", redirect=f"{other_host.url}/steal/cat.png")
    with raises_saying(InputRejected, r"cat\.png .*another host \(127\.0\.0\.2\)"):
        await download_files([moved], config)
    assert other_host.requests == []


async def test_a_redirect_to_another_port_of_the_same_address_is_refused(
    slack_fake: FakeSlack, config: SlackConfig, other_port: Elsewhere
) -> None:
    moved = slack_fake.add_file("cat.png", b"", redirect=f"{other_port.url}/cat.png")
    with raises_saying(InputRejected, "another host"):
        await download_files([moved], config)
    assert other_port.requests == []


async def test_a_redirect_loop_ends(slack_fake: FakeSlack, config: SlackConfig) -> None:
    looping = slack_fake.add_file("cat.png", b"")
    # Point the file at itself: it redirects forever.
    slack_fake._files[looping["id"]].redirect = looping["url_private"]
    with raises_saying(InputRejected, "too many redirects"):
        await download_files([looping], config)
    assert len(slack_fake.downloads) == MAX_REDIRECTS + 1


def test_only_slack_hosts_may_be_redirected_to() -> None:
    config = SlackConfig(bot_token="xoxb-1", api_url="http://127.0.0.1:8080/api/")
    assert may_follow("https://files.slack.com/files-pri/T-F/x.png", config)
    assert may_follow("https://acme.slack.com/files/x.png", config)
    assert may_follow("https://a.slack-edge.com/x.png", config)
    assert may_follow("http://127.0.0.1:8080/files-pri/x.png", config)  # the configured API
    assert not may_follow("http://127.0.0.1:8081/x.png", config)
    assert not may_follow("http://127.0.0.2:8080/x.png", config)
    assert not may_follow("http://files.slack.com/x.png", config)  # not over HTTPS
    assert not may_follow("https://files.slack.com.evil.example/x.png", config)
    assert not may_follow("https://evil-slack-edge.com/x.png", config)
    assert not may_follow("https://example.com/x.png", config)
