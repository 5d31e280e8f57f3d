"""The garbage collector's settings for a process that serves many requests
(``python -m bot run``, ``python -m bot serve``).

CPython's cyclic collector runs a young-generation pass every 700 net
allocations of container objects, and now and then a full pass over every
object the process holds.  A bot that has just started holds a few hundred
thousand objects it keeps for its whole life (the modules of SQLAlchemy,
the openai SDK, pydantic, its own; compiled statements, the catalog, the
prompts), and a burst of requests in flight holds many more young ones: in
a burst of 50 simultaneous requests the collector took about 7 % of the
process's instructions (callgrind), nearly none when requests come one at a
time (their objects die young, by reference counting).

:func:`settle`, once start-up is done: collect what start-up left, move
every surviving object to the permanent generation (``gc.freeze``: the
collector no longer walks them; none of them was garbage), and let the
young generation grow to :data:`YOUNG_THRESHOLD` before a pass, so fewer
short-lived objects of a request are promoted and walked again.  Cycles
made later are still collected, a little later.  A one-shot ``ask`` exits
before any of this pays, so it does not call it.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 10_000  # CPython's default is 700


def settle() -> int:
    """Collect, freeze what start-up built, raise the young generation's
    threshold; the number of objects frozen (logged)."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    frozen = gc.get_freeze_count()
    log.debug("heap settled: %d objects frozen, young generation %d", frozen, YOUNG_THRESHOLD)
    return frozen
