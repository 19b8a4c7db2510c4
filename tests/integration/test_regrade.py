"""`runs regrade` on real runs of the development models through the real service and CLI: a
finished GRPO run's kept rollouts scored again with changed weights and a new term, as a task on
the local backend, checked against a recomputation from the stored step files; the run's own
files and figures unchanged; the refusals in their words."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from akka_training.rewards.rollouts import read_step_file
from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import ensure_project
from tests.integration.test_adapters import finished
from tests.integration.test_training import EXAMPLES, rl_plan, sft_plan

pytestmark = pytest.mark.slow

NEW_REWARD = {
    "terms": [
        {"name": "format", "kind": "regex", "weight": 1.0, "pattern": "^#### [0-9]+$"},
        {"name": "correct", "kind": "match", "mode": "final-number", "weight": 2.0},
        {"name": "short", "kind": "length", "weight": 0.25, "maxTokens": 3, "slackTokens": 2},
    ]
}


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("regrade"),
        {"trainer": {"dev-models-dir": str(dev_models), "controller": {"interval-seconds": 0.2}}},
    ).start()
    ensure_project(t, "demo")
    for name in ("arithmetic", "arithmetic-prompts"):
        path = str(EXAMPLES / f"{name}.jsonl")
        t.cli("training", "datasets", "register", f"demo/{name}", "-f", path)
    yield t
    t.close()


@pytest.fixture(scope="module")
def grpo_run(trainer: TrainerProcess) -> dict[str, Any]:
    run = finished(trainer, rl_plan("grpo", steps=3), "grpo")
    assert run["phase"] == "COMPLETED", run["failure"]
    return run


def step_files(trainer: TrainerProcess, run_id: str) -> dict[int, Path]:
    folder = trainer.home / "blobs" / "runs" / run_id / "rollouts"
    return {int(p.stem.split("-")[1]): p for p in sorted(folder.glob("step-*.parquet"))}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected_figures(path: Path) -> dict[str, Any]:
    """The new figures recomputed here from a stored step file: each term's raw value is what
    the rule says for the stored completion, weighted by the new weights."""
    rollouts = read_step_file(path)
    new_scores: list[float] = []
    shares: dict[str, list[float]] = {"format": [], "correct": [], "short": []}
    for r in rollouts:
        fmt = r.values["format"]  # the same term as before: its raw value is unchanged
        correct = r.values["correct"]
        tokens = r.completion_tokens
        short = 1.0 if tokens <= 3 else max(0.0, 1.0 - (tokens - 3) / 2)
        parts = {"format": 1.0 * fmt, "correct": 2.0 * correct, "short": 0.25 * short}
        for name, value in parts.items():
            shares[name].append(value)
        new_scores.append(sum(parts.values()))
    n = len(rollouts)
    return {
        "count": n,
        "oldMean": sum(r.score for r in rollouts) / n,
        "newMean": sum(new_scores) / n,
        "newShares": {k: sum(v) / n for k, v in shares.items()},
    }


def test_regrade_scores_the_kept_rollouts_again_and_changes_nothing_of_the_run(
    trainer: TrainerProcess, grpo_run: dict[str, Any], tmp_path: Path
) -> None:
    run_id = grpo_run["id"]
    files = step_files(trainer, run_id)
    assert sorted(files) == [1, 2, 3]
    before = {step: digest(p) for step, p in files.items()}
    metrics_before = trainer.cli_json("training", "runs", "metrics", run_id)
    reward = tmp_path / "reward.yaml"
    reward.write_text(yaml.safe_dump(NEW_REWARD))

    task = trainer.cli_json(
        "training", "runs", "regrade", run_id, "--reward", str(reward), "--steps", "2-3"
    )

    assert task["kind"] == "regrade" and task["state"] == "SUCCEEDED", task
    result = task["result"]
    assert result["oldWeights"] == {"format": 0.5, "correct": 1.0}
    assert result["newWeights"] == {"format": 1.0, "correct": 2.0, "short": 0.25}
    assert [s["step"] for s in result["steps"]] == [2, 3]
    for s in result["steps"]:
        want = expected_figures(files[s["step"]])
        assert s["count"] == want["count"]
        assert s["oldMean"] == pytest.approx(want["oldMean"])
        assert s["newMean"] == pytest.approx(want["newMean"])
        assert s["newShares"] == pytest.approx(want["newShares"])
        assert s["newFailures"] == {}
    # The run's mean reward at those steps is what the regrade read as the old mean.
    published = {m["step"]: m for m in metrics_before["steps"]}
    for s in result["steps"]:
        assert published[s["step"]]["reward/mean"] == pytest.approx(s["oldMean"])
    # The new rollouts are kept beside the run's, under the task's own prefix.
    kept = trainer.home / "blobs" / result["output"]
    assert sorted(p.name for p in kept.iterdir()) == ["step-2.parquet", "step-3.parquet"]
    again = read_step_file(kept / "step-2.parquet")
    assert again[0].weights == {"format": 1.0, "correct": 2.0, "short": 0.25}
    # Nothing of the run changed: its step files, its figures.
    assert {step: digest(p) for step, p in step_files(trainer, run_id).items()} == before
    assert trainer.cli_json("training", "runs", "metrics", run_id) == metrics_before
    # The result stays readable.
    assert trainer.cli_json("training", "tasks", "get", task["id"])["result"] == result

    text = trainer.cli("training", "runs", "regrade", run_id, "--reward", str(reward)).stdout
    assert f"Regrade of run {run_id} (task " in text
    assert "old weights: format 0.5, correct 1" in text
    assert "new weights: format 1, correct 2, short 0.25" in text
    header = next(line for line in text.splitlines() if line.startswith("STEP"))
    assert header.split("   ")[:4] == ["STEP", "ROLLOUTS", "OLD MEAN", "NEW MEAN"]
    assert "short (old -> new)" in header
    lines = {line.split()[0]: line for line in text.splitlines() if line[:1].isdigit()}
    assert sorted(lines) == ["1", "2", "3"]
    one = expected_figures(files[1])
    assert lines["1"].split()[2:4] == [f"{one['oldMean']:.3f}", f"{one['newMean']:.3f}"]
    assert "; the run is unchanged." in text


def test_regrade_refusals_say_what_to_change(
    trainer: TrainerProcess, grpo_run: dict[str, Any], tmp_path: Path
) -> None:
    run_id = grpo_run["id"]
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(NEW_REWARD))

    unknown = trainer.cli(
        "training", "runs", "regrade", "run-nosuch", "--reward", str(good), check=False
    )
    assert unknown.returncode != 0
    assert unknown.stderr == "error: There is no run 'run-nosuch'.\n"

    sft = finished(trainer, sft_plan(steps=2), "sft")
    no_rollouts = trainer.cli(
        "training", "runs", "regrade", sft["id"], "--reward", str(good), check=False
    )
    assert no_rollouts.stderr == (
        f"error: Run {sft['id']} is a sft run: it kept no rollouts to regrade (only grpo and "
        "gspo runs keep them).\n"
    )

    bad_kind = tmp_path / "bad.yaml"
    bad_kind.write_text(json.dumps({"terms": [{"name": "x", "kind": "vibes"}]}))
    refused = trainer.cli(
        "training", "runs", "regrade", run_id, "--reward", str(bad_kind), check=False
    )
    assert refused.stderr == (
        "error: The reward was refused (1 problem):\n"
        "  - terms[0].kind must be one of match, regex, length, rule, judge or http.\n"
    )

    empty = tmp_path / "empty.yaml"
    empty.write_text("terms: []\n")
    no_terms = trainer.cli(
        "training", "runs", "regrade", run_id, "--reward", str(empty), check=False
    )
    assert no_terms.stderr == (
        "error: The reward was refused (1 problem):\n"
        "  - The reward has no terms: add at least one under terms (for example "
        "{name: correct, kind: match, mode: exact}).\n"
    )

    a_list = tmp_path / "list.yaml"
    a_list.write_text("- 1\n- 2\n")
    not_a_reward = trainer.cli(
        "training", "runs", "regrade", run_id, "--reward", str(a_list), check=False
    )
    assert not_a_reward.stderr == (
        f"error: {a_list} does not hold a reward (a mapping with terms, as a plan's "
        "config.reward).\n"
    )

    no_steps = trainer.cli(
        "training",
        "runs",
        "regrade",
        run_id,
        "--reward",
        str(good),
        "--steps",
        "7-9",
        check=False,
    )
    assert no_steps.stderr == (
        f"error: Run {run_id} kept no rollouts in steps 7-9; steps with rollouts: 1-3.\n"
    )
    bad_steps = trainer.cli(
        "training",
        "runs",
        "regrade",
        run_id,
        "--reward",
        str(good),
        "--steps",
        "two",
        check=False,
    )
    assert bad_steps.returncode == 2
    assert bad_steps.stderr.splitlines()[-1] == (
        "Error: Invalid value for '--steps': give a step or a range of steps (N, A-B, A- or "
        "-B), not 'two'."
    )

    bad_regex = tmp_path / "regex.yaml"
    bad_regex.write_text(
        yaml.safe_dump({"terms": [{"name": "broken", "kind": "regex", "pattern": "(["}]})
    )
    broken = trainer.cli(
        "training", "runs", "regrade", run_id, "--reward", str(bad_regex), check=False
    )
    assert broken.returncode == 1
    assert broken.stderr == (
        "error: The reward was refused (1 problem):\n"
        "  - terms[0].pattern '([' is not a valid regular expression (unterminated character "
        "set at position 1); fix the pattern.\n"
    )


def test_dry_run_preview_flags_terms_before_any_device_is_claimed(
    trainer: TrainerProcess, tmp_path: Path
) -> None:
    plan = rl_plan("grpo")
    plan["config"]["reward"] = {
        "terms": [
            {"name": "correct", "kind": "match", "mode": "final-number"},
            {"name": "strict", "kind": "regex", "pattern": "^Answer:"},
            {"name": "brief", "kind": "length", "maxTokens": 5, "weight": 0.5},
        ]
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    runs_before = trainer.cli_json("training", "runs", "list")

    answer = trainer.cli_json(
        "training", "runs", "start", "-f", str(path), "--dry-run", "--preview", "4"
    )

    assert answer["dryRun"] is True
    result = answer["preview"]["result"]
    assert answer["preview"]["kind"] == "preview" and result["rows"] == 4
    terms = {t["name"]: t for t in result["terms"]}
    assert terms["correct"]["flags"] == []
    assert terms["correct"]["values"]["reference"]["mean"] == 1.0
    assert terms["strict"]["flags"] == [
        "gives the reference answer 0 on all 4 rows that have one: it cannot reward a correct "
        "completion"
    ]
    assert terms["brief"]["flags"] == [
        "gives an empty completion full marks on all 4 rows: the policy can earn it by saying "
        "nothing"
    ]
    # The estimate: the catalog's trl envelope for tiny-chat states 2 GiB per GPU.
    estimate = result["estimate"]
    assert estimate["parameters"] > 0 and estimate["precision"] == "FP32"
    assert estimate["deviceMemoryGib"] == 2.0 and estimate["fits"] is True
    # Nothing was started.
    assert trainer.cli_json("training", "runs", "list") == runs_before

    text = trainer.cli("training", "runs", "start", "-f", str(path), "--dry-run", "--preview", "4")
    assert "Nothing was started." in text.stdout
    assert ": fits within 2 GiB (base weights " in text.stdout
    assert "The estimate rests on:\n  - " in text.stdout
    assert "Flag: term 'strict' gives the reference answer 0 on all 4 rows" in text.stdout

    alone = trainer.cli("training", "runs", "start", "-f", str(path), "--preview", "4", check=False)
    assert alone.stderr == "error: --preview goes with --dry-run: add --dry-run.\n"
    sft = tmp_path / "sft.yaml"
    sft.write_text(yaml.safe_dump(sft_plan()))
    no_reward = trainer.cli(
        "training", "runs", "start", "-f", str(sft), "--dry-run", "--preview", "2", check=False
    )
    assert no_reward.stderr == (
        "error: A sft plan has no reward terms to preview: --preview scores the reward of a "
        "grpo or gspo plan.\n"
    )


def test_pipeline_dry_run_previews_each_reinforcement_stage_with_its_own_terms(
    trainer: TrainerProcess, tmp_path: Path
) -> None:
    grpo = rl_plan("grpo")["config"]
    gspo = rl_plan("gspo")["config"]
    gspo["reward"] = {
        "terms": [
            {"name": "correct", "kind": "match", "mode": "final-number"},
            {"name": "strict", "kind": "regex", "pattern": "^Answer:"},
        ]
    }
    stages = [
        {"name": "warmup", "config": sft_plan()["config"]},
        {"name": "first", "config": grpo},
        {"name": "second", "source": {"run": "@first"}, "config": gspo},
        # Trains on the first stage's output: nothing to sample before that stage runs.
        {"name": "refine", "config": {**grpo, "dataset": "@first"}},
    ]
    for stage in stages:
        stage["baseModel"] = "tiny-chat"
    plan = {"kind": "pipeline", "project": "demo", "stages": stages}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(plan))
    pipelines_before = trainer.cli_json("training", "pipelines", "list")
    runs_before = trainer.cli_json("training", "runs", "list")

    answer = trainer.cli_json(
        "training", "pipelines", "start", "-f", str(path), "--dry-run", "--preview", "3"
    )

    assert answer["dryRun"] is True and len(answer["stages"]) == 4
    previewed = {s["name"]: s for s in answer["preview"]["stages"]}
    assert previewed["warmup"]["omitted"] == "is a sft stage: it has no reward terms"
    assert previewed["refine"]["omitted"].startswith("trains on the output of stage first")
    assert "task" not in previewed["warmup"] and "task" not in previewed["refine"]
    first = previewed["first"]["task"]["result"]
    second = previewed["second"]["task"]["result"]
    assert previewed["first"]["task"]["kind"] == "preview" and first["rows"] == 3
    # Each stage is scored with its own terms.
    assert [t["name"] for t in first["terms"]] == ["format", "correct"]
    assert [t["name"] for t in second["terms"]] == ["correct", "strict"]
    # Each stage's task estimates that stage's memory and step time too.
    assert first["estimate"]["parameters"] == second["estimate"]["parameters"] > 0
    assert second["estimate"]["fits"] is True
    assert {t["name"]: t["flags"] for t in second["terms"]} == {
        "correct": [],
        "strict": [
            "gives the reference answer 0 on all 3 rows that have one: it cannot reward a "
            "correct completion"
        ],
    }
    assert trainer.cli_json("training", "pipelines", "list") == pipelines_before
    assert trainer.cli_json("training", "runs", "list") == runs_before

    text = trainer.cli(
        "training", "pipelines", "start", "-f", str(path), "--dry-run", "--preview", "3"
    ).stdout
    assert "The pipeline is valid: 4 stage(s). Nothing was started." in text
    assert "Stage warmup (sft): not previewed: it is a sft stage: it has no reward terms." in text
    assert "Stage second (gspo):\nReward preview on 3 rows" in text
    assert "Flag: term 'strict' gives the reference answer 0 on all 3 rows" in text

    alone = trainer.cli(
        "training", "pipelines", "start", "-f", str(path), "--preview", "3", check=False
    )
    assert alone.stderr == "error: --preview goes with --dry-run: add --dry-run.\n"
    only_sft = tmp_path / "sft-pipeline.yaml"
    only_sft.write_text(yaml.safe_dump({**plan, "stages": stages[:1]}))
    refused = trainer.cli(
        "training", "pipelines", "start", "-f", str(only_sft), "--dry-run", "--preview", "3",
        check=False,
    )  # fmt: skip
    assert refused.stderr == (
        "error: The pipeline has no grpo or gspo stage to preview: --preview scores the reward "
        "of a reinforcement stage whose dataset is registered (stage warmup is a sft stage: it "
        "has no reward terms).\n"
    )
