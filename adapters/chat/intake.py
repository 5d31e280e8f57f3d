"""Taking a request in: record it as a durable job, then run it when its
turn comes — the same on every platform.

A platform records the request (:meth:`AgentAPI.accept`, one fast insert)
before it tells the platform it has it, with the platform's event id as the
dedup key.  :func:`process` then decides: a redelivery of a request that was
answered is dropped; an unfinished one (its process died, or stopped and
handed it on) is resumed here when no live process holds it.
"""

from __future__ import annotations

import logging

from core.types import Accepted, AgentAPI, JobOutcome, JobState

log = logging.getLogger(__name__)


async def process(agent: AgentAPI, accepted: Accepted, what: str) -> JobOutcome | None:
    """Run an accepted job here when its turn comes (None: answered before,
    dropped).  ``what`` names the request in the log (e.g. "slack event Ev1")."""
    job = accepted.job
    if not accepted.fresh:
        if job.state == JobState.DONE:
            log.info("%s was answered before; dropped", what)
            return None
        log.info(
            "%s again, its job %s unfinished (%s): resuming it if free", what, job.id, job.state
        )
    outcome = await agent.process(job.id)
    log.info("%s: job %s %s", what, job.id, outcome)
    return outcome
