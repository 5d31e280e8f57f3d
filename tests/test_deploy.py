"""The deployment files, checked statically (no Docker engine runs here).

The Dockerfile through Docker's own parser (the ``dockerfile`` package wraps
BuildKit's Go parser), compose.yaml as YAML with its variables interpolated the
way Compose does, and the lock files against pyproject.toml: a dependency added
to pyproject but not locked fails here until ``scripts/lock.sh`` is run.  Where
the docker client has the Compose plugin, ``docker compose config`` checks the
compose file against the Compose specification too.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shutil
import struct
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import dockerfile
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sqlalchemy.engine import make_url

from bot import health
from bot.settings import env_names
from core.store.db import Database

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The interpreter the image and the locks are for (python:3.11-slim, --python-version 3.11).
IMAGE_ENV = {
    "python_version": "3.11",
    "python_full_version": "3.11.9",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
}


# --- the lock files -----------------------------------------------------------


def read_lock(name: str) -> dict[str, tuple[Requirement, list[str]]]:
    """``{name: (requirement, hashes)}`` for the entries that apply in the image."""
    text = (ROOT / name).read_text(encoding="utf-8").replace("\\\n", " ")
    entries: dict[str, tuple[Requirement, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        req = Requirement(re.sub(r"\s*--hash=\S+", "", line))
        if req.marker is None or req.marker.evaluate(IMAGE_ENV):
            assert canonicalize_name(req.name) not in entries, f"{name}: {req.name} twice"
            entries[canonicalize_name(req.name)] = (req, hashes)
    return entries


def pinned(req: Requirement) -> str:
    (spec,) = req.specifier
    assert spec.operator == "==", f"{req} is not pinned"
    return spec.version


def project_requirements(extra: str | None = None) -> list[Requirement]:
    project = PYPROJECT["project"]
    reqs = project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])
    return [Requirement(r) for r in reqs]


def torch_pin() -> str:
    (torch,) = [r for r in project_requirements("local") if r.name == "torch"]
    return pinned(torch)


@pytest.mark.parametrize(
    ("lock", "extra"), [("requirements.txt", None), ("requirements-local.txt", "local")]
)
def test_every_dependency_of_pyproject_is_locked_within_its_range(
    lock: str, extra: str | None
) -> None:
    entries = read_lock(lock)
    missing, outside = [], []
    for req in project_requirements(extra):
        if req.name == "torch":
            continue  # the CPU build is installed from the PyTorch index (below)
        got = entries.get(canonicalize_name(req.name))
        if got is None:
            missing.append(req.name)
        elif not req.specifier.contains(pinned(got[0]), prereleases=True):
            outside.append(f"{req} (locked {pinned(got[0])})")
    assert not missing and not outside, (
        f"{lock} is out of date with pyproject.toml (run scripts/lock.sh): "
        f"missing {missing}, outside the range {outside}"
    )


@pytest.mark.parametrize("lock", ["requirements.txt", "requirements-local.txt"])
def test_every_locked_file_is_pinned_by_hash(lock: str) -> None:
    entries = read_lock(lock)
    assert len(entries) > 30
    for name, (req, hashes) in entries.items():
        pinned(req)
        assert hashes, f"{lock}: {name} has no --hash (pip --require-hashes would refuse it)"
    head = (ROOT / lock).read_text(encoding="utf-8").splitlines()[:2]
    assert "scripts/lock.sh" in head[1], "made by scripts/lock.sh, which says how to redo it"


def test_the_local_lock_holds_the_base_one_and_leaves_torch_to_the_cpu_index() -> None:
    base, local = read_lock("requirements.txt"), read_lock("requirements-local.txt")
    for name in ("transformers", "diffusers", "accelerate"):
        assert name in local and name not in base
    assert "torch" not in local  # no CUDA build through the lock
    assert not [n for n in local if n.startswith(("nvidia-", "triton"))]
    # torch is resolved at pyproject's pin (markered out), so the locked rest fits it
    text = (ROOT / "requirements-local.txt").read_text(encoding="utf-8")
    assert re.search(rf"^torch=={re.escape(torch_pin())} ; sys_platform == 'never'", text, re.M)


# What torch 2.x's wheel requires (its METADATA's Requires-Dist without extras).
TORCH_NEEDS = (
    "filelock",
    "typing-extensions",
    "setuptools",
    "sympy",
    "networkx",
    "jinja2",
    "fsspec",
)


def test_the_torch_lock_pins_the_cpu_build_by_hash_and_the_local_lock_holds_what_it_needs() -> None:
    torch = read_lock("requirements-torch.txt")
    assert list(torch) == ["torch"]
    req, hashes = torch["torch"]
    assert pinned(req) == f"{torch_pin()}+cpu"  # pyproject's version, the CPU build
    assert hashes, "pip --require-hashes would refuse it"
    local = read_lock("requirements-local.txt")
    assert [n for n in TORCH_NEEDS if n not in local] == []  # installed with --no-deps


# --- the Dockerfile -----------------------------------------------------------


def stages() -> list[list[dockerfile.Command]]:
    out: list[list[dockerfile.Command]] = []
    for cmd in dockerfile.parse_file(str(ROOT / "Dockerfile")):
        if cmd.cmd == "FROM":
            out.append([])
        if out:
            out[-1].append(cmd)
    return out


def args_of(stage: list[dockerfile.Command]) -> dict[str, str]:
    return dict(v.split("=", 1) for c in stage if c.cmd == "ARG" for v in c.value)


def runs(stage: list[dockerfile.Command]) -> str:
    return "\n".join(" ".join(c.value) for c in stage if c.cmd == "RUN")


def test_dockerfile_builds_in_one_stage_and_runs_in_another_as_a_plain_user() -> None:
    build, runtime = stages()
    assert build[0].value[-2:] == ("AS", "build")
    assert runtime[0].value[-2:] == ("AS", "runtime")
    copies = [c for c in runtime if c.cmd == "COPY"]
    assert [c.flags for c in copies] == [("--from=build",)]  # only the virtualenv crosses
    users = [c.value[0] for c in runtime if c.cmd == "USER"]
    assert users, "the runtime stage must drop root"
    uid = users[-1].split(":")[0]
    assert uid not in ("root", "0")
    # the uid it runs as is the one that owns the data directory
    assert re.search(rf"useradd\b.*--uid {uid}\b", runs(runtime))
    assert "chown bot:bot /data" in runs(runtime)


def test_dockerfile_runs_the_console_script() -> None:
    _build, runtime = stages()
    (entry,) = [c for c in runtime if c.cmd == "ENTRYPOINT"]
    (cmd,) = [c for c in runtime if c.cmd == "CMD"]
    assert entry.json and entry.value == ("hugginggpt-bot",)
    assert cmd.json and cmd.value == ("run",)
    assert PYPROJECT["project"]["scripts"]["hugginggpt-bot"] == "bot.__main__:main"
    env = dict(
        pair.split("=", 1)
        for c in runtime
        if c.cmd == "ENV"
        for pair in re.findall(r"(\w+=\S+)", c.original)
    )
    assert env["DATA_DIR"] == "/data"
    assert "DATA_DIR" in env_names()
    assert [c.value for c in runtime if c.cmd == "VOLUME"] == [("/data",)]


def test_dockerfile_installs_from_the_locks_and_cpu_torch_first_when_local() -> None:
    build, _runtime = stages()
    args = args_of(build)
    assert args["LOCAL"] == "0"  # remote inference unless asked
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu")
    script = " ".join(runs(build).split())
    torch_at = script.index(
        'pip install --require-hashes --no-deps --index-url "$TORCH_INDEX_URL" '
        "-r requirements-torch.txt"
    )  # by hash, as everything else
    assert script.index('if [ "$LOCAL" = "1" ]') < torch_at
    lock_at = script.index('pip install --require-hashes --no-deps -r "$lock"')
    assert torch_at < lock_at  # torch is there before the lock (which leaves it out)
    assert "lock=requirements-local.txt" in script and "lock=requirements.txt" in script
    installs = re.findall(r"pip install (?:-\S+ )*\S+", script)
    # every file by hash, but the bot itself (built from the source copied in)
    assert [i for i in installs if "--require-hashes" not in i] == ["pip install --no-deps ."]
    copied = [v for c in build if c.cmd == "COPY" for v in c.value[:-1]]
    assert {"requirements.txt", "requirements-local.txt", "requirements-torch.txt"} <= set(copied)
    assert "pip install --no-deps ." in script and "pip check" in script


def ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for top-level patterns: the last match wins."""
    verdict = False
    for p in patterns:
        negate = p.startswith("!")
        p = p.lstrip("!").removeprefix("**/")
        if fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.split("/")[0], p):
            verdict = not negate
    return verdict


def test_dockerignore_keeps_secrets_and_state_out_and_what_is_copied_in() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for secret_or_state in (".env", ".env.local", ".git", ".venv", ".venv-local", "data"):
        assert ignored(secret_or_state, patterns), secret_or_state
    for stage in stages():
        for c in stage:
            if c.cmd == "COPY" and not c.flags:
                for src in c.value[:-1]:
                    assert (ROOT / src).exists(), f"COPY {src}: no such file"
                    assert not ignored(src, patterns), f"COPY {src} is in .dockerignore"


# --- compose.yaml -------------------------------------------------------------

_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ``${VAR}`` / ``${VAR:-default}`` substitution, recursively."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


def compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    raw = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return interpolate(raw, env or {})  # type: ignore[no-any-return]


def bot_services(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in c["services"].items() if "build" in s}


def test_compose_runs_the_bot_and_replicas_on_one_postgresql() -> None:
    c = compose()
    pg = c["services"]["postgres"]
    assert pg["image"].startswith("postgres:")
    test = " ".join(pg["healthcheck"]["test"])
    assert "pg_isready" in test and pg["environment"]["POSTGRES_USER"] in test
    (pg_volume,) = pg["volumes"]
    assert pg_volume.split(":") == ["postgres-data", "/var/lib/postgresql/data"]
    assert "postgres-data" in c["volumes"]

    bots = bot_services(c)
    assert set(bots) == {"bot", "replica"}
    urls = set()
    for name, s in bots.items():
        assert s["env_file"] == ".env", name
        assert s["depends_on"]["postgres"]["condition"] == "service_healthy", name
        assert s["command"][0] == "run", name
        url = make_url(s["environment"]["DATABASE_URL"])
        assert url.drivername == "postgresql+asyncpg"
        assert url.host == "postgres" and url.port == 5432
        assert (url.username, url.password, url.database) == (
            pg["environment"]["POSTGRES_USER"],
            None,  # in PGPASSWORD: any character is safe there
            pg["environment"]["POSTGRES_DB"],
        )
        assert s["environment"]["PGPASSWORD"] == pg["environment"]["POSTGRES_PASSWORD"]
        urls.add(str(url))
        # the media files on one volume, where DATA_DIR says
        (volume,) = s["volumes"]
        assert volume == f"bot-data:{s['environment']['DATA_DIR']}"
        assert s["build"]["args"]["LOCAL"] == "0"
        assert s["stop_grace_period"] == "45s"  # > SHUTDOWN_GRACE's 30 s
    assert len(urls) == 1, "every replica on the same PostgreSQL"
    assert "bot-data" in c["volumes"]


def test_compose_variables_reach_the_build_and_the_replica_count() -> None:
    c = compose({"LOCAL": "1", "SLACK_REPLICAS": "3", "POSTGRES_PASSWORD": "s3cret"})
    bots = bot_services(c)
    assert bots["replica"]["deploy"]["replicas"] == "3"
    assert bots["replica"]["command"] == ["run", "slack"]
    assert "deploy" not in bots["bot"]  # one bot: Discord shards must not be joined twice
    assert {s["build"]["args"]["LOCAL"] for s in bots.values()} == {"1"}
    assert c["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"
    assert bots["bot"]["environment"]["PGPASSWORD"] == "s3cret"
    assert compose()["services"]["replica"]["deploy"]["replicas"] == "0"


def test_compose_sets_only_settings_the_bot_knows() -> None:
    keys = set(env_names(legacy=False))
    keys.add("PGPASSWORD")  # the driver's own (asyncpg, as libpq), not a setting
    for name, s in bot_services(compose()).items():
        assert set(s["environment"]) <= keys, name


def test_compose_checks_that_each_bot_process_serves() -> None:
    for name, s in bot_services(compose()).items():
        check = s["healthcheck"]
        assert check["test"] == ["CMD", "python", "-m", "bot.health"], name
        assert check["start_period"] and check["retries"] >= 1, name
    # the module is in the package the image installs, `python` is the venv's
    assert health.main is not None
    assert "bot*" in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    _build, runtime = stages()
    assert "PATH=/opt/venv/bin:$PATH" in " ".join(c.original for c in runtime if c.cmd == "ENV")
    assert health.BEAT_EVERY * 3 <= health.STALE_AFTER  # a late beat is not a failure


class FakePostgres:
    """Just enough of PostgreSQL's wire protocol to ask for a password in clear
    text and record what the client sends (then refuse it)."""

    def __init__(self) -> None:
        self.startups: list[dict[str, str]] = []
        self.passwords: list[str] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = struct.unpack("!i", await reader.readexactly(4))
                body = await reader.readexactly(length - 4)
                if body[:4] == struct.pack("!i", 80877103):  # SSLRequest
                    writer.write(b"N")
                    continue
                fields = body[4:].split(b"\0")
                self.startups.append(
                    {
                        k.decode(): v.decode()
                        for k, v in zip(fields[::2], fields[1::2], strict=False)
                        if k
                    }
                )
                writer.write(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
                await writer.drain()
                assert await reader.readexactly(1) == b"p"
                (length,) = struct.unpack("!i", await reader.readexactly(4))
                self.passwords.append((await reader.readexactly(length - 4)).rstrip(b"\0").decode())
                error = b"SFATAL\0C28P01\0Mpassword authentication failed\0\0"
                writer.write(b"E" + struct.pack("!i", len(error) + 4) + error)
                await writer.drain()
                break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("password", ["bot", "p@ss/w:rd%40#?&=é 1", "%", "a@b"])
async def test_the_postgres_password_reaches_the_driver_whatever_its_characters(
    password: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compose's DATABASE_URL and PGPASSWORD, as the bot opens its database."""
    env = bot_services(compose({"POSTGRES_PASSWORD": password}))["bot"]["environment"]
    fake = FakePostgres()
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = make_url(env["DATABASE_URL"]).set(host="127.0.0.1", port=port)
    monkeypatch.setenv("PGPASSWORD", env["PGPASSWORD"])
    try:
        async with Database(url.render_as_string(hide_password=False)) as db:
            with pytest.raises(Exception, match="password authentication failed"):
                async with db.engine.connect():
                    pass
    finally:
        server.close()
        await server.wait_closed()
    assert fake.passwords and set(fake.passwords) == {password}
    assert {(s["user"], s["database"]) for s in fake.startups} == {("bot", "bot")}


def test_compose_config_accepts_the_file_where_docker_compose_exists(tmp_path: Path) -> None:
    """``docker compose config`` where the client has the Compose plugin (it
    validates against the Compose specification); without it the structural
    checks above are what there is."""
    docker = shutil.which("docker")
    version = [docker, "compose", "version"] if docker else None
    if version is None or subprocess.run(version, capture_output=True, timeout=30).returncode:
        assert yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))["services"]
        return
    assert docker is not None
    (tmp_path / ".env").write_text("HF_TOKEN=x\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL", "SLACK_REPLICAS")}
    project = ["--project-directory", str(tmp_path), "-f", str(ROOT / "compose.yaml")]
    out = subprocess.run(
        [docker, "compose", *project, "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)
    assert set(resolved["services"]) == {"postgres", "bot", "replica"}
    assert resolved["services"]["replica"]["deploy"]["replicas"] == 0
