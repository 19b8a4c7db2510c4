"""Health monitors on real GRPO runs (TRL, tiny development models): a collapsed policy and a
judge that always fails each pause the run by their monitor, with the documented reason, and
the figures they saw recompute from the kept rollouts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_training.rewards.terms.answers import final_answer
from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import ensure_project, wait_phase, write_plan
from tests.rewards.servers import Reply, ScriptedServer

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("health"),
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2},
            }
        },
    ).start()
    ensure_project(t, "demo")
    t.cli(
        "training",
        "datasets",
        "register",
        "demo/arithmetic-prompts",
        "-f",
        str(EXAMPLES / "arithmetic-prompts.jsonl"),
    )
    yield t
    t.close()


def plan(terms: list[dict[str, Any]], monitors: dict[str, Any], **rl: Any) -> dict[str, Any]:
    return {
        "kind": "run",
        "project": "demo",
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "demo/arithmetic-prompts",
            "method": "grpo",
            "maxSeqLength": 128,
            "rlHyperparams": {
                "promptsPerStep": 2,
                "generationsPerPrompt": 4,
                "maxCompletionTokens": 6,
                "training": {"maxSteps": 8},
                **rl,
            },
            "reward": {"terms": terms},
            "monitors": monitors,
        },
        "execution": {"saveEvery": 100},
    }


def start(trainer: TrainerProcess, document: dict[str, Any], name: str) -> str:
    path = write_plan(trainer, document, name)
    return str(trainer.cli_json("training", "runs", "start", "-f", str(path))["id"])


def test_a_collapsed_policy_pauses_the_run_by_the_answer_collapse_monitor(
    trainer: TrainerProcess,
) -> None:
    # Sampling at a temperature near 0, the policy answers each prompt the same way every
    # time: at most 2 distinct final answers among 8 rollouts, 0.25 of the step at most.
    terms = [{"name": "correct", "kind": "match", "mode": "final-number"}]
    monitors = {
        "pauseOn": ["answer-collapse"],
        "consecutiveSteps": 2,
        "thresholds": {"answerCollapse": 0.3},
    }
    run_id = start(trainer, plan(terms, monitors, temperature=0.01), "collapse.yaml")
    paused = wait_phase(trainer, run_id, "PAUSED", "COMPLETED", "FAILED", timeout=600)
    assert paused.phase == "PAUSED"
    # Paused with --checkpoint save semantics: a snapshot at the step the monitor tripped.
    assert paused.progress.observed_step == 2
    assert paused.progress.saved_step == 2
    record = trainer.cli_json("training", "runs", "get", run_id)
    pause = record["health"]["pause"]
    assert (pause["monitor"], pause["figure"], pause["step"]) == (
        "answer-collapse",
        "health/distinct_answers/step",
        2,
    )
    assert pause["reason"].startswith(
        "The answer-collapse monitor paused the run at step 2: health/distinct_answers/step "
        f"was {pause['value']:.4g} (at or below 0.3) for 2 steps in a row"
    )
    assert f"akka training runs rollouts {run_id} --step 2" in pause["reason"]
    # The figure it saw recomputes from the rollouts the step kept.
    kept = trainer.cli_json("training", "runs", "rollouts", run_id, "--step", "2")["rollouts"]
    answers = {final_answer(r["completion"]) for r in kept}
    assert pause["value"] == pytest.approx(len(answers) / len(kept))
    # runs get shows the Health section; runs metrics carries the figures.
    text = trainer.cli("training", "runs", "get", run_id).stdout
    assert "Health" in text and "answer-collapse" in text and "PAST THRESHOLD" in text
    assert pause["reason"].split(":")[0] in text
    metrics = trainer.cli_json("training", "runs", "metrics", run_id, "--fields", "health/")
    assert [s["step"] for s in metrics["steps"]] == [1, 2]
    assert all("health/distinct_completions/group" in s for s in metrics["steps"])


def test_a_judge_that_always_fails_pauses_the_run_by_the_judge_failures_monitor(
    trainer: TrainerProcess,
) -> None:
    judge = ScriptedServer(lambda path, body: Reply({"error": "down"}, status=500))
    try:
        terms: list[dict[str, Any]] = [
            {"name": "correct", "kind": "match", "mode": "final-number"},
            {
                "name": "judge",
                "kind": "judge",
                "endpoint": judge.url + "/v1",
                "model": "grader",
                "instructions": "Score the answer.",
                "timeoutSeconds": 1,
            },
        ]
        monitors = {"pauseOn": ["judge-failures"], "consecutiveSteps": 1}
        run_id = start(trainer, plan(terms, monitors), "judge.yaml")
        paused = wait_phase(trainer, run_id, "PAUSED", "COMPLETED", "FAILED", timeout=600)
    finally:
        judge.stop()
    assert paused.phase == "PAUSED"
    assert judge.requests, "the judge was asked"
    record = trainer.cli_json("training", "runs", "get", run_id)
    health = record["health"]
    assert health["figures"]["health/term_failures/judge"] == 1.0
    assert health["pause"]["reason"] == (
        "The judge-failures monitor paused the run at step 1: health/judge_failures was 1 "
        "(at or above 0.2) (a judge or http term fails to score many rollouts). Inspect the "
        f"rollouts with `akka training runs rollouts {run_id} --step 1`, then `akka training "
        f"runs resume {run_id}`, or branch from the snapshot with other settings."
    )
    assert paused.progress.saved_step == 1
    kept = trainer.cli_json("training", "runs", "rollouts", run_id, "--step", "1")["rollouts"]
    assert kept and all("judge" in r["failures"] for r in kept)
