"""``pytest.raises`` for the coded errors (:class:`~core.errors.InputRejected`,
:class:`~core.errors.RunFailed`, :class:`~core.errors.TaskFailed` and their
subclasses), matched on what a
person reads (:func:`adapters.chat.messages.error_text`): ``str(err)`` is the
core's terse form, not the words."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest

from adapters.chat.messages import error_text
from core.errors import InputRejected, RunFailed, TaskFailed

E = TypeVar("E", InputRejected, RunFailed, TaskFailed)


@contextmanager
def raises_saying(kind: type[E], match: str) -> Iterator[pytest.ExceptionInfo[E]]:
    """Like ``pytest.raises(kind, match=match)``, on the error's words."""
    with pytest.raises(kind) as info:
        yield info
    said = error_text(info.value)
    assert re.search(match, said), f"{match!r} does not match {said!r}"
