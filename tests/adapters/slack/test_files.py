"""Downloading shared files from the fake Slack: token, caps, content check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapters.slack.config import SlackConfig
from adapters.slack.files import download_files as download
from core.errors import InputRejected
from core.mediatypes import sniff
from tests.fakes.samples import sample_png, sample_wav
from tests.fakes.slack_fake import BOT_TOKEN, FakeSlack
from tests.said import raises_saying


def mime_of(data: bytes) -> str | None:
    found = sniff(data)
    return found.mime if found is not None else None


async def download_files(files: list[dict[str, object]], config: SlackConfig) -> tuple[object, ...]:
    return await download(files, config, mime_of)


@pytest.fixture
def config(slack_fake: FakeSlack) -> SlackConfig:
    return SlackConfig(bot_token=BOT_TOKEN, api_url=slack_fake.base_url, max_file_bytes=100_000)


async def test_files_are_fetched_with_the_bot_token_and_typed_by_content(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    png = slack_fake.add_file("photo.png", sample_png())
    # Slack's declared type is only a hint: the bytes decide.
    wav = slack_fake.add_file("voice.bin", sample_wav(), mimetype="application/octet-stream")
    notes = slack_fake.add_file("notes.csv", b"a,b\n1,2\n", mimetype="text/csv")

    got = await download_files([png, wav, notes], config)

    assert [(a.name, a.mime) for a in got] == [
        ("photo.png", "image/png"),
        ("voice.bin", "audio/wav"),
        ("notes.csv", "text/csv"),
    ]
    assert got[0].data == sample_png() and got[1].data == sample_wav()
    assert {d["authorization"] for d in slack_fake.downloads} == {f"Bearer {BOT_TOKEN}"}


async def test_login_page_instead_of_the_file_says_how_to_fix_it(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    shared = slack_fake.add_file("cat.png", sample_png(), login_page=True)
    with raises_saying(InputRejected, r"web page instead of cat\.png.*files:read"):
        await download_files([shared], config)


async def test_html_bytes_served_under_an_image_type_are_refused(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    page = b"<!doctype html><html><body>Sign in</body></html>"
    shared = slack_fake.add_file("cat.png", page, served_type="image/png")
    with raises_saying(InputRejected, r"web page instead of cat\.png"):
        await download_files([shared], config)


async def test_a_real_html_file_is_accepted(slack_fake: FakeSlack, config: SlackConfig) -> None:
    page = b"<!DOCTYPE html><html><body>my page</body></html>"
    shared = slack_fake.add_file("page.html", page, mimetype="text/html")
    (got,) = await download_files([shared], config)
    assert (got.mime, got.data) == ("text/html", page)


async def test_declared_size_over_the_cap_is_refused_before_downloading(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    shared = slack_fake.add_file("big.png", sample_png(), size=5_000_000)
    with raises_saying(InputRejected, r"big\.png is 4\.8 MB; the limit is 97\.7 KB"):
        await download_files([shared], config)
    assert slack_fake.downloads == []


async def test_content_length_over_the_cap_is_refused(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    shared = slack_fake.add_file("liar.png", b"\x89PNG" + b"\0" * 50_000, size=10)
    with raises_saying(InputRejected, r"liar\.png is 48\.8 KB"):
        await download_files([shared], replace(config, max_file_bytes=20_000))


async def test_a_stream_without_length_is_cut_off_at_the_cap(
    slack_fake: FakeSlack, config: SlackConfig
) -> None:
    shared = slack_fake.add_file("liar.png", b"\x89PNG" + b"\0" * 50_000, size=10, chunked=True)
    with raises_saying(InputRejected, r"liar\.png is larger than the limit of 19\.5 KB"):
        await download_files([shared], replace(config, max_file_bytes=20_000))


async def test_the_token_is_never_sent_to_other_hosts(config: SlackConfig) -> None:
    foreign = {
        "id": "F1",
        "name": "x.png",
        "mimetype": "image/png",
        "size": 10,
        "url_private": "https://evil.example/steal.png",
    }
    with raises_saying(InputRejected, "not hosted by Slack"):
        await download_files([foreign], config)


def test_only_slack_hosts_and_the_configured_api_get_the_token() -> None:
    plain = SlackConfig(bot_token="x")
    assert plain.may_send_token_to("https://files.slack.com/files-pri/T-F/x.png")
    assert not plain.may_send_token_to("http://files.slack.com/files-pri/T-F/x.png")
    assert not plain.may_send_token_to("https://files.slack.com.evil.test/x.png")
    proxied = SlackConfig(bot_token="x", api_url="http://127.0.0.1:9999/api/")
    assert proxied.may_send_token_to("http://127.0.0.1:9999/files-pri/x.png")
    assert not proxied.may_send_token_to("http://127.0.0.1:8888/files-pri/x.png")
