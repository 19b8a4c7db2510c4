"""An endpoint served by vLLM through the real service, its controller and the local backend, on
vLLM's CPU build (the environment scripts/setup-vllm-env.sh builds at .venv-vllm): `endpoints
get` says vllm serves it, the official `openai` SDK gets the base model's greedy answer whole and
streamed (its model name in every chunk, the usage last), and once the endpoint is deleted vLLM's
server process is gone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import openai
import psutil
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.integration.helpers import ensure_project
from tests.vllm_env import vllm_python

pytestmark = pytest.mark.slow


def _vllm_servers(trainer: TrainerProcess, endpoint_id: str) -> list[psutil.Process]:
    """vLLM's server processes under the endpoint's jobs."""
    found = []
    for handle in (trainer.home / "jobs" / endpoint_id).glob("*/handle.json"):
        try:
            runner = psutil.Process(json.loads(handle.read_text())["pid"])
            found += [
                p
                for p in runner.children(recursive=True)
                if "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline())
            ]
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError, ValueError):
            continue
    return found


def test_an_endpoint_on_vllm_answers_the_openai_sdk_and_its_server_goes_with_it(
    tmp_path: Path,
) -> None:
    python = vllm_python()
    from akka_training.engines.trl.smoke import build_model

    model_dir = build_model(tmp_path / "model", "tiny")  # a Qwen3 of head_dim 64
    entry = {
        "id": "tiny-64",
        "path": str(model_dir),
        "revision": "dev",
        "context-length": 512,
        "max-loras": 2,
        "max-lora-rank": 8,
        "envelopes": [{"method": "sft", "engine": "trl", "gpus": 1, "precision": "FP32"}],
    }
    trainer = TrainerProcess(
        tmp_path / "trainer",
        {
            "trainer": {
                "controller": {"interval-seconds": 0.2},
                "pools": [{"name": "default", "accelerator": "cpu", "devices": 1}],
                "catalog": [entry],
                "endpoints": {"engine": "vllm", "vllm-python": str(python)},
            }
        },
    ).start()
    try:
        ensure_project(trainer, "demo")
        created = trainer.cli_json(
            "training", "endpoints", "create", "chat", "--base", "tiny-64", "--project", "demo"
        )

        def get() -> dict[str, object]:
            return dict(
                trainer.cli_json("training", "endpoints", "get", "chat", "--project", "demo")
            )

        until(
            lambda: get()["phase"] == "READY",
            what="the endpoint to be READY",
            timeout=900,
            detail=lambda: trainer.log()[-3000:],
        )
        assert get()["engine"] == "vllm"
        shown = trainer.cli("training", "endpoints", "get", "chat", "--project", "demo").stdout
        assert re.search(r"^\s*Engine\s+vllm\s*$", shown, re.MULTILINE), shown
        assert len(_vllm_servers(trainer, str(created["id"]))) == 1

        with trainer.client() as admin:
            key = admin.create_token("demo-key", ["demo"]).token
        client = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=key)
        question: list[ChatCompletionMessageParam] = [{"role": "user", "content": "count one two"}]
        whole = client.chat.completions.create(
            model="tiny-64", messages=question, max_tokens=8, temperature=0
        )
        assert whole.model == "tiny-64"
        assert whole.usage is not None and whole.usage.completion_tokens > 0
        pieces, last = [], None
        for chunk in client.chat.completions.create(
            model="tiny-64", messages=question, max_tokens=8, temperature=0, stream=True
        ):
            assert isinstance(chunk, ChatCompletionChunk)
            assert chunk.model == "tiny-64"
            last = chunk
            pieces += [c.delta.content or "" for c in chunk.choices]
        assert "".join(pieces) == whole.choices[0].message.content
        assert last is not None and last.usage is not None
        assert last.usage.completion_tokens == whole.usage.completion_tokens

        trainer.cli("training", "endpoints", "delete", "chat", "--project", "demo")
        until(
            lambda: not _vllm_servers(trainer, str(created["id"])),
            what="vLLM's server to be gone",
            timeout=120,
        )
    finally:
        trainer.close()
