"""The process's worker threads: one place for its pools.

Three kinds of blocking work leave the event loop, and each has threads of
its own so that one kind cannot hold up another:

* :data:`WORK_THREADS` – the bot's own CPU and disk work (decoding and
  checking uploads and outputs, drawing boxes and masks, re-encoding audio
  and video, hashing, the media store's files, local models).  Sized as
  the loop's default executor was (``min(32, cores + 4)``), so as much
  decoding runs at once, and takes as much memory, as before (uploads are
  admitted by ``MAX_INFLIGHT_UPLOAD_MB``: docs/durable-turns.md).  Use
  :func:`work` wherever core/ would call ``asyncio.to_thread``.
* :data:`HOSTED_THREADS` – the short blocking work in front of a hosted
  call (the Hub look-ups, a client's session: core.experts.providers and
  core.experts.remote), through :func:`in_hosted_thread`.
* the loop's **default executor** – what the libraries send there, which
  we cannot re-route: huggingface_hub's async client runs each provider's
  ``get_response`` in ``asyncio.to_thread``, and for queue providers
  (fal-ai's queue tasks, wavespeed, together's videos, zai) that call polls
  with ``time.sleep`` for the whole generation, seconds to minutes.  The
  composition root (``bot.app.open_agent``) gives the loop
  :data:`WAITING_THREADS` of them with :func:`wait_in_many_threads`: threads
  sized for waiting, not for the CPU.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# As the loop's default executor was before (Python's own min(32, cores + 4)):
# 6 on 2 cores.  The bound on how much of our decoding runs at once.
WORK_THREADS = ThreadPoolExecutor(
    max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="work"
)

# Threads of their own for the short blocking work in front of a hosted call
# (the Hub look-ups in core.experts.providers, a client's session in
# core.experts.remote), not the default executor, where the client's polls
# wait.
HOSTED_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hosted")

# The loop's default executor: a thread per provider generation polling at
# once (each holds one for its whole length), plus the client's short
# result parsing.  A thread blocked in a poll costs ~20 KiB of resident
# memory (its 8 MiB stack is address space, touched only as deep as the
# poll goes): 128 of them, ~2.5 MiB (docs/speed.md, the providers path).
# Generations beyond 128 at once queue for a thread, as before beyond 6;
# the bot's own work no longer queues behind them (WORK_THREADS).
WAITING_THREADS = 128

_waiting: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


async def _in(pool: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
    """``fn()`` in a thread of ``pool``, with the caller's context variables
    (as ``asyncio.to_thread``)."""
    call = functools.partial(contextvars.copy_context().run, fn)
    return await asyncio.get_running_loop().run_in_executor(pool, call)


async def work(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a thread of :data:`WORK_THREADS`."""
    return await _in(WORK_THREADS, functools.partial(fn, *args, **kwargs))


async def in_hosted_thread(call: Callable[[], T]) -> T:
    """``call()`` in a thread of :data:`HOSTED_THREADS`."""
    return await _in(HOSTED_THREADS, call)


def wait_in_many_threads(loop: asyncio.AbstractEventLoop) -> None:
    """Give ``loop`` a default executor of :data:`WAITING_THREADS` threads
    (once per loop; the loop shuts it down as it closes).  Threads start as
    work comes, so an idle process has none of them."""
    if loop in _waiting:
        return
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=WAITING_THREADS, thread_name_prefix="waiting")
    )
    _waiting.add(loop)
