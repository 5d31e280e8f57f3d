"""Measuring the planner: ``python -m bot eval plans DATASET.jsonl``.

:mod:`.datasets` reads requests (with gold plans in the paper's or
TaskBench's format), :mod:`.runner` plans each one as the agent does,
:mod:`.metrics` scores plans against gold as TaskBench does,
:mod:`.summary` adds the figures up per plan shape.  See docs/evaluation.md.
"""
