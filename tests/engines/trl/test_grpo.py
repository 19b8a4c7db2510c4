"""GRPO and GSPO jobs end to end: real TRL generation and updates on the tiny models, rewards
from the project's reward terms, every rollout kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from akka_training.core.resolved import Generation, ResumePoint, SourcePin
from akka_training.rewards.rollouts import read_step_file
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows, image_rows

# Every test here trains a real job.
pytestmark = pytest.mark.slow

TERMS = [
    {"name": "correct", "kind": "match", "mode": "final-number"},
    {"name": "format", "kind": "regex", "pattern": "####", "weight": 0.2},
    # The untrained model writes noise: a term that some of it passes gives GRPO a signal.
    {"name": "digit", "kind": "regex", "pattern": "[0-9]", "weight": 0.5},
]


def rl_config(method: str = "grpo", **rl: Any) -> dict[str, Any]:
    return {
        "method": method,
        "maxSeqLength": 96,
        "rlHyperparams": {
            "promptsPerStep": 2,
            "generationsPerPrompt": 4,
            "maxCompletionTokens": 10,
            "lora": {"rank": 4},
            "optimizer": {"learningRate": 1e-3},
            "training": {"maxSteps": 2},
            **rl,
        },
        "reward": {"terms": TERMS},
    }


def test_grpo_completes_and_keeps_every_rollout(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    rows = chat_rows(6)
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", rows),
        config=rl_config(),
        trainer_url=report_server.url,
        store=store,
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    assert report_server.kinds()[-1] == "finished"
    steps = {s["step"]: s["metrics"] for s in report_server.of("steps")}
    assert sorted(steps) == [1, 2]
    expected_answers = {r["messages"][-1]["content"] for r in rows}
    for step, figures in steps.items():
        for name in (
            "loss",
            "learning_rate",
            "entropy",
            "clip_ratio/low_mean",
            "clip_ratio/high_mean",
            "tokens",
            "tokens_per_second",
            "timing/generation",
            "timing/reward",
            "timing/update",
            "timing/step",
            "reward/mean",
            "reward/std",
            "terms/digit/share_mean",
            "completions/max_length",
            "groups/frac_zero_std",
            "memory/host_peak",
        ):
            assert name in figures, (step, name)
        assert "kl" not in figures  # klBeta 0: no reference model, no KL
        assert figures["timing/update"] == pytest.approx(
            figures["timing/step"] - figures["timing/generation"] - figures["timing/reward"]
        )
        report = next(r for r in report_server.of("rollouts") if r["step"] == step)
        assert report["blob"] == f"runs/run-1/rollouts/step-{step}.parquet"
        assert report["count"] == 8
        rollouts = read_step_file(store.get_bytes(report["blob"]))
        assert [r.index for r in rollouts] == list(range(8))
        assert [r.group for r in rollouts] == [0, 0, 0, 0, 1, 1, 1, 1]
        assert {r.expected for r in rollouts} <= expected_answers
        assert all(1 <= r.completion_tokens <= 10 for r in rollouts)
        assert all(r.finish_reason in ("stop", "length") for r in rollouts)
        assert all(r.finish_reason == "stop" or r.completion_tokens == 10 for r in rollouts)
        assert all(r.score == pytest.approx(sum(r.shares.values())) for r in rollouts)
        assert set(rollouts[0].shares) == {"correct", "format", "digit"}
        assert report["bestScore"] == max(r.score for r in rollouts)
        assert figures["reward/mean"] == pytest.approx(sum(r.score for r in rollouts) / 8)
        # Prompts and their completions: tokens counts both.
        assert figures["tokens"] > sum(r.completion_tokens for r in rollouts)
    # Some group's rollouts scored differently, so the policy moved.
    assert any(f["groups/frac_zero_std"] < 1 for f in steps.values())
    assert any(f["grad_norm"] > 0 for f in steps.values())
    fit = report_server.of("training")[0]["dataFit"]
    assert fit["rows"] == 6 and fit["rowsDropped"] == 0
    assert report_server.of("finished")[0]["summary"]["reward"] == steps[2]["reward/mean"]


def test_gspo_with_a_kl_penalty_completes_and_keeps_every_rollout(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(4)),
        config=rl_config("gspo", klBeta=0.05),
        trainer_url=report_server.url,
        store=store,
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    steps = {s["step"]: s["metrics"] for s in report_server.of("steps")}
    assert sorted(steps) == [1, 2]
    assert all("kl" in figures for figures in steps.values())
    assert [r["step"] for r in report_server.of("rollouts")] == [1, 2]
    assert [r["count"] for r in report_server.of("rollouts")] == [8, 8]
    assert report_server.kinds()[-1] == "finished"


def test_prompts_that_leave_no_room_for_a_completion_are_dropped_and_counted(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    rows = chat_rows(6) + [
        {
            "messages": [
                {"role": "user", "content": " ".join(["please"] * (10 + 4 * i)) + " 1 + 1?"},
                {"role": "assistant", "content": "#### 2"},
            ]
        }
        for i in range(6)
    ]
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", rows),
        config=rl_config(training={"maxSteps": 1}) | {"maxSeqLength": 64},
        trainer_url=report_server.url,
        store=store,
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    tokenizer = AutoTokenizer.from_pretrained(catalog["tiny-chat"]["path"])
    too_long = 0
    for row in rows:
        text = tokenizer.apply_chat_template(
            row["messages"][:-1], tokenize=False, add_generation_prompt=True
        )
        too_long += len(tokenizer(text)["input_ids"]) > 64 - 10
    fit = report_server.of("training")[0]["dataFit"]
    assert 0 < too_long < 6
    assert (fit["rows"], fit["rowsDropped"], fit["promptsTruncated"]) == (12, too_long, too_long)
    # No rollout of the step came from a dropped prompt.
    for rollout in read_step_file(store.get_bytes("runs/run-1/rollouts/step-1.parquet")):
        assert isinstance(rollout.prompt, list)
        text = tokenizer.apply_chat_template(
            rollout.prompt, tokenize=False, add_generation_prompt=True
        )
        assert len(tokenizer(text)["input_ids"]) <= 64 - 10


def test_an_image_text_model_warm_starts_grpo_from_its_sft_adapter(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    model = catalog["tiny-vision"]
    sft = make_spec(
        model=model,
        dataset=put_dataset(store, "colours", image_rows(4)),
        config={
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {"lora": {"rank": 4}, "training": {"maxSteps": 1, "batchSize": 2}},
        },
        trainer_url=report_server.url,
        store=store,
        run_id="sft",
    )
    assert run_in_process(sft, tmp_path / "sft") == 0
    sft_modules = report_server.of("finished")[0]["adapterModules"]
    report_server.reports.clear()

    grpo = make_spec(
        model=model,
        dataset=put_dataset(store, "maths", chat_rows(4)),
        config=rl_config(training={"maxSteps": 1}),
        trainer_url=report_server.url,
        store=store,
        run_id="grpo",
        source=SourcePin(
            kind="warm-start", run="sft", snapshot=None, step=1, weights="runs/sft/adapter/"
        ),
    )
    assert run_in_process(grpo, tmp_path / "grpo") == 0

    modules = report_server.of("training")[0]["adapterModules"]
    assert modules == sft_modules
    assert all(m.startswith("model.language_model.") for m in modules)
    assert report_server.of("rollouts")[0]["count"] == 8
    assert report_server.kinds()[-1] == "finished"


def test_images_in_a_reinforcement_dataset_fail_with_data_error(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-vision"],
        dataset=put_dataset(store, "colours", image_rows(4)),
        config=rl_config(),
        trainer_url=report_server.url,
        store=store,
    )

    assert run_in_process(spec, tmp_path / "job") == 1

    failed = report_server.of("failed")[0]
    assert failed["code"] == "data-error"
    assert "image" in failed["detail"]


def test_a_paused_grpo_run_resumes_from_its_snapshot(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    dataset = put_dataset(store, "maths", chat_rows(8))

    def spec(attempt: int, resume: ResumePoint | None = None) -> Any:
        made = make_spec(
            model=catalog["tiny-chat"],
            dataset=dataset,
            config=rl_config(training={"maxSteps": 4}),
            trainer_url=report_server.url,
            store=store,
            attempt=attempt,
            resume=resume,
            execution={"saveEvery": 100},
        )
        # Each report goes on its own, so the scripted pause lands before the last step.
        made.telemetry.report_seconds = 0
        return made

    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "steps" else "continue"
    )
    assert run_in_process(spec(1), tmp_path / "attempt-1") == 0
    snapshot = report_server.of("snapshots")[-1]
    assert report_server.kinds()[-1] == "stopped"
    assert snapshot["step"] < 4

    report_server.script = lambda kind, body, reports: "continue"
    report_server.reports.clear()
    resume = ResumePoint(
        snapshot=snapshot["name"],
        step=snapshot["step"],
        weights=snapshot["weights"],
        training_state=snapshot["trainingState"],
    )
    assert run_in_process(spec(2, resume), tmp_path / "attempt-2") == 0

    after = list(range(snapshot["step"] + 1, 5))
    assert [s["step"] for s in report_server.of("steps")] == after
    assert [r["step"] for r in report_server.of("rollouts")] == after
    assert all(s["metrics"]["tokens"] > 0 for s in report_server.of("steps"))
    assert report_server.kinds()[-1] == "finished"


def test_a_job_told_to_generate_with_vllm_where_there_is_none_fails_with_what_to_do(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(8)),
        config=rl_config(),
        trainer_url=report_server.url,
        store=store,
    )
    spec.generation = Generation(engine="vllm")  # the trainer's environment has no vLLM

    assert run_in_process(spec, tmp_path / "job") == 1

    failed = report_server.of("failed")[0]
    assert failed["code"] == "job-start-failed"
    assert failed["detail"] == (
        "trainer.reinforcement.trl-generation is vllm, but the job's Python environment has no "
        "vLLM: build one with scripts/setup-vllm-env.sh --gpu and run the trainer from it, or "
        "set trl-generation to auto or hf"
    )
