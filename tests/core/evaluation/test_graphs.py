"""Plan shapes, type-inconsistent links and invented task names."""

from __future__ import annotations

import json

import pytest

from core.evaluation.graphs import inconsistent_links, invented_tasks, plan_shape, shape_of
from core.planning import PlannedTask, parse_plan


def plan(*tasks: tuple[str, list[int], dict[str, str]]) -> list[PlannedTask]:
    return parse_plan(
        json.dumps(
            [{"task": t, "id": i, "dep": d or [-1], "args": a} for i, (t, d, a) in enumerate(tasks)]
        )
    )


@pytest.mark.parametrize(
    ("n", "links", "shape"),
    [
        (0, [], "none"),
        (1, [], "single"),
        (3, [(0, 1), (1, 2)], "chain"),
        (3, [(1, 2), (0, 1)], "chain"),
        (2, [], "dag"),  # two independent tasks
        (3, [(0, 1), (0, 2)], "dag"),  # fan-out
        (3, [(0, 2), (1, 2)], "dag"),  # fan-in
        (4, [(0, 1), (2, 3)], "dag"),  # two chains
    ],
)
def test_shape_of(n: int, links: list[tuple[int, int]], shape: str) -> None:
    assert shape_of(n, links) == shape


def test_plan_shape_follows_dep() -> None:
    chain = plan(
        ("automatic-speech-recognition", [], {"audio": "a.wav"}),
        ("summarization", [0], {"text": "<resource>-0"}),
    )
    assert plan_shape(chain) == "chain"
    assert plan_shape([]) == "none"


def test_links_feeding_the_wrong_kind_are_found() -> None:
    p = plan(
        ("text-to-image", [], {"text": "a fox"}),
        ("text-to-speech", [0], {"text": "<resource>-0"}),  # a picture read aloud
        ("image-to-text", [1], {"image": "<resource>-1"}),  # audio given as an image
        ("object-detection", [], {"image": "<resource>-0"}),  # fine
        ("translation", [3], {"text": "Translate to French: <resource>-3"}),  # labels: fine
    )
    assert inconsistent_links(p) == [
        "task 0 (text-to-image) makes image, given to task 1 (text-to-speech) as text",
        "task 1 (text-to-speech) makes audio, given to task 2 (image-to-text) as image",
    ]


def test_invented_tasks_are_the_names_not_in_our_table() -> None:
    answer = (
        'Sure: [{"task": "image-upscaling", "id": 0, "dep": [-1], "args": {"image": "a.png"}},'
        ' {"task": "Image-to-Text", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},'
        ' {"task": 7, "id": 2}]'
    )
    assert invented_tasks(answer) == ["image-upscaling", "7"]
    assert invented_tasks("no json here") == []
