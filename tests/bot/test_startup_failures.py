"""Start-up failures as an operator meets them: ``python -m bot …`` as a real
process against the loopback fakes, with a setting that is wrong.

Each one ends the process with one ``error:`` line on stderr naming the
setting to fix, a non-zero exit code (2 for configuration, 1 otherwise, see
bot/__main__.py) and no traceback; nothing retries forever.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.bot.test_run_discord import bot_env, discord_env
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.hf_fake import FakeHF
from tests.fakes.loopback import free_port
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.process_env import run_bot
from tests.fakes.slack_fake import BOT_TOKEN, SIGNING_SECRET, FakeSlack

APP_TOKEN = "xapp-test-token"


def one_error_line(err: str, *names: str) -> str:
    """The single ``error:`` line, last on stderr, naming every one of ``names``."""
    assert "Traceback" not in err, err
    assert "ExceptionGroup" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert err.strip().splitlines()[-1] == errors[0], err  # nothing logged after it
    for name in names:
        assert name in errors[0], err
    return errors[0]


def slack_env(fake: FakeSlack, **extra: str) -> dict[str, str]:
    """Socket Mode against the fake (SLACK_APP_TOKEN set)."""
    return {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_APP_TOKEN": APP_TOKEN,
        "SLACK_API_URL": fake.base_url,
        **extra,
    }


# -- Discord ---------------------------------------------------------------


async def test_run_discord_with_a_refused_token_is_one_line(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, discord_fake: FakeDiscord
) -> None:
    discord_fake.fail("GET", r"^/users/@me$", 401, times=5)
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake))
    code, _out, err = await run_bot("run", "discord", env=env, cwd=tmp_path)
    assert code == 2, err
    line = one_error_line(err, "DISCORD_BOT_TOKEN", "401")
    assert "discord-test-token" not in line
    assert len(discord_fake.find("GET", r"^/users/@me$")) == 1  # no retry
    assert discord_fake.gateway.sessions == []


async def test_discord_sync_with_a_refused_token_is_one_line(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, discord_fake: FakeDiscord
) -> None:
    discord_fake.fail("GET", r"^/users/@me$", 401, times=5)
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake))
    code, out, err = await run_bot("discord", "sync", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "DISCORD_BOT_TOKEN")
    assert "Synced" not in out
    assert discord_fake.find("PUT", r"/commands$") == []


@pytest.mark.parametrize(
    ("close_code", "names"),
    [
        (4004, ["DISCORD_BOT_TOKEN", "4004"]),
        (4014, ["Privileged Gateway Intents", "4014"]),
        (4011, ["DISCORD_SHARD_COUNT", "4011"]),
    ],
)
async def test_gateway_refusing_the_bot_is_one_line(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    discord_fake: FakeDiscord,
    close_code: int,
    names: list[str],
) -> None:
    """Close codes reconnecting cannot fix (PrivilegedIntentsRequired for 4014)."""
    discord_fake.gateway.identify_close_code = close_code
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake))
    code, _out, err = await run_bot("run", "discord", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, *names)
    assert len(discord_fake.gateway.identifies) == 1  # no reconnect


async def test_dev_guild_the_bot_is_not_in_is_one_line(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, discord_fake: FakeDiscord
) -> None:
    discord_fake.fail("PUT", r"/guilds/\d+/commands$", 403, code=50001)
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake))
    code, _out, err = await run_bot("run", "discord", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "DISCORD_DEV_GUILD_IDS", "403")


# -- Slack -----------------------------------------------------------------


@pytest.mark.parametrize("target", ["slack", "all"])
async def test_slack_without_app_token_or_signing_secret_is_one_line(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, discord_fake: FakeDiscord, target: str
) -> None:
    """Checked before anything starts; with ``run all``, no ExceptionGroup."""
    env = bot_env(
        tmp_path, llm_fake, hf_fake, **discord_env(discord_fake), SLACK_BOT_TOKEN=BOT_TOKEN
    )
    code, _out, err = await run_bot("run", target, env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")
    assert discord_fake.calls == []  # Discord was never started


@pytest.mark.parametrize(
    "error", ["invalid_auth", "not_authed", "account_inactive", "token_revoked"]
)
async def test_slack_refusing_the_bot_token_stops_at_once(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, slack_fake: FakeSlack, error: str
) -> None:
    slack_fake.refuse_token(BOT_TOKEN, error)
    env = bot_env(tmp_path, llm_fake, hf_fake, **slack_env(slack_fake))
    code, _out, err = await run_bot("run", "slack", env=env, cwd=tmp_path)
    assert code == 2, err
    line = one_error_line(err, "SLACK_BOT_TOKEN", error)
    assert BOT_TOKEN not in line
    assert len(slack_fake.calls_to("auth.test")) == 1
    assert slack_fake.calls_to("apps.connections.open") == []  # never got as far as connecting


async def test_slack_refusing_the_bot_token_in_http_mode(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, slack_fake: FakeSlack
) -> None:
    slack_fake.refuse_token(BOT_TOKEN)
    env = bot_env(
        tmp_path,
        llm_fake,
        hf_fake,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_HTTP_PORT=str(free_port()),
        SLACK_API_URL=slack_fake.base_url,
    )
    code, _out, err = await run_bot("run", "slack", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "SLACK_BOT_TOKEN", "invalid_auth")


async def test_slack_http_port_in_use_is_one_line(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, slack_fake: FakeSlack
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = bot_env(
            tmp_path,
            llm_fake,
            hf_fake,
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_HTTP_PORT=str(port),
            SLACK_API_URL=slack_fake.base_url,
        )
        code, _out, err = await run_bot("run", "slack", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "SLACK_HTTP_PORT", str(port))


async def test_slack_refusing_the_app_token_does_not_retry(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, slack_fake: FakeSlack
) -> None:
    """The Socket Mode client's own loop would retry every 10 s, forever."""
    slack_fake.refuse_token(APP_TOKEN)
    env = bot_env(tmp_path, llm_fake, hf_fake, **slack_env(slack_fake))
    code, _out, err = await run_bot("run", "slack", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "SLACK_APP_TOKEN", "invalid_auth")
    assert len(slack_fake.calls_to("apps.connections.open")) == 1


async def test_run_all_stops_both_when_slack_refuses_its_token(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    discord_fake: FakeDiscord,
    slack_fake: FakeSlack,
) -> None:
    slack_fake.refuse_token(BOT_TOKEN)
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake), **slack_env(slack_fake))
    code, _out, err = await run_bot("run", "all", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "SLACK_BOT_TOKEN")
    await discord_fake.gateway.wait_closed()  # Discord, if it got that far, was closed


async def test_run_all_stops_both_when_discord_refuses_its_token(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    discord_fake: FakeDiscord,
    slack_fake: FakeSlack,
) -> None:
    discord_fake.fail("GET", r"^/users/@me$", 401, times=5)
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake), **slack_env(slack_fake))
    code, _out, err = await run_bot("run", "all", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "DISCORD_BOT_TOKEN")


# -- the database and the settings themselves ------------------------------


@pytest.mark.parametrize(
    "command", [["chat"], ["ask", "hello"], ["db", "upgrade"], ["run", "discord"]]
)
async def test_unreachable_database_is_one_line(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    discord_fake: FakeDiscord,
    command: list[str],
) -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/x"  # nothing listens
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake), DATABASE_URL=url)
    code, _out, err = await run_bot(*command, env=env, cwd=tmp_path)
    assert code == 1, err
    one_error_line(err, "DATABASE_URL", "127.0.0.1")
    assert discord_fake.calls == []  # the store opens before any platform


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("not a url", ["DATABASE_URL"]),
        ("postgresql://postgres@127.0.0.1/x", ["DATABASE_URL", "asyncio"]),
        ("mysql+nosuchdriver://u@127.0.0.1/x", ["DATABASE_URL", "not installed"]),
    ],
)
async def test_unusable_database_url_is_one_line(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, url: str, names: list[str]
) -> None:
    env = bot_env(tmp_path, llm_fake, hf_fake, DATABASE_URL=url)
    code, _out, err = await run_bot("chat", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, *names)


async def test_invalid_setting_is_one_line_naming_it(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    env = bot_env(tmp_path, llm_fake, hf_fake, SLACK_HTTP_PORT="three thousand")
    code, _out, err = await run_bot("run", "slack", env=env, cwd=tmp_path)
    assert code == 2, err
    one_error_line(err, "SLACK_HTTP_PORT")
