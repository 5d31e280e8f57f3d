"""Slack ack latency while the LLM is slow.

Slack redelivers an event whose HTTP answer takes more than 3 s, so the ack
must never wait on the agent.  This posts signed ``app_mention`` events to
the real Bolt app (HTTP mode) in front of the real Agent, while the LLM fake
takes ``--delay`` seconds per call, and prints the ack latency (target: p95
under 100 ms) and how long the answers themselves took.

    python benchmarks/slack_ack.py [--events 20] [--delay 2.0]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.slack import SlackConfig, build_app, serve_http
from tests.fakes.agent_fixture import open_agent_env
from tests.fakes.hf_fake import make_hf_fake
from tests.fakes.openai_fake import make_llm_fake
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    event_body,
    make_slack_fake,
    mention_event,
    signed_request,
)

TARGET_MS = 100.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(events: int, delay: float, gap: float) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            make_llm_fake() as llm,
            make_hf_fake() as hf,
            make_slack_fake() as slack,
            open_agent_env(Path(tmp), llm, hf) as env,
            aiohttp.ClientSession() as session,
        ):
            llm.delay = delay
            config = SlackConfig(
                bot_token=BOT_TOKEN,
                signing_secret=SIGNING_SECRET,
                http_port=0,
                api_url=slack.base_url,
            )
            runner = await serve_http(build_app(env.agent, config), config, host="127.0.0.1")
            url = f"http://127.0.0.1:{runner.addresses[0][1]}{config.http_path}"
            try:
                acks: list[float] = []
                started = time.monotonic()
                for i in range(events):
                    raw, headers = signed_request(
                        event_body(mention_event(f"question {i}", channel=f"C{i:04d}"))
                    )
                    t0 = time.perf_counter()
                    async with session.post(url, data=raw, headers=headers) as response:
                        await response.read()
                        assert response.status == 200, response.status
                    acks.append((time.perf_counter() - t0) * 1000)
                    await asyncio.sleep(gap)  # events arrive spread out, as in a team
                finals = await slack.wait_for(
                    "chat.update",
                    count=events,
                    where=lambda c: str(c.args.get("text")).startswith(("✅", "❌")),
                    within=60 + events * delay * 3,
                )
                total = time.monotonic() - started
            finally:
                await runner.cleanup()

    ok = sum(1 for c in finals if str(c.args["text"]).startswith("✅"))
    p95 = percentile(acks, 0.95)
    print(f"slack ack latency over {events} events, LLM delay {delay:.1f} s per call")
    print(f"  median {statistics.median(acks):6.1f} ms")
    print(f"  p95    {p95:6.1f} ms   (target < {TARGET_MS:.0f} ms)")
    print(f"  max    {max(acks):6.1f} ms")
    print(f"  answers: {ok}/{events} succeeded, all done {total:.1f} s after the first event")
    print(f"  LLM calls: {len(llm.calls())}")
    return 0 if p95 < TARGET_MS and ok == events else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--delay", type=float, default=2.0, help="LLM fake seconds per call")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between events")
    args = parser.parse_args()
    return asyncio.run(run(args.events, args.delay, args.gap))


if __name__ == "__main__":
    raise SystemExit(main())
