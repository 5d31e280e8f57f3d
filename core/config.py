"""The agent's knobs (the words a person reads are the adapters': adapters/chat/messages.py).

``bot.app`` builds :class:`AgentConfig` from the settings (``bot.settings``
takes each default from here, so a deployment and a test that builds
``AgentConfig()`` get the same); tests build it directly.  Defaults are what
a laptop deployment wants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.tasks import TaskTimeouts
from core.types import MAX_ATTACHMENT_BYTES


@dataclass(frozen=True, slots=True)
class AgentConfig:
    top_k: int = 5
    selection: str = "llm"  # "llm" | "downloads"
    # Seconds the tasks of a plan that all start at once (no task waits for
    # another) run on their most downloaded model before the LLM is asked to
    # choose: one that finishes sooner keeps its model either way (as a guess
    # that finishes before the choice does), so the call is not made at all.
    # 0: ask at once.
    selection_delay: float = 1.0
    # Local inference calls at once in this process (they share its CPU/GPU);
    # hosted calls are not limited process-wide.
    concurrency: int = 4
    # Tasks of one request running at once (a plan's independent tasks all
    # start together, up to this many).
    max_parallel_tasks: int = 8
    # Model results reused within a conversation (core.result_cache); 0: off.
    result_cache_entries: int = 256
    result_cache_bytes: int = 64 * 1024 * 1024
    task_timeouts: TaskTimeouts = field(default_factory=TaskTimeouts)
    max_tasks: int = 10
    max_attachment_bytes: int = MAX_ATTACHMENT_BYTES
    max_image_pixels: int = 40_000_000
    history_turns: int = 10
    # Files one request may carry (any platform; Discord's /ask has three
    # file options of its own).
    max_attachments: int = 10
    # The quotas (core.ratelimit), kept in the store; 0: no limit.  Requests
    # with ``is_admin`` are exempt.  A "server" is a Discord server, a Slack
    # workspace, or the CLI.
    requests_per_user_per_minute: int = 20
    requests_per_user_per_day: int = 200
    llm_tokens_per_user_per_day: int = 1_000_000
    requests_per_server_per_minute: int = 60
    requests_per_server_per_day: int = 2_000
    llm_tokens_per_server_per_day: int = 10_000_000
    # While one stage waits on the language model, a "still waiting" progress
    # event every this many seconds (0: none).
    llm_wait_notice: float = 10.0
    max_request_chars: int = 20_000
    # Durable turns (core.jobs): requests run at once in this process (the
    # rest wait, in order, in the job table), and the declared upload bytes
    # those may hold between them (None: no byte budget; see
    # MAX_INFLIGHT_UPLOAD_MB in bot.settings for the default's reasons); how
    # long a job's lease lasts without a heartbeat before another process
    # resumes it; how often the queue looks for work other processes left.
    max_inflight_requests: int = 256
    max_inflight_upload_bytes: int | None = 400 * 1024 * 1024
    job_lease_seconds: float = 60.0
    job_poll_seconds: float = 2.0
    # Completion caps per LLM stage (tokens, reasoning included): a model that
    # loops stops here instead of at the timeout; room is left for reasoning.
    # Planning, None: what a plan of max_tasks tasks needs (about 70 tokens a
    # task, the request's length, and room to think for a model that
    # reasons: core.plan_schema.planning_token_cap), so a slow server that
    # loops is stopped within a minute rather than four.
    planning_max_tokens: int | None = None
    selection_max_tokens: int = 1024
    answer_max_tokens: int = 4096
