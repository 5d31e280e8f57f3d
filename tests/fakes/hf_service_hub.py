"""The fake Hub API and the retired api-inference host, as aiohttp apps over a
:class:`~tests.fakes.hf_service.FakeHFService`'s registry and knobs.

- ``GET /api/models/{id}`` (also ``.../revision/{rev}``): the model, all of it
  or ``_id``/``id`` plus ``expand`` (``expand`` and ``expand[]`` both read).
  Deleted or unknown repos: 404 with ``X-Error-Code: RepoNotFound`` (the
  client raises ``RepositoryNotFoundError``). Renamed repos: 307 to
  ``/api/models/{new id}`` keeping the query, which the client's session follows.
- ``GET /api/models``: :meth:`Registry.list`.
- ``GET /api/whoami-v2``: :attr:`FakeHFService.user` for a token in
  :attr:`FakeHFService.valid_tokens`, else 401 "Invalid credentials in
  Authorization header" (the message the client special-cases).
- ``GET /api/tasks``: per task, the hf-inference models by downloads (what the
  client reads as default models when none is given).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from aiohttp import web
from multidict import CIMultiDict

from tests.fakes.hf_service_registry import FACTS_PATH

if TYPE_CHECKING:
    from tests.fakes.hf_service import FakeHFService

INVALID_TOKEN = "Invalid credentials in Authorization header"


@dataclass
class HubQuery:
    """One request the Hub API (or the legacy host) received; ``params`` keeps
    repeated keys (``expand``, ``inference_provider``, ``filter``)."""

    method: str
    path: str
    params: dict[str, list[str]]
    headers: CIMultiDict[str]
    time: float

    def param(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[0] if values else None


@dataclass
class Failure:
    """An injected error answer, for the next ``times`` requests (-1: all)."""

    status: int
    times: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    provider: str | None = None


@lru_cache(maxsize=1)
def documented_errors() -> dict[str, Any]:
    """The ``errors`` section of the facts file: the service's error answers."""
    return json.loads(FACTS_PATH.read_text())["errors"]


def bearer(headers: CIMultiDict[str]) -> str:
    return headers.get("Authorization", "").removeprefix("Bearer ").strip()


def failure_response(status: int, body: Any, headers: dict[str, str]) -> web.Response:
    if isinstance(body, str | bytes):
        data = body.encode() if isinstance(body, str) else body
        return web.Response(status=status, body=data, headers=headers, content_type="text/plain")
    return web.json_response(body, status=status, headers=headers)


def record(request: web.Request, into: list[HubQuery]) -> HubQuery:
    params: dict[str, list[str]] = {}
    for key, value in request.query.items():
        params.setdefault(key, []).append(value)
    query = HubQuery(
        request.method, request.path, params, CIMultiDict(request.headers), time.monotonic()
    )
    into.append(query)
    return query


def hub_app(svc: FakeHFService) -> web.Application:
    async def model_info(request: web.Request) -> web.Response:
        query = record(request, svc.hub_queries)
        if svc.hub_hold is not None:
            await svc.hub_hold(query)
        if svc.hub_delay:  # a round trip to the real Hub
            await svc._sleep(svc.hub_delay)
        if failure := svc.take_hub_failure():
            return failure_response(failure.status, failure.body, failure.headers)
        repo = re.sub(r"/revision/[^/]+$", "", request.match_info["repo"])
        registry = svc.registry
        model = registry.get(repo)
        if model is None and repo in registry.renamed:
            location = f"/api/models/{registry.renamed[repo]}"
            if request.query_string:
                location += f"?{request.query_string}"
            return web.Response(status=307, headers={"Location": location})
        if model is None:
            headers = documented_errors()["hub_repo_not_found"]["headers"]
            return web.json_response({"error": "Repository not found"}, status=404, headers=headers)
        expand = query.params.get("expand", []) + query.params.get("expand[]", [])
        return web.json_response(model.info_json(expand))

    async def list_models(request: web.Request) -> web.Response:
        query = record(request, svc.hub_queries)
        if failure := svc.take_hub_failure():
            return failure_response(failure.status, failure.body, failure.headers)
        return web.json_response(svc.registry.list(query.params))

    async def whoami(request: web.Request) -> web.Response:
        record(request, svc.hub_queries)
        if bearer(CIMultiDict(request.headers)) not in svc.valid_tokens:
            headers = {"X-Error-Message": INVALID_TOKEN}
            return web.json_response({"error": INVALID_TOKEN}, status=401, headers=headers)
        return web.json_response(svc.user)

    async def tasks(request: web.Request) -> web.Response:
        record(request, svc.hub_queries)
        found: dict[str, dict[str, Any]] = {}
        for model in sorted(svc.models.values(), key=lambda m: -m.downloads):
            if "hf-inference" in model.mappings and model.pipeline_tag:
                entry = found.setdefault(model.pipeline_tag, {"id": model.pipeline_tag})
                entry.setdefault("widgetModels", []).append(model.id)
        return web.json_response(found)

    app = web.Application()
    app.router.add_get("/api/models", list_models)
    app.router.add_get("/api/models/{repo:.+}", model_info)
    app.router.add_get("/api/whoami-v2", whoami)
    app.router.add_get("/api/tasks", tasks)
    return app


def legacy_app(svc: FakeHFService) -> web.Application:
    """``api-inference.huggingface.co``: every request gets the documented 410."""

    async def gone(request: web.Request) -> web.Response:
        record(request, svc.legacy_calls)
        error = documented_errors()["api_inference_legacy"]
        return web.json_response(error["body"], status=error["status"])

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", gone)
    return app


__all__ = [
    "INVALID_TOKEN",
    "Failure",
    "HubQuery",
    "bearer",
    "documented_errors",
    "failure_response",
    "hub_app",
    "legacy_app",
]
