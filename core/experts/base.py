"""The contract every expert backend fulfils.

An expert runs one task on one model.  It raises :class:`core.errors.TaskFailed`
(a :class:`~core.errors.TaskCode` and its fields, never a sentence) for
anything the executor should handle (retry on the next candidate, then skip
dependents); it never lets a backend's own exception type escape.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from core.catalog import ModelInfo
from core.results import TaskInputs, TaskResult


class Expert(Protocol):
    name: str  # "remote" | "local"

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        """Whether this backend can serve ``task`` (with ``model`` when given)."""
        ...

    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Prepares(Protocol):
    """A backend whose first call builds something costly (a client's
    session) it can start building ahead, in the background."""

    def prepare(self) -> None:
        """Start it; return at once."""
        ...


@runtime_checkable
class LooksUpAhead(Protocol):
    """A backend whose first call of a model asks a directory first (the
    Hub's provider mapping) and can ask it ahead, once the plan is known."""

    def look_up_ahead(self, task: str, model: ModelInfo) -> None:
        """Start what a call of ``model`` on ``task`` would look up first, in
        the background; return at once.  Its failures are dropped: the call
        asks again and reports them."""
        ...
