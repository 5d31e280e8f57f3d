"""Discord defer latency while the LLM is slow.

Discord answers ``10062 Unknown interaction`` to a slash command that was not
acknowledged within 3 s, so the defer must never wait on the agent.  This
feeds ``/ask`` INTERACTION_CREATE payloads to the real discord.py client
(through the gateway's own ``parse_interaction_create``) in front of the real
Agent, while the LLM fake takes ``--delay`` seconds per call and earlier
requests are still running, and prints the time from the interaction
arriving to the defer callback reaching the fake Discord server (target:
median under 100 ms), plus how long the answers took.

    python benchmarks/discord_defer.py [--interactions 20] [--delay 2.0]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.discord import DiscordBot, DiscordConfig
from tests.fakes.agent_fixture import open_agent_env
from tests.fakes.discord_fake import make_discord_fake
from tests.fakes.hf_fake import make_hf_fake
from tests.fakes.openai_fake import make_llm_fake

TARGET_MS = 100.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(count: int, delay: float) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            make_llm_fake() as llm,
            make_hf_fake() as hf,
            make_discord_fake() as fake,
            open_agent_env(Path(tmp), llm, hf) as env,
        ):
            llm.delay = delay
            config = DiscordConfig(status_interval=1.0)
            async with DiscordBot(env.agent, config) as bot:
                await bot.login("benchmark-token")
                defers: list[float] = []
                started = time.monotonic()
                tokens = []
                for i in range(count):
                    # one channel each, so the agent really runs them side by side
                    channel = fake.text_channel(fake.next_id())
                    payload = fake.interaction("ask", {"prompt": f"question {i}"}, channel=channel)
                    t0 = time.monotonic()
                    bot._connection.parse_interaction_create(payload)  # type: ignore[arg-type]
                    [callback] = await fake.wait_for("POST", rf"^/interactions/{payload['id']}/")
                    defers.append((callback.at - t0) * 1000)
                    tokens.append(payload["token"])
                # every answer arrives, long after its defer
                for token in tokens:
                    await fake.wait_for("POST", rf"^/webhooks/\d+/{token}$", within=delay * 10 + 30)
                total = time.monotonic() - started

    median, p95 = statistics.median(defers), percentile(defers, 0.95)
    print(f"interactions: {count}, LLM delay: {delay:.1f} s per call")
    print(
        f"defer latency ms: median {median:.1f}, p95 {p95:.1f}, "
        f"min {min(defers):.1f}, max {max(defers):.1f}"
    )
    print(f"all {count} answers posted after {total:.1f} s")
    assert median < TARGET_MS, f"median defer {median:.1f} ms ≥ {TARGET_MS} ms"
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interactions", type=int, default=20)
    parser.add_argument("--delay", type=float, default=2.0)
    args = parser.parse_args()
    return asyncio.run(run(args.interactions, args.delay))


if __name__ == "__main__":
    sys.exit(main())
