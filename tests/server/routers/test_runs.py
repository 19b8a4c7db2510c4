"""Runs through the real app: dry runs, refusals with every problem, start, list, get, cancel,
pause and resume of a queued run, and what a run's job reported (snapshots, metrics, lineage)."""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from akka_training.core.clock import ManualClock
from akka_training.rewards.rollouts import Rollout, step_file_bytes
from akka_training.storage.models import Attempt
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, register, sft_plan


@pytest.fixture
def dataset(api: httpx.Client) -> dict[str, Any]:
    return register(api, "maths/train", chat_rows(12))


def test_a_dry_run_resolves_every_reference_and_starts_nothing(
    api: httpx.Client, dataset: dict[str, Any], trainer: InProcessTrainer
) -> None:
    response = api.post("/v1/runs", params={"dry_run": "true"}, json=sft_plan())

    assert response.status_code == 200
    body = response.json()
    assert body["dryRun"] is True
    settings = body["settings"]
    chat = trainer.ctx.model("tiny-chat")
    assert (settings["method"], settings["engine"]) == ("sft", "trl")
    assert settings["baseModel"] == {
        "id": "tiny-chat",
        "path": chat.path,
        "revision": chat.revision,
        "modality": "text",
        "contextLength": 2048,
    }
    assert settings["dataset"] == {
        "ref": "maths/train",
        "name": "maths/train",
        "version": 1,
        "sha256": dataset["sha256"],
        "rows": 12,
        "bytes": dataset["bytes"],
        "format": "chat",
        "hasImages": False,
        "blob": dataset["blob"],
    }
    config = settings["config"]
    assert config["dataset"] == f"maths/train@sha256:{dataset['sha256']}"
    assert config["model"] == {"precision": "FP32"}  # the envelope's
    assert config["hyperparams"]["lora"] == {
        "rank": 8,
        "alpha": 16.0,
        "dropout": 0.0,
        "targetModules": "all-linear",
    }
    assert settings["execution"]["pool"] == "default"
    assert api.get("/v1/runs").json() == []


def test_a_refused_plan_lists_every_problem_at_once(api: httpx.Client, dataset: Any) -> None:
    plan = sft_plan(
        config={
            "dataset": "maths/nope",
            "method": "grpo",
            "maxSeqLength": 4096,
            "hyperparams": None,
            "rlHyperparams": {"promptsPerStep": 3},
        },
        execution={"gpus": 2, "pool": "gpu"},
    )
    problems = [
        ("execution.pool", "There is no pool 'gpu'; set execution.pool to one of: default."),
        (
            "config.dataset",
            "config.dataset: There is no dataset maths/nope; datasets in maths: train.",
        ),
        (
            "config.reward.terms",
            "A grpo run needs at least one reward term: add one under config.reward.terms (for "
            "example {name: correct, kind: match, mode: exact}).",
        ),
        (
            "execution.gpus",
            "No envelope in this deployment's catalog runs grpo on tiny-chat at 2 GPU(s) under "
            "trl: it is qualified at 1 GPU(s). Set execution.gpus to one of these.",
        ),
        (
            "config.maxSeqLength",
            "config.maxSeqLength (4096) is above the context length of tiny-chat (2048); set it "
            "to 2048 or less.",
        ),
        (
            "config.rlHyperparams.promptsPerStep",
            "config.rlHyperparams.promptsPerStep (3) must be divisible by execution.gpus (2); set "
            "promptsPerStep to a multiple of 2 (such as 4) or change execution.gpus.",
        ),
    ]
    lines = "".join(f"\n  - {message}" for _, message in problems)
    refusal = error(
        "plan-refused",
        f"The plan was refused (6 problems):{lines}",
        [{"field": field, "message": message} for field, message in problems],
    )

    assert answer(api.post("/v1/runs", params={"dry_run": "true"}, json=plan)) == (422, refusal)
    assert answer(api.post("/v1/runs", json=plan)) == (422, refusal)
    assert api.get("/v1/runs").json() == []


def test_a_plan_with_an_unknown_field_names_it_and_the_known_ones(
    api: httpx.Client, dataset: Any
) -> None:
    plan = sft_plan(config={"epochs": 2})
    message = (
        "config.epochs is not a known field in config; remove it or check its spelling (known "
        "fields: dataset, evalDataset, method, maxSeqLength, model, hyperparams, rlHyperparams, "
        "reward, tools, monitors, seed)."
    )

    assert answer(api.post("/v1/runs", json=plan)) == (
        422,
        error(
            "plan-refused",
            f"The plan was refused (1 problem):\n  - {message}",
            [{"field": "config.epochs", "message": message}],
        ),
    )


def test_an_unknown_field_and_the_rules_problems_come_together(
    api: httpx.Client, dataset: Any
) -> None:
    plan = sft_plan(
        config={"epochs": 2, "maxSeqLength": 4096},
        execution={"gpus": 2, "pool": "gpu", "rolloutGpus": 1, "saveEvery": "often"},
    )
    answered = api.post("/v1/runs", params={"dry_run": "true"}, json=plan)
    assert answered.status_code == 422
    problems = [(p["field"], p["message"]) for p in answered.json()["error"]["problems"]]
    assert problems == [
        (
            "config.epochs",
            "config.epochs is not a known field in config; remove it or check its spelling "
            "(known fields: dataset, evalDataset, method, maxSeqLength, model, hyperparams, "
            "rlHyperparams, reward, tools, monitors, seed).",
        ),
        (
            "execution.saveEvery",
            "execution.saveEvery is 'often'; set a whole number.",
        ),
        ("execution.pool", "There is no pool 'gpu'; set execution.pool to one of: default."),
        (
            "execution.gpus",
            "No envelope in this deployment's catalog runs sft on tiny-chat at 2 GPU(s) under "
            "trl: it is qualified at 1 GPU(s). Set execution.gpus to one of these.",
        ),
        (
            "config.maxSeqLength",
            "config.maxSeqLength (4096) is above the context length of tiny-chat (2048); set it "
            "to 2048 or less.",
        ),
        (
            "execution.rolloutGpus",
            "execution.rolloutGpus (1) is not supported under trl: the rollout engine runs on "
            "the training devices. Leave rolloutGpus out or set it to 0, and count every device "
            "in execution.gpus.",
        ),
    ]
    assert answered.json()["error"]["message"].startswith("The plan was refused (6 problems):")


def test_a_bad_monitor_name_and_a_bad_correctness_term_come_together(
    api: httpx.Client, dataset: Any
) -> None:
    plan = sft_plan(
        config={
            "method": "grpo",
            "hyperparams": None,
            "rlHyperparams": {"maxCompletionTokens": 64},
            "reward": {"terms": [{"name": "correct", "kind": "match"}]},
            "monitors": {"pauseOn": ["length-drift", "vibes"], "correctnessTerm": "right"},
        },
    )
    answered = api.post("/v1/runs", params={"dry_run": "true"}, json=plan)
    assert answered.status_code == 422
    problems = [(p["field"], p["message"]) for p in answered.json()["error"]["problems"]]
    assert problems == [
        (
            "config.monitors.pauseOn[1]",
            "config.monitors.pauseOn[1]: set it to 'answer-collapse', 'zero-spread', "
            "'length-drift', 'length-clipped', 'entropy-collapse', 'judge-failures', "
            "'judge-latency', 'reward-hacking' or 'non-finite-loss'.",
        ),
        (
            "config.monitors.correctnessTerm",
            "config.monitors.correctnessTerm 'right' is not a reward term of this plan; name "
            "one of correct.",
        ),
    ]


def test_an_unknown_field_of_a_term_lists_the_fields_of_its_kind(
    api: httpx.Client, dataset: Any
) -> None:
    terms = [
        {"name": "shape", "kind": "regex", "patern": "^####"},
        {"name": "short", "kind": "length", "maxTokens": 8, "slack": 2},
    ]
    plan = sft_plan(config={"method": "grpo", "hyperparams": None, "reward": {"terms": terms}})
    answered = api.post("/v1/runs", params={"dry_run": "true"}, json=plan)
    assert answered.status_code == 422
    problems = [(p["field"], p["message"]) for p in answered.json()["error"]["problems"]]
    assert problems == [
        ("config.reward.terms[0].pattern", "config.reward.terms[0].pattern is required; set it."),
        (
            "config.reward.terms[0].patern",
            "config.reward.terms[0].patern is not a known field in config.reward.terms[0]; "
            "remove it or check its spelling (known fields: name, weight, kind, pattern).",
        ),
        (
            "config.reward.terms[1].slack",
            "config.reward.terms[1].slack is not a known field in config.reward.terms[1]; "
            "remove it or check its spelling (known fields: name, weight, kind, minTokens, "
            "maxTokens, slackTokens).",
        ),
    ]


def test_a_started_run_waits_in_the_queue_and_reads_back(api: httpx.Client, dataset: Any) -> None:
    resolved = api.post("/v1/runs", params={"dry_run": "true"}, json=sft_plan()).json()
    run = api.post("/v1/runs", json=sft_plan()).json()

    assert {k: run[k] for k in ("phase", "project", "method", "engine", "baseModel")} == {
        "phase": "QUEUED",
        "project": "maths",
        "method": "sft",
        "engine": "trl",
        "baseModel": "tiny-chat",
    }
    assert (run["dataset"], run["pool"], run["gpus"], run["attempt"]) == (
        "maths/train:v1",
        "default",
        1,
        0,
    )
    assert run["progress"] == {"observedStep": 0, "totalSteps": None, "savedStep": None}
    assert run["queue"] == {
        "position": 1,
        "pool": "default",
        "devices": 1,
        "free": 2,
        "quota": 2,
        "held": 0,
        "waitingFor": ["the controller's next pass"],
    }
    assert run["failure"] is None
    # What it trains under is what the dry run printed.
    assert run["settings"] == resolved["settings"]
    assert api.get(f"/v1/runs/{run['id'][:6]}").json()["id"] == run["id"]
    listed = api.get("/v1/runs", params={"phase": "open"}).json()
    assert [(r["id"], r["phase"]) for r in listed] == [(run["id"], "QUEUED")]
    assert "settings" not in listed[0]  # the listing is brief
    assert api.get("/v1/runs", params={"phase": "completed"}).json() == []
    assert answer(api.get("/v1/runs", params={"phase": "done"})) == (
        400,
        error(
            "invalid",
            "--phase takes open or one of QUEUED, PREPARING, TRAINING, PAUSING, PAUSED, "
            "COMPLETED, FAILED, CANCELLED.",
        ),
    )


def test_a_submission_id_starts_a_run_once(api: httpx.Client, dataset: Any) -> None:
    first = api.post("/v1/runs", json=sft_plan(submissionId="nightly-42")).json()
    second = api.post("/v1/runs", json=sft_plan(submissionId="nightly-42")).json()

    assert second["id"] == first["id"] and second["existing"] is True
    assert len(api.get("/v1/runs").json()) == 1


def test_a_queued_run_cancels_and_gives_its_claim_back(api: httpx.Client, dataset: Any) -> None:
    run = api.post("/v1/runs", json=sft_plan()).json()
    assert [c["for"] for c in api.get("/v1/capacity").json()["claims"]] == [run["id"]]

    cancelled = api.post(f"/v1/runs/{run['id']}/cancel").json()

    assert (cancelled["phase"], cancelled["failure"]) == ("CANCELLED", None)
    assert api.get("/v1/capacity").json()["claims"] == []
    assert answer(api.post(f"/v1/runs/{run['id']}/cancel")) == (
        409,
        error("conflict", f"Run {run['id']} is already CANCELLED."),
    )
    assert answer(api.post(f"/v1/runs/{run['id']}/pause", json={"checkpoint": "save"})) == (
        409,
        error("conflict", f"Run {run['id']} is CANCELLED; only an open run can pause."),
    )


def test_a_queued_run_pauses_and_resumes(api: httpx.Client, dataset: Any) -> None:
    run = api.post("/v1/runs", json=sft_plan()).json()
    path = f"/v1/runs/{run['id']}"

    paused = api.post(f"{path}/pause", json={"checkpoint": "save"}).json()
    assert (paused["phase"], paused["requested"]) == ("PAUSED", None)
    assert api.get("/v1/capacity").json()["claims"] == []
    assert api.post(f"{path}/pause", json={"checkpoint": "latest"}).json()["phase"] == "PAUSED"

    resumed = api.post(f"{path}/resume").json()
    assert resumed["phase"] == "QUEUED" and resumed["queue"]["position"] == 1
    claims = api.get("/v1/capacity").json()["claims"]
    assert [(c["for"], c["state"]) for c in claims] == [(run["id"], "QUEUED")]
    assert answer(api.post(f"{path}/resume")) == (
        409,
        error("conflict", f"Run {run['id']} is QUEUED; only a PAUSED run resumes."),
    )
    assert answer(api.post(f"{path}/pause", json={"checkpoint": "soon"})) == (
        400,
        error("invalid", "--checkpoint takes save (snapshot at the next step) or latest."),
    )


def test_what_the_job_reported_reads_back_and_a_branch_joins_the_tree(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)

    def report(kind: str, body: dict[str, Any]) -> str:
        response = job.post(f"/v1/jobs/{run_id}/attempts/{launch.attempt}/{kind}", json=body)
        assert response.status_code == 200, response.text
        action: str = response.json()["action"]
        return action

    assert report("training", {"totalSteps": 4}) == "continue"
    for step in (1, 2, 3, 4):
        assert report("steps", {"step": step, "metrics": {"loss": 4.0 / step, "lr": 1e-4}})
        if step % 2 == 0:
            keys = f"runs/{run_id}/snapshots/step-{step}"
            body = {"name": f"step-{step}", "step": step, "weights": f"{keys}/weights/"}
            if step == 4:  # a job that measured what it stored
                body |= {"weightsBytes": 1536, "trainingStateBytes": 3 * 2**20}
            report("snapshots", {**body, "trainingState": f"{keys}/training-state/"})
    report("finished", {"adapter": f"runs/{run_id}/adapter/", "step": 4})

    done = api.get(f"/v1/runs/{run_id}").json()
    assert done["phase"] == "COMPLETED"
    assert done["progress"] == {"observedStep": 4, "totalSteps": 4, "savedStep": 4}
    assert (done["results"]["model"], done["results"]["trainingLoss"]) == (
        f"runs/{run_id}/adapter/",
        1.0,
    )
    snapshots = api.get(f"/v1/runs/{run_id}/snapshots").json()
    assert [(s["name"], s["step"], s["attempt"], s["swept"]) for s in snapshots] == [
        ("step-2", 2, 1, False),
        ("step-4", 4, 1, False),
    ]
    assert snapshots[0]["trainingState"] == f"runs/{run_id}/snapshots/step-2/training-state/"
    assert [(s["weightsBytes"], s["trainingStateBytes"]) for s in snapshots] == [
        (None, None),
        (1536, 3 * 2**20),
    ]
    metrics = api.get(f"/v1/runs/{run_id}/metrics", params={"fields": "loss"}).json()
    assert (metrics["run"], metrics["method"]) == (run_id, "sft")
    assert [(s["step"], s["attempt"], s["loss"]) for s in metrics["steps"]] == [
        (1, 1, 4.0),
        (2, 1, 2.0),
        (3, 1, 4.0 / 3),
        (4, 1, 1.0),
    ]
    assert all("lr" not in s for s in metrics["steps"])

    child = api.post(f"/v1/runs/{run_id}/branch", json={"snapshot": "step-2", "steps": 3}).json()
    assert child["source"] == {"run": run_id, "snapshot": "step-2", "kind": "branch"}
    assert child["settings"]["config"]["hyperparams"]["training"]["maxSteps"] == 3
    assert api.get(f"/v1/runs/{child['id']}/tree").json() == {
        "root": run_id,
        "focus": child["id"],
        "tree": {
            "run": run_id,
            "method": "sft",
            "phase": "COMPLETED",
            "from": None,
            "modelName": None,
            "children": [
                {
                    "run": child["id"],
                    "method": "sft",
                    "phase": "QUEUED",
                    "from": {"kind": "branch", "snapshot": "step-2"},
                    "modelName": None,
                    "children": [],
                }
            ],
        },
    }
    assert answer(api.post(f"/v1/runs/{run_id}/branch", json={"snapshot": "step-9"})) == (
        404,
        error(
            "not-found", f"Run {run_id} has no snapshot 'step-9'; its snapshots: step-2, step-4."
        ),
    )
    # A continuation trains the steps asked beyond its snapshot, not that many plus its step.
    continued = api.post(
        f"/v1/runs/{run_id}/continue", json={"snapshot": "step-2", "steps": 2}
    ).json()
    assert continued["settings"]["config"]["hyperparams"]["training"]["maxSteps"] == 2
    assert continued["source"] == {"run": run_id, "snapshot": "step-2", "kind": "continue"}


def test_run_figures_are_totals_over_the_steps_the_run_kept(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)

    def step(number: int, tokens: float, seconds: float, mfu: float, padding: float) -> None:
        metrics = {
            "loss": 1.0,
            "tokens": tokens,
            "timing/step": seconds,
            "tokens_per_second": tokens / seconds,
            "mfu": mfu,
            "padding_share": padding,
        }
        body = {"step": number, "metrics": metrics}
        response = job.post(f"/v1/jobs/{run_id}/attempts/{launch.attempt}/steps", json=body)
        assert response.status_code == 200, response.text

    fit = {"rows": 12, "rowsTruncated": 0, "answersTruncated": 0, "rowsDropped": 0}
    body = {"totalSteps": 2, "dataFit": {**fit, "maxSeqLength": 256}}
    assert job.post(f"/v1/jobs/{run_id}/attempts/{launch.attempt}/training", json=body).is_success
    step(1, 100.0, 0.1, 0.5, 0.5)  # a quick first step: 1,000 tokens/s
    step(2, 5000.0, 10.0, 0.1, 0.0)
    # Step 2 trained again (after a pause at the latest snapshot): only the second one counts.
    step(2, 5575.0, 13.8, 0.2, 0.2)

    cost = api.get(f"/v1/runs/{run_id}").json()["cost"]
    # 5,675 tokens in 13.9 s, not the mean of 1,000 and 404 tokens/s.
    assert cost["tokensPerSecond"] == pytest.approx(5675 / 13.9)
    assert cost["mfu"] == pytest.approx((0.5 * 0.1 + 0.2 * 13.8) / 13.9)
    slots = 100 / 0.5 + 5575 / 0.8  # real tokens / (1 - padding share), per step
    padding = api.get(f"/v1/runs/{run_id}").json()["dataFit"]["paddingShare"]
    assert padding == pytest.approx(1 - 5675 / slots)


def test_reports_that_came_in_one_batch_are_each_kept_steps_at_their_own_time(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    run_id, job, base = _job_of_a_new_run(api, trainer)
    # The job started a second ago: the steps below ended after that.
    with trainer.ctx.db.session() as session:
        attempt = session.scalars(select(Attempt).where(Attempt.run_id == run_id)).one()
        assert attempt.started_at is not None
        attempt.started_at -= timedelta(seconds=1)
    # Three short steps that ended 0.25, 0.15 and 0.05 s before their report went, and the
    # snapshot of step 2 between them.
    keys = f"runs/{run_id}/snapshots/step-2"
    snapshot = {"name": "step-2", "step": 2, "weights": f"{keys}/weights/"}
    reports = [
        {"kind": "steps", "body": {"step": 1, "totalSteps": 3, "metrics": {"loss": 1.0}, "ago": 0.25}},
        {"kind": "steps", "body": {"step": 2, "totalSteps": 3, "metrics": {"loss": 0.5}, "ago": 0.15}},
        {"kind": "snapshots", "body": snapshot},
        {"kind": "steps", "body": {"step": 3, "totalSteps": 3, "metrics": {"loss": 0.25}, "ago": 0.05}},
    ]  # fmt: skip
    sent = time.time()
    response = job.post(f"{base}/batch", json={"reports": reports})
    answered = time.time()
    assert response.status_code == 200, response.text
    assert response.json() == {"action": "continue"}

    kept = api.get(f"/v1/runs/{run_id}/metrics").json()["steps"]
    assert [(s["step"], s["loss"]) for s in kept] == [(1, 1.0), (2, 0.5), (3, 0.25)]
    at = [datetime.fromisoformat(s["at"]).timestamp() for s in kept]
    assert [round(b - a, 2) for a, b in itertools.pairwise(at)] == [0.1, 0.1]
    # Stamped when the batch came, less its `ago`: between the send and the answer, less 0.25 s.
    assert sent - 0.25 - 1e-3 <= at[0] <= answered - 0.25 + 1e-3
    run = api.get(f"/v1/runs/{run_id}").json()
    assert (run["progress"]["observedStep"], run["progress"]["savedStep"]) == (3, 2)
    assert [s["name"] for s in api.get(f"/v1/runs/{run_id}/snapshots").json()] == ["step-2"]

    # A pause asked for meanwhile is the answer to the next batch.
    assert api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "save"}).is_success
    more = [{"kind": "steps", "body": {"step": 4, "metrics": {"loss": 0.2}, "ago": 0.0}}]
    assert job.post(f"{base}/batch", json={"reports": more}).json() == {"action": "save-and-stop"}


def test_a_step_reported_again_replaces_its_figures_rollouts_and_snapshot_in_a_batch_or_not(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    run_id, job, base = _job_of_a_new_run(api, trainer)

    def rollouts(step: int, scores: list[float], file: str) -> dict[str, Any]:
        key = f"runs/{run_id}/rollouts/{file}"
        kept = [rollout_record(step, i, score) for i, score in enumerate(scores)]
        trainer.ctx.blobs.put_bytes(key, step_file_bytes(kept))
        body = {"step": step, "blob": key, "count": len(scores)}
        return {
            "kind": "rollouts",
            "body": body | {"bestScore": max(scores), "worstScore": min(scores)},
        }

    def step(number: int, loss: float, tokens: float) -> dict[str, Any]:
        metrics = {"loss": loss, "tokens": tokens, "timing/step": 1.0}
        return {"kind": "steps", "body": {"step": number, "metrics": metrics}}

    snapshot = {"name": "step-2", "step": 2, "weights": f"runs/{run_id}/snapshots/step-2/weights/"}
    first = [
        step(1, 1.0, 100.0),
        step(2, 0.95, 50.0),
        step(2, 0.9, 100.0),  # step 2 again in the same batch, right after: it replaces
        rollouts(2, [0.0, 1.0], "a.parquet"),
        {"kind": "snapshots", "body": snapshot},
        step(2, 0.8, 300.0),  # and again after a snapshot: this one counts
        rollouts(2, [0.5, 0.5, 0.5], "b.parquet"),
        {"kind": "snapshots", "body": snapshot | {"weights": f"{snapshot['weights']}again/"}},
    ]
    response = job.post(f"{base}/batch", json={"reports": first})
    assert response.status_code == 200, response.text

    kept = api.get(f"/v1/runs/{run_id}/metrics").json()["steps"]
    assert [(s["step"], s["loss"]) for s in kept] == [(1, 1.0), (2, 0.8)]
    assert api.get(f"/v1/runs/{run_id}").json()["cost"]["tokensPerSecond"] == 200.0
    answer_ = api.get(f"/v1/runs/{run_id}/rollouts", params={"step": 2}).json()
    assert (answer_["steps"], answer_["count"], len(answer_["rollouts"])) == ([2], 3, 3)
    (kept_snapshot,) = api.get(f"/v1/runs/{run_id}/snapshots").json()
    assert kept_snapshot["name"] == "step-2"

    # Reported again by a later request: replaced again.
    again = [step(2, 0.7, 500.0), rollouts(2, [0.25], "c.parquet"), step(3, 0.6, 100.0)]
    assert job.post(f"{base}/batch", json={"reports": again}).is_success
    kept = api.get(f"/v1/runs/{run_id}/metrics").json()["steps"]
    assert [(s["step"], s["loss"]) for s in kept] == [(1, 1.0), (2, 0.7), (3, 0.6)]
    assert api.get(f"/v1/runs/{run_id}").json()["cost"]["tokensPerSecond"] == 700.0 / 3
    answer_ = api.get(f"/v1/runs/{run_id}/rollouts", params={"step": 2}).json()
    assert (answer_["count"], [r["score"] for r in answer_["rollouts"]]) == (1, [0.25])


def rollout_record(step: int, index: int, score: float) -> Rollout:
    return Rollout(
        step=step,
        index=index,
        group=0,
        prompt="What is 2 + 0?",
        completion="#### 2",
        expected="2",
        score=score,
        shares={"correct": score},
        values={"correct": score},
        completion_tokens=3,
        finish_reason="stop",
        tool_calls=0,
        tool_failures=0,
        failures={},
        explanations={},
        weights={"correct": 1.0},
    )


def test_a_batch_holding_a_refused_report_changes_nothing(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    run_id, job, base = _job_of_a_new_run(api, trainer)
    reports = [
        {"kind": "steps", "body": {"step": 1, "metrics": {"loss": 1.0}}},
        {"kind": "steps", "body": {"step": 0, "metrics": {"loss": 0.5}}},
    ]
    response = job.post(f"{base}/batch", json={"reports": reports})
    status, body = answer(response)
    assert status == 422
    assert body["error"]["message"].startswith(
        "The steps report 1 of the batch was refused (1 problem):"
    )
    assert [p["field"] for p in body["error"]["problems"]] == ["reports[1].body.step"]
    assert api.get(f"/v1/runs/{run_id}/metrics").json()["steps"] == []
    finished = {"kind": "finished", "body": {"adapter": "a/", "step": 1}}
    status, body = answer(job.post(f"{base}/batch", json={"reports": [finished]}))
    assert status == 422
    assert [p["field"] for p in body["error"]["problems"]] == ["reports[0].kind"]


def test_a_step_report_older_than_its_attempt_is_kept_at_the_attempt_s_start(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    before = time.time()
    run_id, job, base = _job_of_a_new_run(api, trainer)
    body = {"step": 1, "metrics": {"loss": 1.0}, "ago": 3600.0}
    assert job.post(f"{base}/steps", json=body).is_success
    (kept,) = api.get(f"/v1/runs/{run_id}/metrics").json()["steps"]
    assert before - 1 < datetime.fromisoformat(kept["at"]).timestamp() <= time.time()
    too_old = {"step": 2, "metrics": {}, "ago": 86_401}
    status, _ = answer(job.post(f"{base}/steps", json=too_old))
    assert status == 422


def test_gpu_seconds_stop_when_the_run_completes_while_its_job_exits(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)
    base = f"/v1/jobs/{run_id}/attempts/{launch.attempt}"
    assert job.post(f"{base}/steps", json={"step": 1, "metrics": {"loss": 1.0}}).is_success
    finished = {"adapter": f"runs/{run_id}/adapter/", "step": 1}
    assert job.post(f"{base}/finished", json=finished).is_success
    first = api.get(f"/v1/runs/{run_id}").json()
    assert first["phase"] == "COMPLETED"
    # The job has not exited yet: its claim is still held, but the run's clock has stopped:
    # an hour later, it counts the same.
    assert [c["for"] for c in api.get("/v1/capacity").json()["claims"]] == [run_id]
    trainer.ctx.clock = clock = ManualClock()
    clock.advance(3600)
    later = api.get(f"/v1/runs/{run_id}").json()
    assert later["cost"]["gpuSeconds"] == first["cost"]["gpuSeconds"]
    assert later["cost"]["durationSeconds"] == first["cost"]["durationSeconds"]


def _job_of_a_new_run(
    api: httpx.Client, trainer: InProcessTrainer
) -> tuple[str, httpx.Client, str]:
    """A new run, admitted, whose job has reported that it started: the run's id, a client
    holding the job's token, and the path its reports go to."""
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)
    base = f"/v1/jobs/{run_id}/attempts/{launch.attempt}"
    assert job.post(f"{base}/started", json={"placement": {"host": "h", "pid": 1}}).is_success
    return run_id, job, base


def test_non_finite_figures_are_kept_and_served_as_their_text(
    api: httpx.Client, dataset: Any, trainer: InProcessTrainer
) -> None:
    # A diverging run's figures: the job sends them as text (JSON has no NaN), and the
    # service keeps them (Postgres refuses a NaN in JSON) and answers them as they came.
    run_id, job, base = _job_of_a_new_run(api, trainer)
    metrics = {"loss": "NaN", "grad_norm": "Infinity", "reward/min": "-Infinity", "tokens": 8.0}
    assert job.post(f"{base}/steps", json={"step": 1, "metrics": metrics}).is_success
    (kept,) = api.get(f"/v1/runs/{run_id}/metrics").json()["steps"]
    assert {k: kept[k] for k in metrics} == metrics
    run = api.get(f"/v1/runs/{run_id}")
    assert run.status_code == 200
    assert run.json()["results"]["trainingLoss"] == "NaN"
