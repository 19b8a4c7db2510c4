"""The reward preview task, run by the task job entry point with real reports over HTTP and a
real blob store: per term the values on reference answers, empty completions and the prompts,
and the two flags (a term that gives the reference answer 0, one that gives an empty completion
full marks) in their words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.tasks import PreviewParams, TaskSpec
from akka_training.engines.tasks.job import run_task
from akka_training.engines.tasks.preview import sample
from akka_training.engines.tasks.reporter import TaskReporter
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_dataset

ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"What is {a} + 2?"},
            {"role": "assistant", "content": f"#### {a + 2}"},
        ]
    }
    for a in range(10)
]
REWARD = {
    "terms": [
        {"name": "correct", "kind": "match", "mode": "final-number"},
        # Wrong on purpose: no reference answer starts with "Answer:".
        {"name": "strict", "kind": "regex", "pattern": "^Answer:"},
        # Wrong on purpose: an empty completion is always short enough.
        {"name": "brief", "kind": "length", "maxTokens": 5, "weight": 0.5},
    ]
}


def test_preview_flags_a_term_that_scores_the_reference_0_and_one_that_pays_for_nothing(
    store: LocalBlobStore, report_server: ReportServer, tmp_path: Path
) -> None:
    store.put_bytes(
        "datasets/sha256/abc.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    )
    params = PreviewParams.model_validate(
        {"reward": REWARD, "dataset": "datasets/sha256/abc.jsonl", "rows": 4}
    )
    spec = TaskSpec(
        task_id="tk1",
        kind="preview",
        project="maths",
        trainer_url=report_server.url,
        storage_url=store.url,
        params=params.to_json(),
    )
    reporter = TaskReporter(report_server.url, "tk1", "secret", patience=5)
    try:
        assert run_task(spec, reporter, tmp_path) == 0
    finally:
        reporter.close()

    result = report_server.of("finished")[0]["result"]
    assert result["rows"] == 4 and result["withReference"] == 4
    terms = {t["name"]: t for t in result["terms"]}
    assert terms["correct"]["values"]["reference"] == {
        "count": 4.0,
        "min": 1.0,
        "mean": 1.0,
        "max": 1.0,
    }
    assert terms["correct"]["values"]["empty"]["max"] == 0.0
    assert terms["correct"]["flags"] == []
    assert terms["strict"]["flags"] == [
        "gives the reference answer 0 on all 4 rows that have one: it cannot reward a correct "
        "completion"
    ]
    assert terms["brief"]["flags"] == [
        "gives an empty completion full marks on all 4 rows: the policy can earn it by saying "
        "nothing"
    ]


def test_rows_are_sampled_evenly_and_all_of_a_small_dataset() -> None:
    assert sample(10, 4) == [0, 2, 5, 7]
    assert sample(3, 8) == [0, 1, 2]


def test_the_estimate_counts_the_dev_model_from_its_files_and_says_what_it_rests_on(
    store: LocalBlobStore,
    report_server: ReportServer,
    tmp_path: Path,
    catalog: dict[str, dict[str, Any]],
) -> None:
    model = catalog["tiny-chat"]
    dataset = put_dataset(store, "sums", ROWS)
    rl: dict[str, Any] = {"promptsPerStep": 2, "generationsPerPrompt": 4, "maxCompletionTokens": 8}
    rl["lora"] = {"rank": 4}
    spec = make_spec(
        model=model,
        dataset=dataset,
        config={
            "method": "grpo",
            "maxSeqLength": 128,
            "model": {"precision": "FP32"},
            "rlHyperparams": rl,
            "reward": REWARD,
        },
        trainer_url=report_server.url,
        store=store,
    )
    assert spec.settings.config.reward is not None
    params = PreviewParams(
        reward=spec.settings.config.reward,
        dataset=dataset.blob,
        rows=2,
        settings=spec.settings,
        envelope_gpu_memory_gib=2.0,
        accelerator="NVIDIA H200",
    )
    estimate = run_preview(params, report_server, store, tmp_path)["estimate"]

    # The same figures, recomputed from config.json for a Qwen3 layout (untied output head).
    cfg = json.loads((Path(model["path"]) / "config.json").read_text())
    h, i, v, layers = (
        cfg["hidden_size"],
        cfg["intermediate_size"],
        cfg["vocab_size"],
        cfg["num_hidden_layers"],
    )
    q, kv = (
        cfg["num_attention_heads"] * cfg["head_dim"],
        cfg["num_key_value_heads"] * cfg["head_dim"],
    )
    per_layer = h * q + 2 * h * kv + q * h + 2 * cfg["head_dim"] + 3 * h * i + 2 * h
    parameters = 2 * v * h + layers * per_layer + h
    lora = layers * 4 * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    gib = float(1 << 30)
    assert estimate["parameters"] == parameters
    assert estimate["flopParameters"] == parameters - v * h
    assert estimate["adapterParameters"] == lora
    memory = estimate["memory"]
    assert memory["weightsGib"] == pytest.approx(parameters * 4 / gib)
    assert memory["adapterGib"] == pytest.approx(lora * 16 / gib)
    # one prompt group of 4 sequences at 128 tokens, 34 bytes x 2 (FP32) per token, unit, layer
    assert memory["activationsGib"] == pytest.approx(4 * 128 * h * layers * 68 / gib)
    assert memory["totalGib"] == pytest.approx(
        memory["weightsGib"] + memory["adapterGib"] + memory["activationsGib"]
    )
    assert estimate["fits"] is True and estimate["deviceMemoryGib"] == 2.0
    assert estimate["tokensPerStep"] == 8 * 128
    assert estimate["stepSeconds"] == pytest.approx(
        6 * (parameters - v * h) * 8 * 128 / (0.4 * 67e12)
    )
    assert estimate["restsOn"][0] == (
        f"{parameters:,} parameters counted from the model's safetensors headers, held at FP32 "
        "(4 bytes each) on every GPU (no sharding)"
    )
    assert estimate["restsOn"][2] == (
        "activations of 68 bytes per token, hidden unit and layer at FP32 (hidden "
        f"size {h}, {layers} layers from config.json), one prompt group of 4 sequences "
        "a micro-batch, 8 sequences (2 prompts x 4) a step, every sequence at maxSeqLength 128"
    )
    assert estimate["restsOn"][-1].endswith(
        "at an assumed 40% MFU of the NVIDIA H200's 67 TFLOP/s FP32 dense peak x 1 GPU(s); "
        "generation and scoring not included"
    )

    too_small = params.model_copy(update={"envelope_gpu_memory_gib": 0.0001, "accelerator": "cpu"})
    estimate = run_preview(too_small, report_server, store, tmp_path / "again")["estimate"]
    assert estimate["fits"] is False and estimate["stepSeconds"] is None
    assert estimate["restsOn"][-1] == (
        "no step time: the pool's accelerator (cpu) has no known FP32 peak"
    )


def run_preview(
    params: PreviewParams, server: ReportServer, store: LocalBlobStore, workdir: Path
) -> dict[str, Any]:
    spec = TaskSpec(
        task_id="tk2",
        kind="preview",
        project="test",
        trainer_url=server.url,
        storage_url=store.url,
        params=params.to_json(),
    )
    reporter = TaskReporter(server.url, "tk2", "secret", patience=5)
    try:
        assert run_task(spec, reporter, workdir) == 0
    finally:
        reporter.close()
    result: dict[str, Any] = server.of("finished")[-1]["result"]
    return result
