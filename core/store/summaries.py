"""What this process knows a job's checkpoint column holds, so finishing a
job need not read back what the process itself just wrote.

A finished job keeps a summary of its last checkpoint (the reply, the plan,
the models: ``AgentAPI.recall``).  The job store records that summary here
when it reads a job's row (a claim) and each time one of its checkpoint
writes commits; a write that has not committed makes it unknown (it may or
may not have landed), and :meth:`core.store.jobs.JobStore.finish` then
reads the checkpoint as before.  Only the process holding a job's lease
writes its checkpoint, so what it knows stays true until it lets go.
"""

from __future__ import annotations

from typing import Any, Final

LIMIT = 1024  # jobs remembered at once (one per running request; past it, finish reads)


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = _Unknown()

Summary = dict[str, Any] | None


class JobSummaries:
    """job id → the summary of its checkpoint as last read or written here."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._known: dict[int, Summary] = {}
        self._limit = limit

    def remember(self, job_id: int, summary: Summary) -> None:
        if job_id not in self._known and len(self._known) >= self._limit:
            del self._known[next(iter(self._known))]  # the oldest: its job went elsewhere
        self._known[job_id] = summary

    def forget(self, job_id: int) -> None:
        self._known.pop(job_id, None)

    def pop(self, job_id: int) -> Summary | _Unknown:
        return self._known.pop(job_id, UNKNOWN)

    def __len__(self) -> int:
        return len(self._known)
