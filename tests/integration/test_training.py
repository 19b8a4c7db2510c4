"""Real training through the real service and CLI: SFT, GRPO and GSPO with TRL on the tiny
development models, and what a user reads afterwards (the adapter, data fit, memory, rollouts,
figures, telemetry, the Grafana link)."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, BatchEncoding

from akka_training.devmodels.catalog import read_catalog
from akka_training.rewards.rollouts import read_step_file, write_step_file
from akka_training.telemetry import catalog as names
from akka_training.telemetry.catalog import metric, prometheus_name
from akka_training.testing.otlp_receiver import OtlpReceiver
from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    wait_for,
    wait_phase,
    write_plan,
)

# Every test here trains for real in a trainer process.
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"
SHORT = 24  # a maxSeqLength some rows pass (rows are 24 or 25 tokens), to see data fit count them
IMAGE_ROWS = [
    {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
                    },
                    {"type": "text", "text": f"Count {i}"},
                ],
            },
            {"role": "assistant", "content": f"#### {i}"},
        ]
    }
    for i in range(8)
]


@pytest.fixture(scope="module")
def receiver() -> Any:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def trainer(
    tmp_path_factory: pytest.TempPathFactory, dev_models: Path, receiver: OtlpReceiver
) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("training"),
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2},
                "telemetry": {"collector-endpoint": receiver.endpoint},
                "grafana": {"url": "http://grafana.example.invalid", "link-lifetime-seconds": 900},
            }
        },
    ).start()
    ensure_project(t, "demo")
    for name in ("arithmetic", "arithmetic-prompts"):
        t.cli(
            "training",
            "datasets",
            "register",
            f"demo/{name}",
            "-f",
            str(EXAMPLES / f"{name}.jsonl"),
        )
    register_dataset(t, "demo/pictures", IMAGE_ROWS)
    yield t
    t.close()


def sft_plan(steps: int = 8, **config: Any) -> dict[str, Any]:
    return {
        "kind": "run",
        "project": "demo",
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "demo/arithmetic",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {
                "optimizer": {"learningRate": 5e-3},
                "training": {"maxSteps": steps, "batchSize": 8},
            },
            **config,
        },
        "execution": {"saveEvery": 4},
    }


def rl_plan(method: str, steps: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "run",
        "project": "demo",
        "baseModel": "tiny-chat",
        **extra,
        "config": {
            "dataset": "demo/arithmetic-prompts",
            "method": method,
            "maxSeqLength": 128,
            "rlHyperparams": {
                "promptsPerStep": 2,
                "generationsPerPrompt": 4,
                "maxCompletionTokens": 6,
                "training": {"maxSteps": steps},
            },
            "reward": {
                "terms": [
                    {"name": "format", "kind": "regex", "weight": 0.5, "pattern": "^#### [0-9]+$"},
                    {"name": "correct", "kind": "match", "mode": "final-number"},
                ]
            },
        },
        "execution": {"saveEvery": 2},
    }


def run_to_end(trainer: TrainerProcess, plan: dict[str, Any]) -> dict[str, Any]:
    path = write_plan(trainer, plan, f"plan-{plan['config']['method']}.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "wait", run_id, "--exit-status", timeout=600)
    return dict(trainer.cli_json("training", "runs", "get", run_id))


def blob_dir(trainer: TrainerProcess, key: str) -> Path:
    return trainer.home / "blobs" / key


def test_sft_trains_an_adapter_that_changes_the_model(
    trainer: TrainerProcess, dev_models: Path
) -> None:
    run = run_to_end(trainer, sft_plan())
    assert run["phase"] == "COMPLETED" and run["progress"]["observedStep"] == 8
    assert run["results"]["trainingLoss"] is not None
    adapter = blob_dir(trainer, run["results"]["model"])
    assert (adapter / "adapter_config.json").is_file() and (
        adapter / "adapter_model.safetensors"
    ).is_file()
    base = AutoModelForCausalLM.from_pretrained(dev_models / "tiny-chat")
    tokenizer = AutoTokenizer.from_pretrained(dev_models / "tiny-chat")
    ids = tokenizer("What is 2 + 3?", return_tensors="pt")
    with torch.no_grad():
        before = base(**ids).logits
        tuned = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(dev_models / "tiny-chat"), adapter
        )
        after = tuned(**ids).logits
    assert not torch.allclose(before, after)
    out = trainer.cli("training", "runs", "get", run["id"]).stdout
    assert "Memory:" in out and "not available on CPU" in out
    assert run["memory"]["host_peak"] > 0
    assert "Data fit:" in out and "Rows truncated at maxSeqLength" in out
    snapshots = trainer.cli_json("training", "runs", "snapshots", run["id"])
    assert [s["name"] for s in snapshots] == ["step-4", "step-8"]


def test_data_fit_equals_an_independent_count(trainer: TrainerProcess, dev_models: Path) -> None:
    run = run_to_end(trainer, sft_plan(steps=2, maxSeqLength=SHORT))
    tokenizer = AutoTokenizer.from_pretrained(dev_models / "tiny-chat")
    truncated = answers = dropped = 0
    rows = [json.loads(line) for line in (EXAMPLES / "arithmetic.jsonl").read_text().splitlines()]
    for row in rows:
        encoded = tokenizer.apply_chat_template(
            row["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert isinstance(encoded, BatchEncoding)  # return_dict=True
        ids, mask = encoded["input_ids"], encoded["assistant_masks"]
        truncated += len(ids) > SHORT
        if any(mask[:SHORT]):
            answers += any(mask[SHORT:])
        else:
            dropped += 1
    fit = run["dataFit"]
    assert (fit["rowsTruncated"], fit["answersTruncated"], fit["rowsDropped"]) == (
        truncated,
        answers,
        dropped,
    )
    assert truncated > 0


def test_pause_and_resume_continue_the_same_loss_curve(trainer: TrainerProcess) -> None:
    # Long enough (a few seconds) that the pause lands in the middle of training.
    straight = run_to_end(trainer, sft_plan(steps=150))
    path = write_plan(trainer, sft_plan(steps=150), "paused.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    wait_for(trainer, run_id, lambda r: r.progress.observed_step >= 3, timeout=300)
    trainer.cli("training", "runs", "pause", run_id, "--checkpoint", "save")
    paused = wait_phase(trainer, run_id, "PAUSED", timeout=300)
    assert paused.progress.saved_step == paused.progress.observed_step
    trainer.cli("training", "runs", "resume", run_id)
    wait_phase(trainer, run_id, "COMPLETED", timeout=300)
    one = trainer.cli_json("training", "runs", "metrics", straight["id"], "--fields", "loss")[
        "steps"
    ]
    two = trainer.cli_json("training", "runs", "metrics", run_id, "--fields", "loss")["steps"]
    assert [s["step"] for s in two] == list(range(1, 151))
    assert {s["attempt"] for s in two} == {1, 2}
    assert [s["loss"] for s in two] == pytest.approx([s["loss"] for s in one], rel=1e-3)


def test_continue_trains_exactly_the_steps_asked_as_the_uninterrupted_run(
    trainer: TrainerProcess,
) -> None:
    # A linear schedule over 12 steps: a continuation that stretched it would drift at once.
    plan = sft_plan(steps=12)
    straight = run_to_end(trainer, plan)
    continued = trainer.cli_json(
        "training", "runs", "continue", straight["id"], "--snapshot", "step-4", "--steps", "5"
    )
    assert continued["settings"]["config"]["hyperparams"]["training"]["maxSteps"] == 5
    trainer.cli("training", "runs", "wait", continued["id"], "--exit-status", timeout=600)
    record = trainer.cli_json("training", "runs", "get", continued["id"])
    assert record["progress"]["observedStep"] == 9
    assert record["progress"]["totalSteps"] == 9
    one = trainer.cli_json("training", "runs", "metrics", straight["id"], "--fields", "loss")
    two = trainer.cli_json("training", "runs", "metrics", continued["id"], "--fields", "loss")
    before = {s["step"]: s["loss"] for s in one["steps"]}
    after = {s["step"]: s["loss"] for s in two["steps"]}
    assert sorted(after) == [5, 6, 7, 8, 9]
    for step, loss in after.items():
        assert loss == pytest.approx(before[step], rel=1e-4), step


@pytest.mark.parametrize("method", ["grpo", "gspo"])
def test_reinforcement_keeps_every_rollout_and_its_figures_match_them(
    trainer: TrainerProcess, method: str
) -> None:
    run = run_to_end(trainer, rl_plan(method))
    assert run["phase"] == "COMPLETED"
    data = trainer.cli_json("training", "runs", "rollouts", run["id"], "--step", "1")
    assert data["steps"] == [1, 2, 3, 4]
    metrics = {
        s["step"]: s for s in trainer.cli_json("training", "runs", "metrics", run["id"])["steps"]
    }
    for step in data["steps"]:
        kept = trainer.cli_json("training", "runs", "rollouts", run["id"], "--step", str(step))
        rollouts = kept["rollouts"]
        assert kept["count"] == len(rollouts) == 2 * 4
        scores = [r["score"] for r in rollouts]
        figures = metrics[step]
        # The published figures, recomputed from the stored rollouts.
        assert figures["reward/mean"] == pytest.approx(statistics.fmean(scores))
        assert figures["reward/std"] == pytest.approx(statistics.pstdev(scores))
        assert figures["reward/max"] == pytest.approx(max(scores))
        for term in ("format", "correct"):
            shares = [r["shares"][term] for r in rollouts]
            assert figures[f"terms/{term}/share_mean"] == pytest.approx(statistics.fmean(shares))
            assert figures[f"terms/{term}/share_std"] == pytest.approx(statistics.pstdev(shares))
        lengths = [r["completionTokens"] for r in rollouts]
        assert figures["completions/min_length"] == min(lengths)
        assert figures["completions/max_length"] == max(lengths)
    worst = trainer.cli_json("training", "runs", "rollouts", run["id"], "--worst", "3")["rollouts"]
    best = trainer.cli_json("training", "runs", "rollouts", run["id"], "--best", "3")["rollouts"]
    last = trainer.cli_json("training", "runs", "rollouts", run["id"])
    assert last["step"] == 4
    everything = sorted(r["score"] for r in last["rollouts"])
    assert [r["score"] for r in worst] == everything[:3]
    assert [r["score"] for r in best] == sorted(everything, reverse=True)[:3]
    table = trainer.cli("training", "runs", "rollouts", run["id"], "--worst", "3").stdout
    assert "lowest score first" in table and "What is" in table
    # The stored file is the record: it reads back the same rollouts.
    key = run["id"]
    stored = read_step_file(
        (trainer.home / "blobs" / f"runs/{key}/rollouts/step-4.parquet").read_bytes()
    )
    assert sorted(r.score for r in stored) == everything
    # runs verify counts every step's figures again from the kept files and finds them equal.
    verified = trainer.cli_json("training", "runs", "verify", run["id"])
    assert [s["step"] for s in verified["steps"]] == [1, 2, 3, 4]
    assert all(s["rollouts"] == 8 and s["figures"] > 10 for s in verified["steps"])
    assert verified["differences"] == []
    text = trainer.cli("training", "runs", "verify", run["id"]).stdout
    assert f"Run {run['id']}: all " in text
    assert "published figures of its 4 steps match their recount from the 32 kept" in text
    # A step file that no longer holds what the step published: verify names the difference.
    step_file = trainer.home / "blobs" / f"runs/{key}/rollouts/step-4.parquet"
    original = step_file.read_bytes()
    rollouts = read_step_file(original)
    write_step_file([replace(r, score=r.score + 1.0) for r in rollouts], step_file)
    try:
        refused = trainer.cli("training", "runs", "verify", run["id"], "-o", "json", check=False)
        assert refused.returncode == 1
        differences = json.loads(refused.stdout)["differences"]
        assert {d["step"] for d in differences} == {4}
        mean = next(d for d in differences if d["figure"] == "reward/mean")
        assert mean["recomputed"] == pytest.approx(mean["published"] + 1.0)
        shown = trainer.cli("training", "runs", "verify", run["id"], check=False).stdout
        assert "of its figures differ from their recount" in shown and "reward/mean" in shown
    finally:
        step_file.write_bytes(original)


def test_an_sft_run_has_no_rollouts(trainer: TrainerProcess) -> None:
    runs = [r for r in trainer.cli_json("training", "runs", "list") if r["method"] == "sft"]
    out = trainer.cli("training", "runs", "rollouts", runs[0]["id"]).stdout
    assert "only grpo and gspo runs keep rollouts" in out
    refused = trainer.cli("training", "runs", "verify", runs[0]["id"], check=False)
    assert refused.returncode == 1
    assert (
        f"Run {runs[0]['id']} is a sft run: only grpo and gspo runs keep rollouts to verify "
        "their figures against." in refused.stderr
    )


def test_an_image_text_adapter_covers_only_the_language_backbone(trainer: TrainerProcess) -> None:
    plan = sft_plan(steps=2)
    plan["baseModel"] = "tiny-vision"
    plan["config"]["dataset"] = "demo/pictures"
    run = run_to_end(trainer, plan)
    modules = run["results"]["adapterModules"]
    assert modules and not any("vision" in m or "audio" in m for m in modules)
    warm = rl_plan("grpo", steps=2, source={"run": run["id"]})
    warm["baseModel"] = "tiny-vision"
    assert run_to_end(trainer, warm)["phase"] == "COMPLETED"


def test_grpo_warm_starts_from_an_sft_adapter(trainer: TrainerProcess) -> None:
    sft = next(
        r
        for r in trainer.cli_json("training", "runs", "list", "--phase", "COMPLETED")
        if r["method"] == "sft" and r["baseModel"] == "tiny-chat"
    )
    run = run_to_end(trainer, rl_plan("grpo", steps=2, source={"run": sft["id"]}))
    assert run["phase"] == "COMPLETED"
    assert run["source"] == {"run": sft["id"], "snapshot": None, "kind": "warm-start"}


def test_job_and_service_metrics_reach_the_collector(
    trainer: TrainerProcess, receiver: OtlpReceiver
) -> None:
    runs = trainer.cli_json("training", "runs", "list", "--phase", "COMPLETED")
    # The first test's run: 8 steps, with snapshots at 4 and 8.
    sft = next(r for r in runs if r["method"] == "sft" and r["progress"]["observedStep"] == 8)
    counter = receiver.wait_for_metric(
        names.PREFIX + "sft.step.count",
        lambda m: m.resource.get(names.RUN_ID) == sft["id"],
        timeout=30,
    )
    assert counter.kind == "sum" and counter.monotonic
    assert counter.resource[names.PROJECT] == "demo"
    assert counter.resource[names.RUN_ATTEMPT] == 1
    assert max(p.value or 0 for p in counter.points) == sft["progress"]["observedStep"]
    assert (
        prometheus_name(metric(names.PREFIX + "sft.step.count"))
        == "akka_optimize_training_sft_step_count_total"
    )
    grpo = next(r for r in runs if r["method"] == "grpo")
    timing = receiver.wait_for_metric(
        names.PREFIX + "rl.step.timing",
        lambda m: m.resource.get(names.RUN_ID) == grpo["id"],
        timeout=30,
    )
    assert timing.kind == "histogram" and timing.unit == "s"
    phases = {p.attributes.get(names.PREFIX + "step.phase") for p in timing.points}
    assert {"generation", "reward", "update"} <= phases
    declared = receiver.wait_for_metric(names.PREFIX + "pool.devices.declared", timeout=40)
    point = declared.point({names.POOL_NAME: "default"})
    assert point is not None and point.value == 1
    assert names.RUN_ID not in point.attributes
    # The job's spans join the run's trace.
    submit = receiver.wait_for_span(
        names.PREFIX + "run.submit",
        lambda s: s.attributes.get(names.RUN_ID) == sft["id"],
        timeout=30,
    )
    job = receiver.wait_for_span(
        names.PREFIX + "job", lambda s: s.resource.get(names.RUN_ID) == sft["id"], timeout=30
    )
    assert job.trace_id == submit.trace_id
    for name in ("run.admit", "job.launch"):
        span = receiver.wait_for_span(
            names.PREFIX + name, lambda s: s.attributes.get(names.RUN_ID) == sft["id"], timeout=30
        )
        assert span.trace_id == submit.trace_id
    for name in ("job.prepare", "job.step"):
        span = receiver.wait_for_span(
            names.PREFIX + name, lambda s: s.resource.get(names.RUN_ID) == sft["id"], timeout=30
        )
        assert span.trace_id == submit.trace_id and span.parent_span_id == job.span_id
    # A snapshot's save is part of its step.
    save = receiver.wait_for_span(
        names.PREFIX + "job.snapshot.save",
        lambda s: s.resource.get(names.RUN_ID) == sft["id"],
        timeout=30,
    )
    steps = {
        s.span_id: s
        for s in receiver.spans(names.PREFIX + "job.step")
        if s.resource.get(names.RUN_ID) == sft["id"]
    }
    assert steps[save.parent_span_id or ""].attributes[names.STEP] == save.attributes[names.STEP]


def test_the_prometheus_endpoint_is_off_where_the_service_exports_over_otlp(
    trainer: TrainerProcess, receiver: OtlpReceiver
) -> None:
    # One path per deployment: with a collector, the capacity gauges go there (above), and
    # /metrics says so instead of serving every series a second time.
    admin = {"Authorization": f"Bearer {trainer.admin_token}"}
    answered = httpx.get(f"{trainer.url}/metrics", headers=admin)
    assert answered.status_code == 404
    assert answered.json()["error"]["message"].startswith(
        f"this deployment exports the service's metrics over OTLP to {receiver.endpoint} "
    )


def test_the_grafana_link_carries_a_token_that_verifies_and_expires_when_printed(
    trainer: TrainerProcess,
) -> None:
    run = trainer.cli_json("training", "runs", "list")[0]
    link = trainer.cli_json("training", "runs", "grafana", run["id"])
    url = httpx.URL(link["url"])
    assert url.host == "grafana.example.invalid"
    assert url.params["var-run"] == run["id"] and url.params["var-project"] == "demo"
    token = url.params["auth_token"]
    jwks = httpx.get(f"{trainer.url}/v1/grafana/jwks").json()
    key = jwt.PyJWKSet.from_dict(jwks)[jwt.get_unverified_header(token)["kid"]]
    claims = jwt.decode(
        token, key.key, algorithms=["RS256"], audience="grafana", issuer="akka-training"
    )
    assert claims["project"] == "demo"
    assert claims["exp"] == int(datetime.fromisoformat(link["expiresAt"]).timestamp())
    assert claims["exp"] - claims["iat"] == 900
    text = trainer.cli("training", "runs", "grafana", run["id"])
    assert text.stdout.startswith("http://grafana.example.invalid/d/")
    assert "until" in text.stderr


def test_a_job_over_its_host_memory_fails_with_the_host_memory_reason(
    trainer_factory: Any, dev_models: Path
) -> None:
    catalog = read_catalog(dev_models)
    for model in catalog:
        for envelope in model["envelopes"]:
            envelope["hostMemoryGib"] = 0.25
    t = trainer_factory(
        {
            "trainer": {
                "catalog": catalog,
                "local": {"enforce-host-memory": True},
                "controller": {"interval-seconds": 0.2},
            }
        }
    )
    ensure_project(t, "demo")
    t.cli(
        "training",
        "datasets",
        "register",
        "demo/arithmetic",
        "-f",
        str(EXAMPLES / "arithmetic.jsonl"),
    )
    path = write_plan(t, sft_plan(steps=2))
    run_id = t.cli_json("training", "runs", "start", "-f", str(path))["id"]
    failed = wait_phase(t, run_id, "FAILED", timeout=300)
    assert failed.failure is not None and failed.failure.code == "host-oom"
    assert "ran out of host memory" in failed.failure.first_line


def test_a_run_that_diverges_fails_at_the_step_whose_loss_is_nan(trainer: TrainerProcess) -> None:
    # Within the plan's bounds the tiny model does not diverge: the run warm-starts from an
    # adapter whose weights are scaled to about 1e30, so real training overflows at once.
    source = run_to_end(trainer, sft_plan(steps=2))
    assert source["phase"] == "COMPLETED"
    scaled = 0
    for weights in (trainer.home / "blobs" / "runs" / source["id"]).rglob("*.safetensors"):
        tensors = load_file(weights)
        save_file({name: t * 1e30 for name, t in tensors.items()}, weights)
        scaled += 1
    assert scaled > 0
    path = write_plan(trainer, {**sft_plan(steps=4), "source": {"run": source["id"]}})
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    waited = trainer.cli("training", "runs", "wait", run_id, check=False, timeout=300)
    assert "step 1 of 4  loss NaN" in waited.stdout
    run = trainer.cli_json("training", "runs", "get", run_id)
    assert run["failure"]["code"] == "training-error"
    assert (
        "step 1: loss is NaN (the run diverged; lower the learning rate"
        in (run["failure"]["reason"])
    )
    # The step that diverged is kept, its loss as NaN, and nothing after it.
    metrics = trainer.cli_json("training", "runs", "metrics", run["id"])
    assert [s["step"] for s in metrics["steps"]] == [1]
    assert metrics["steps"][0]["loss"] == "NaN"
    table = trainer.cli("training", "runs", "metrics", run["id"], "--fields", "loss").stdout
    assert table.split() == ["STEP", "LOSS", "1", "NaN"]
