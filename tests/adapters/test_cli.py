"""``python -m bot`` as a user runs it: a real subprocess, configured only by
environment variables, talking to the loopback fakes."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from tests.fakes import process_env
from tests.fakes.agent_fixture import model_a, serve_all
from tests.fakes.hf_fake import FakeHF
from tests.fakes.hf_service import FakeHFService, make_hf_service
from tests.fakes.openai_fake import FakeLLM, WeakModel
from tests.fakes.process_env import clean_env
from tests.fakes.samples import sample_png


def base_env(tmp_path: Path) -> dict[str, str]:
    return clean_env(tmp_path)


def fake_env(tmp_path: Path, llm: FakeLLM, hf: FakeHF) -> dict[str, str]:
    # SELECTION_DELAY longer than any run: independent tasks finish on their most
    # downloaded model and the LLM is never asked to choose (as with fast models)
    return process_env.fake_env(
        tmp_path, llm, hf, api_key="sk-test-cli", LLM_MAX_RETRIES="0", SELECTION_DELAY="600"
    )


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
    assert data["usage"]["llm_calls"] == 2  # plan and answer: done before a choice was due
    assert data["usage"]["prompt_tokens"] > 0
    assert "[planning]" in err and "[running]" in err  # progress went to stderr
    assert hf_fake.calls_for(model_a("object-detection"))[0].body == sample_png()


async def test_ask_json_with_failed_answer_stage_is_an_error(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    serve_all(hf_fake)
    llm_fake.reply(
        "plan", '[{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a cat"}}]'
    )
    llm_fake.fail(500, times=5, stage="answer")
    code, out, err = await run_bot(
        "ask", "draw a cat", "--json", env=fake_env(tmp_path, llm_fake, hf_fake), cwd=tmp_path
    )
    assert code == 1, err
    data = json.loads(out)
    assert data["error"] is True and data["fallback"] is True
    assert data["tasks"][0]["status"] == "done"  # the results are still there
    assert len(data["files"]) == 1
    assert data["usage"]["llm_calls"] == 2  # the plan and the failed answer
    assert "HTTP 500" in data["answer"]


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
    assert "could not be reached" in err, err  # the status (stderr) says why
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
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert len(lines) == 25  # the paper's 24 tasks and depth-estimation
    # the shipped catalog on Inference Providers: each model with its providers
    assert "remote" in lines["image-classification"]
    assert "google/vit-base-patch16-224 (hf-inference)" in lines["image-classification"]
    assert "black-forest-labs/FLUX.1-dev (fal-ai, hf-inference" in lines["text-to-image"]
    served = [task for task, line in lines.items() if "unavailable" not in line]
    assert len(served) == 19
    # tasks no provider serves say why they are unavailable in remote mode
    for task in (
        "controlnet-sd",
        "depth-estimation",
        "tabular-classification",
        "video-classification",
        "audio-classification",
        "audio-to-audio",
    ):
        assert "unavailable: no inference provider serves this task" in lines[task], task


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


async def test_models_refresh_rebuilds_catalog_from_hub(tmp_path: Path) -> None:
    async with make_hf_service() as svc:
        for i, downloads in enumerate([10, 500, 70]):
            svc.add_model(
                f"org/cls-{i}",
                "image-classification",
                downloads=downloads,
                tags=("vit",),
                mappings={"hf-inference": (f"org/cls-{i}", "image-classification")},
            )
        svc.add_model("org/cls-unserved", "image-classification", downloads=10**6)
        svc.add_model(
            "org/tts",
            "text-to-speech",
            downloads=5,
            mappings={"fal-ai": ("fal-ai/tts", "text-to-speech")},
        )
        env = base_env(tmp_path)
        env["HF_ENDPOINT"] = svc.hub_url
        out_file = tmp_path / "catalog.jsonl"
        code, out, err = await run_bot(
            "models", "refresh", "--per-task", "2", "--output", str(out_file), env=env, cwd=tmp_path
        )
        assert code == 0, err
        queries = [q for q in svc.hub_queries if q.param("pipeline_tag") == "image-classification"]
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    cls = [r for r in rows if r["task"] == "image-classification"]
    # ranked by downloads, top 2, only models a provider serves, with their providers
    assert [r["id"] for r in cls] == ["org/cls-1", "org/cls-2"]
    assert all(r["providers"] == ["hf-inference"] for r in cls)
    assert any(r["id"] == "org/tts" and r["providers"] == ["fal-ai"] for r in rows)
    assert queries and queries[0].param("sort") == "downloads"
    assert queries[0].param("inference_provider") == "all"
    # the new catalog drives the agent: `models list` now shows it
    env["MODEL_CATALOG"] = str(out_file)
    code, out, err = await run_bot(
        "models", "list", "--task", "image-classification", env=env, cwd=tmp_path
    )
    assert code == 0, err
    assert "org/cls-1 (hf-inference), org/cls-2 (hf-inference)" in out


async def test_doctor_checks_each_service(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    env = fake_env(tmp_path, llm_fake, hf_fake)
    env["LLM_MODEL"] = "fake-model"  # doctor checks the server lists it
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 0, out + err
    assert "ok  llm" in out and "ok  database" in out and "ok  catalog" in out
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 1
    assert "BAD llm" in out and "could not be reached" in out
    assert "sk-test-cli" not in out + err


async def test_doctor_reports_wrong_model_and_too_small_context(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    # llama-server with a tiny model: it answers whatever model is named
    llm_fake.models = ["qwen2.5-0.5b-instruct-q4_k_m.gguf"]
    llm_fake.weak = WeakModel(n_ctx=2048)
    env = fake_env(tmp_path, llm_fake, hf_fake)
    del env["OPENAI_API_KEY"]
    env["LLM_MODEL"] = "gpt-4o-mini"
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 1, out + err
    bad = [line for line in out.splitlines() if line.startswith("BAD llm")]
    assert len(bad) == 2, out
    assert "LLM_MODEL=gpt-4o-mini" in bad[0] and "qwen2.5-0.5b-instruct-q4_k_m.gguf" in bad[0]
    assert "holds 2048 tokens" in bad[1]
    # a context the planning prompt and its answer fit in: a power of two above what it needs
    needed = int(re.search(r"planning needs about (\d+)", bad[1])[1])  # type: ignore[index]
    size = int(re.search(r"--ctx-size (\d+)", bad[1])[1])  # type: ignore[index]
    assert size > max(needed, 2048) and size & (size - 1) == 0
    assert "ok  llm" not in out
    # unset LLM_MODEL and a big enough context: fine
    llm_fake.weak = WeakModel(n_ctx=16384)
    del env["LLM_MODEL"]
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 0, out + err
    assert "ok  llm        qwen2.5-0.5b-instruct-q4_k_m.gguf at 127.0.0.1:" in out
    assert "context 16384 tokens" in out


async def test_doctor_with_only_hf_token_and_a_retired_model(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, hf_service: FakeHFService
) -> None:
    hf_service.valid_tokens.add("hf_secret_token")
    llm_fake.router_models = {"openai/gpt-oss-120b", "Qwen/Qwen3-8B"}
    llm_fake.models = sorted(llm_fake.router_models)  # what its /v1/models lists
    env = fake_env(tmp_path, llm_fake, hf_fake)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        del env[name]
    env.update(
        HF_TOKEN="hf_secret_token",
        HF_ROUTER_URL=llm_fake.base_url.removesuffix("/v1"),
        HF_ENDPOINT=hf_service.hub_url,
        LLM_MODEL="acme/retired-model",
    )
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 1, out + err
    (bad,) = [line for line in out.splitlines() if line.startswith("BAD llm")]
    assert "acme/retired-model" in bad and "LLM_MODEL" in bad
    assert "hf_secret_token" not in out + err
    assert llm_fake.auth == ["Bearer hf_secret_token"]
    del env["LLM_MODEL"]
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 0, out + err
    assert "ok  llm        openai/gpt-oss-120b" in out


async def test_doctor_on_the_service_with_only_hf_token(
    tmp_path: Path, hf_service: FakeHFService
) -> None:
    """The day-one setup: one token, the shipped catalog, the default controller."""
    env = base_env(tmp_path)
    env.update(
        HF_TOKEN="hf_test_token",
        HF_ROUTER_URL=hf_service.router_url,
        HF_ENDPOINT=hf_service.hub_url,
    )
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 0, out + err
    assert "ok  llm        openai/gpt-oss-120b at 127.0.0.1:" in out
    assert "ok  hf token   valid, user " in out
    assert "ok  inference  19 tasks offered, each with a served model" in out
    # a model deleted from the Hub and a token the Hub refuses: both named
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(
        json.dumps(
            {
                "id": "runwayml/stable-diffusion-v1-5",
                "task": "text-to-image",
                "providers": ["hf-inference"],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    env.update(MODEL_CATALOG=str(catalog))
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 1, out + err
    assert "BAD inference  text-to-image: no candidate is served live" in out
    assert "no longer exists on the Hub" in out
    env["HF_TOKEN"] = "hf_revoked_token"
    code, out, err = await run_bot("doctor", env=env, cwd=tmp_path)
    assert code == 1, out + err
    assert "BAD hf token   the Hub refused HF_TOKEN (HTTP 401)" in out
    # no model looked up with a token the Hub refuses: one line, with the count
    (inference,) = [line for line in out.splitlines() if line.startswith("BAD inference")]
    assert "not checked: the Hub refused HF_TOKEN (HTTP 401) for 1 model of 1 task" in inference
    assert "hf_revoked_token" not in out + err


async def test_run_without_llm_key_says_which_variable(tmp_path: Path) -> None:
    code, _out, err = await run_bot("run", env=base_env(tmp_path), cwd=tmp_path)
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and "OPENAI_API_KEY" in err
    assert "HF_TOKEN" in err
