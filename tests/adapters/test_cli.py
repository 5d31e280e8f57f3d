"""``python -m bot`` as a user runs it: a real subprocess, configured only by
environment variables, talking to the loopback fakes."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.fakes import process_env
from tests.fakes.agent_fixture import model_a, serve_all
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.process_env import clean_env
from tests.fakes.samples import sample_png


def base_env(tmp_path: Path) -> dict[str, str]:
    return clean_env(tmp_path)


def fake_env(tmp_path: Path, llm: FakeLLM, hf: FakeHF) -> dict[str, str]:
    return process_env.fake_env(tmp_path, llm, hf, api_key="sk-test-cli", LLM_MAX_RETRIES="0")


async def run_bot(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_help_lists_commands(tmp_path: Path) -> None:
    code, out, _ = await run_bot("--help", env=base_env(tmp_path), cwd=tmp_path)
    assert code == 0
    for cmd in ("run", "ask", "chat", "db", "models", "doctor"):
        assert cmd in out


async def test_missing_llm_key_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    code, _out, err = await run_bot("ask", "hello", env=base_env(tmp_path), cwd=tmp_path)
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "OPENAI_API_KEY" in err
    assert "Traceback" not in err


async def test_ask_json_end_to_end(tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF) -> None:
    serve_all(hf_fake)
    photo = tmp_path / "photo.png"
    photo.write_bytes(sample_png())
    llm_fake.reply(
        "plan",
        json.dumps(
            [
                {"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "photo.png"}},
                {"task": "text-to-image", "id": 1, "dep": [-1], "args": {"text": "a cat"}},
            ]
        ),
    )
    llm_fake.reply("answer", "I found a cat and drew another one.")
    code, out, err = await run_bot(
        "ask",
        "find objects in my photo and draw a cat",
        "--file",
        str(photo),
        "--conversation",
        "demo",
        "--json",
        env=fake_env(tmp_path, llm_fake, hf_fake),
        cwd=tmp_path,
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["answer"] == "I found a cat and drew another one."
    assert [(t["id"], t["task"], t["model"], t["status"]) for t in data["tasks"]] == [
        (0, "object-detection", model_a("object-detection"), "done"),
        (1, "text-to-image", model_a("text-to-image"), "done"),
    ]
    assert all(t["started"] and t["ended"] and t["error"] is None for t in data["tasks"])
    assert len(data["files"]) == 2
    for f in data["files"]:
        assert Path(f).is_absolute() and Path(f).is_file()
    assert data["usage"]["llm_calls"] == 3
    assert data["usage"]["prompt_tokens"] > 0
    assert "[planning]" in err and "[running]" in err  # progress went to stderr
    assert hf_fake.calls_for(model_a("object-detection"))[0].body == sample_png()


async def test_ask_plain_output_and_second_turn(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    serve_all(hf_fake)
    env = fake_env(tmp_path, llm_fake, hf_fake)
    llm_fake.reply(
        "plan",
        '[{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]',
        '[{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "image.png"}}]',
    )
    code, out, err = await run_bot("ask", "draw a fox", env=env, cwd=tmp_path)
    assert code == 0, err
    assert "image.png" in out
    code, out, err = await run_bot("ask", "what is in image.png?", env=env, cwd=tmp_path)
    assert code == 0, err
    assert hf_fake.calls_for(model_a("image-classification"))[0].body == sample_png()


async def test_ask_with_dead_llm_fails_cleanly(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    env.update(
        OPENAI_API_KEY="sk-secret-value",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        LLM_MAX_RETRIES="0",
    )
    code, out, err = await run_bot("ask", "hello", env=env, cwd=tmp_path)
    assert code == 1, err
    assert "could not be reached" in out, err
    assert "sk-secret-value" not in out + err
    assert "Traceback" not in err


async def test_missing_file_is_a_clear_error(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    code, _, err = await run_bot(
        "ask",
        "x",
        "--file",
        str(tmp_path / "nope.png"),
        env=fake_env(tmp_path, llm_fake, hf_fake),
        cwd=tmp_path,
    )
    assert code == 2 and "nope.png" in err


async def test_db_upgrade_and_models_list(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    code, out, err = await run_bot("db", "upgrade", env=env, cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "bot.db").is_file()
    code, out, err = await run_bot("db", "prune-media", env=env, cwd=tmp_path)
    assert code == 0, err
    assert out.startswith("removed 0 unused files")
    code, out, err = await run_bot("models", "list", env=env, cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 25  # the paper's 24 tasks and depth-estimation
    assert any(line.startswith("image-classification") and "remote" in line for line in lines)
    assert any(line.startswith("depth-estimation") and "remote" in line for line in lines)
    # tasks only local inference serves say why they are unavailable in remote mode
    assert any(line.startswith("controlnet-sd") and "unavailable" in line for line in lines)


@pytest.mark.parametrize("text", ["hello there"])
async def test_chat_loop_reads_stdin(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, text: str
) -> None:
    llm_fake.reply("answer", "Hi from the bot")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "chat",
        "--conversation",
        "c1",
        env=fake_env(tmp_path, llm_fake, hf_fake),
        cwd=tmp_path,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(f"{text}\n/quit\n".encode()), 60)
    assert proc.returncode == 0, err.decode()
    assert "Hi from the bot" in out.decode()
    assert llm_fake.calls("plan")[0]["messages"][-1]["content"].count(text) >= 1


async def test_models_refresh_rebuilds_catalog_from_hub(tmp_path: Path, hf_fake: FakeHF) -> None:
    hf_fake.hub_models = [
        {
            "id": f"org/cls-{i}",
            "pipeline_tag": "image-classification",
            "downloads": d,
            "likes": 1,
            "tags": ["vit"],
        }
        for i, d in enumerate([10, 500, 70])
    ] + [
        {"id": "org/tts", "pipeline_tag": "text-to-speech", "downloads": 5, "likes": 0, "tags": []}
    ]
    env = base_env(tmp_path)
    env["HF_ENDPOINT"] = hf_fake.base_url
    out_file = tmp_path / "catalog.jsonl"
    code, out, err = await run_bot(
        "models", "refresh", "--per-task", "2", "--output", str(out_file), env=env, cwd=tmp_path
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    cls = [r["id"] for r in rows if r["task"] == "image-classification"]
    assert cls == ["org/cls-1", "org/cls-2"]  # ranked by downloads, top 2
    assert any(r["id"] == "org/tts" for r in rows)
    queries = [q for q in hf_fake.hub_queries if q.get("pipeline_tag") == "image-classification"]
    assert queries and queries[0]["sort"] == "downloads" and queries[0]["limit"] == "2"
    # the new catalog drives the agent: `models list` now shows it
    env["MODEL_CATALOG"] = str(out_file)
    code, out, err = await run_bot(
        "models", "list", "--task", "image-classification", env=env, cwd=tmp_path
    )
    assert code == 0, err
    assert "org/cls-1, org/cls-2" in out


async def test_doctor_checks_each_service(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    env = fake_env(tmp_path, llm_fake, hf_fake)
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 0, out + err
    assert "ok  llm" in out and "ok  database" in out and "ok  catalog" in out
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 1
    assert "BAD llm" in out and "could not be reached" in out
    assert "sk-test-cli" not in out + err


async def test_run_without_llm_key_says_which_variable(tmp_path: Path) -> None:
    code, _out, err = await run_bot("run", env=base_env(tmp_path), cwd=tmp_path)
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and "OPENAI_API_KEY" in err
