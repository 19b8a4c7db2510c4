"""`runs verify` on real GRPO runs of the development models through the real service, CLI and
local backend: a finished run's figures and rollouts check out; six planted differences (a
step's token count, a health figure, a completion changed under an unchanged score, a reward
mean, a term's share, a completion's length) are each named; a run still training reports no
false difference."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from akka_training.rewards.rollouts import read_step_file, write_step_file
from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import ensure_project, wait_for, write_plan
from tests.integration.test_adapters import finished
from tests.integration.test_training import EXAMPLES, rl_plan

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("verify"),
        {"trainer": {"dev-models-dir": str(dev_models), "controller": {"interval-seconds": 0.2}}},
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


def step_file(trainer: TrainerProcess, run_id: str, step: int) -> Path:
    return trainer.home / "blobs" / "runs" / run_id / "rollouts" / f"step-{step}.parquet"


def publish(trainer: TrainerProcess, run_id: str, step: int, figure: str, value: float) -> None:
    """Change one figure a step published, in the trainer's database."""
    with sqlite3.connect(trainer.home / "trainer.db") as db:
        (raw,) = db.execute(
            "SELECT metrics FROM steps WHERE run_id = ? AND step = ?", (run_id, step)
        ).fetchone()
        metrics = json.loads(raw)
        metrics[figure] = value
        db.execute(
            "UPDATE steps SET metrics = ? WHERE run_id = ? AND step = ?",
            (json.dumps(metrics), run_id, step),
        )


def published(trainer: TrainerProcess, run_id: str, step: int) -> dict[str, Any]:
    steps = trainer.cli_json("training", "runs", "metrics", run_id)["steps"]
    return dict(next(s for s in steps if s["step"] == step))


def test_verify_names_each_of_six_planted_differences(trainer: TrainerProcess) -> None:
    run = finished(trainer, rl_plan("grpo", steps=4), "grpo")
    assert run["phase"] == "COMPLETED", run["failure"]
    run_id = run["id"]

    clean = trainer.cli_json("training", "runs", "verify", run_id)
    assert [s["step"] for s in clean["steps"]] == [1, 2, 3, 4]
    assert all(s["rollouts"] == 8 and s["rescored"] == 8 for s in clean["steps"])
    # Rewards, shares, lengths, tokens and the health monitors, the history ones from step 4.
    assert all(s["figures"] >= 20 for s in clean["steps"])
    assert clean["differences"] == [] and clean["rollouts"] == []
    text = trainer.cli("training", "runs", "verify", run_id).stdout
    assert (
        f"Run {run_id}: all {sum(s['figures'] for s in clean['steps'])} published figures of "
        "its 4 steps match their recount from the 32 kept rollouts, and the run's reward gives "
        "the 32 rollouts scored again what they kept." in text
    )

    # 1. a step's token count, 2. a health figure, 3. a reward mean: as published.
    tokens = published(trainer, run_id, 2)["tokens"]
    publish(trainer, run_id, 2, "tokens", tokens + 7)
    answers = published(trainer, run_id, 3)["health/distinct_answers/step"]
    publish(trainer, run_id, 3, "health/distinct_answers/step", answers / 2)
    mean = published(trainer, run_id, 1)["reward/mean"]
    publish(trainer, run_id, 1, "reward/mean", mean + 0.25)
    # 4. a completion changed under an unchanged score, 5. a term's share changed under an
    # unchanged score, 6. a completion's length: in the kept rollouts.
    four = read_step_file(step_file(trainer, run_id, 4).read_bytes())
    first = four[0]
    other = "#### 12345" if first.values["correct"] == 1.0 else f"#### {first.expected}"
    write_step_file([replace(first, completion=other), *four[1:]], step_file(trainer, run_id, 4))
    one = read_step_file(step_file(trainer, run_id, 1).read_bytes())
    shares = {**one[2].shares, "format": one[2].shares["format"] + 0.25}
    one[2] = replace(one[2], shares=shares)
    write_step_file(one, step_file(trainer, run_id, 1))
    three = read_step_file(step_file(trainer, run_id, 3).read_bytes())
    three[1] = replace(three[1], completion_tokens=three[1].completion_tokens + 3)
    write_step_file(three, step_file(trainer, run_id, 3))

    answer = trainer.cli("training", "runs", "verify", run_id, "-o", "json", check=False)
    assert answer.returncode == 1
    found = json.loads(answer.stdout)
    figures = {(d["step"], d["figure"]): d for d in found["differences"]}
    assert figures[(2, "tokens")]["published"] == tokens + 7
    assert figures[(2, "tokens")]["recomputed"] == tokens
    assert figures[(3, "health/distinct_answers/step")]["recomputed"] == pytest.approx(answers)
    assert figures[(1, "reward/mean")]["recomputed"] == pytest.approx(mean)
    assert (1, "terms/format/share_mean") in figures
    assert (3, "completions/mean_length") in figures and (3, "tokens") in figures
    rescored = {(r["step"], r["index"], r["field"]) for r in found["rollouts"]}
    assert (4, 0, "values.correct") in rescored and (4, 0, "score") in rescored
    assert (1, 2, "shares.format") in rescored
    assert {(r["step"], r["index"]) for r in found["rollouts"]} == {(4, 0), (1, 2)}

    shown = trainer.cli("training", "runs", "verify", run_id, check=False).stdout
    assert "of its figures differ from their recount from the 32 kept rollouts" in shown
    assert (
        f"Run {run_id}: 2 kept rollouts are not what the run's reward gives them when scored "
        "again:" in shown
    )
    assert "tokens" in shown and "values.correct" in shown


def test_a_run_still_training_reports_no_false_difference(trainer: TrainerProcess) -> None:
    path = write_plan(trainer, rl_plan("grpo", steps=200), "plan-long.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    try:
        wait_for(trainer, run_id, lambda r: r.progress.observed_step >= 3, timeout=600)
        answer = trainer.cli("training", "runs", "verify", run_id, "-o", "json", check=False)
        assert answer.returncode == 0, answer.stdout + answer.stderr
        found = json.loads(answer.stdout)
        assert found["differences"] == [] and found["rollouts"] == []
        steps = [s["step"] for s in found["steps"]]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2
    finally:
        trainer.cli("training", "runs", "cancel", run_id, check=False)


def test_verify_refuses_a_run_with_no_step_in_yet(trainer: TrainerProcess) -> None:
    path = write_plan(trainer, rl_plan("grpo", steps=2), "plan-new.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "cancel", run_id, check=False)
    refused = trainer.cli("training", "runs", "verify", run_id, check=False)
    assert refused.returncode == 1
    assert refused.stderr == (
        f"error: Run {run_id} has no step whose report and rollouts are both in yet, so there "
        "is nothing to verify: wait for its first step.\n"
    )
