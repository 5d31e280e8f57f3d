"""The providers path on the user's path: a three-step chain ``ask`` with only
``HF_TOKEN``, against the loopback emulation of the 2026 service
(``tests/fakes/hf_service.py``: Hub API + router + each provider's own
protocol), with a round trip's delay on every Hub model request.

``python -m benchmarks.providers_chain [--reps N] [--hub-delay S] [--model-delay S]``

Each sample is a fresh ``python -m bot ask TEXT --json`` process (no worker:
the client's look-up caches are empty, as on every ``ask``), its plan
text-to-image → image-to-text → text-to-speech (then a two-step
summarization → text-to-speech chain, summarization on hf-inference, whose
client asks the Hub twice), scripted into the router's chat answers, the
models the shipped catalog's first (``MODEL_SELECTION=downloads``).  Two
variants, alternated sample by sample:

* ``ahead``: the bot as it is: each task's Hub look-ups start when the plan
  is known (core.experts.providers ``look_up_ahead``), an hf-inference
  model's two look-ups at once;
* ``inline``: the same process with those two switched off (each task looks
  its model up when it starts, one Hub request after the other: the bot
  before them).

Printed per variant (medians): the agent's own total (``timings.total``),
the process's wall time, and the hop gaps on the router's clock: for each
step after the first, its model call's start minus the previous step's end
(the Hub requests a step waits for are in it), and the first step's start
minus the planning call's end; and the providers the model calls ran on and
the TCP connections to the router the ask's calls came on, the LLM's and
the models' (``conns``: each a TCP and TLS handshake on the real service).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.hf_service import FakeHFService, make_hf_service  # noqa: E402
from tests.fakes.hf_service_outputs import default_chat_reply  # noqa: E402
from tests.fakes.openai_fake import stage_of  # noqa: E402

TOKEN = "hf_test_token"
CHAINS: dict[str, list[dict[str, Any]]] = {
    "t2i→i2t→tts": [
        {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a red fox on a hill"}},
        {"task": "image-to-text", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
        {"task": "text-to-speech", "id": 2, "dep": [1], "args": {"text": "<resource>-1"}},
    ],
    "summ→tts": [
        {
            "task": "summarization",
            "id": 0,
            "dep": [-1],
            "args": {"text": "The council met on Tuesday and agreed to extend the cycling lanes."},
        },
        {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}},
    ],
}
# Both variants start the same way (the same modules imported before the
# bot's main, so the processes' wall times compare); "inline" then switches
# the look-ups ahead and the joint hf-inference look-ups off.
START = (
    "import sys\n"
    "from core.experts.providers import ProviderDirectory\n"
    "from core.experts.remote import RemoteExpert\n"
    "if sys.argv[1] == 'inline':\n"
    "    RemoteExpert.look_up_ahead = lambda self, task, model: None\n"
    "    ProviderDirectory.start = lambda self, *a, **k: None\n"
    "del sys.argv[1]\n"
    "from bot.__main__ import main\n"
    "sys.exit(main())\n"
)


class Controller:
    """The router's chat answers: the scripted plan, then the final answer;
    the models' own chat calls (image-to-text) get the service's default."""

    def __init__(self) -> None:
        self.plan = "[]"
        self.plan_ends: list[float] = []

    def __call__(self, body: dict[str, Any]) -> str:
        stage = stage_of(body)
        if stage == "plan":
            self.plan_ends.append(time.monotonic())
            return self.plan
        if stage == "select":
            return "{}"
        if stage == "answer":
            return "Here is what the models made."
        return default_chat_reply(body)


def bot_env(svc: FakeHFService, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "OPENAI_"))}
    env.update(
        HF_TOKEN=TOKEN,
        HF_ROUTER_URL=svc.router_url,
        HF_ENDPOINT=svc.hub_url,
        HF_HUB_DISABLE_TELEMETRY="1",
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'bot.db'}",
        MEDIA_DIR=str(tmp / "media"),
        DATA_DIR=str(tmp / "data"),
        CLI_SOCKET=str(tmp / "no-worker.sock"),
        CLI_WORKER_START="never",
        INFERENCE_MODE="remote",
        MODEL_SELECTION="downloads",
        PYTHONPATH=str(ROOT),
        REQUESTS_PER_USER_PER_MINUTE="0",
        REQUESTS_PER_SERVER_PER_MINUTE="0",
    )
    return env


async def one(
    svc: FakeHFService, ctl: Controller, tmp: Path, variant: str, tag: str
) -> dict[str, Any]:
    first_call = len(svc.calls)
    cmd = [
        sys.executable,
        "-c",
        START,
        variant,
        "ask",
        "please do the chain",
        "--json",
        "--conversation",
        tag,
    ]
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        env=bot_env(svc, tmp),
        cwd=tmp,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    wall = time.perf_counter() - t0
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{variant}: exit {proc.returncode}: {err.decode()[-600:]}")
    reply = json.loads(lines[-1])
    bad = [t for t in reply.get("tasks", []) if t.get("status") != "done"]
    if reply.get("status") != "answered" or bad:
        raise RuntimeError(f"{variant}: {json.dumps(reply)[:600]}")
    steps = [c for c in svc.calls[first_call:] if c.kind == "inference" and c.hub_id]
    models = [c for c in steps if not _is_controller(c)]
    gaps = [b.time - a.t_end for a, b in itertools.pairwise(models)]
    first = models[0].time - ctl.plan_ends[-1] if models and ctl.plan_ends else float("nan")
    return {
        "total": float((reply.get("timings") or {}).get("total", float("nan"))),
        "wall": wall,
        "first": first,
        "gaps": gaps,
        "providers": len({c.provider for c in models}),
        "connections": len({c.peer for c in steps}),
    }


def _is_controller(call: Any) -> bool:
    """A chat call of the controller (plan, answer), not a model's."""
    if call.path != "/v1/chat/completions" or not isinstance(call.json, dict):
        return False
    return stage_of(call.json) != "other"


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hub-delay", type=float, default=0.1)
    ap.add_argument("--model-delay", type=float, default=0.2)
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1 and 5 min)")
    async with make_hf_service(facts=True) as svc:
        svc.hub_delay = args.hub_delay
        ctl = Controller()
        svc.chat_reply = ctl
        with tempfile.TemporaryDirectory(prefix="providers-chain-") as d:
            tmp = Path(d)
            for name, plan in CHAINS.items():
                ctl.plan = json.dumps(plan)
                results: dict[str, list[dict[str, Any]]] = {"inline": [], "ahead": []}
                for i in range(args.reps):
                    order = ("inline", "ahead") if i % 2 == 0 else ("ahead", "inline")
                    for variant in order:
                        for model in list(svc.models):
                            svc.delay(model, args.model_delay)
                        results[variant].append(await one(svc, ctl, tmp, variant, f"{name}{i}"))
                print(
                    f"\n{name}: Hub {args.hub_delay * 1000:.0f} ms per request, "
                    f"models {args.model_delay * 1000:.0f} ms, {args.reps} asks each "
                    "(medians, ms)"
                )
                print(
                    f"  {'variant':8} {'total':>7} {'wall':>7} {'plan→1st':>9} "
                    f"{'providers':>9} {'conns':>5}  gaps between steps"
                )
                for variant, rows in results.items():
                    steps = len(rows[0]["gaps"])
                    gaps = [med([r["gaps"][k] for r in rows]) * 1000 for k in range(steps)]
                    print(
                        f"  {variant:8} {med([r['total'] for r in rows]) * 1000:7.0f} "
                        f"{med([r['wall'] for r in rows]) * 1000:7.0f} "
                        f"{med([r['first'] for r in rows]) * 1000:9.0f} "
                        f"{med([r['providers'] for r in rows]):9.0f} "
                        f"{med([r['connections'] for r in rows]):5.0f}  "
                        + " ".join(f"{g:6.0f}" for g in gaps)
                    )
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
