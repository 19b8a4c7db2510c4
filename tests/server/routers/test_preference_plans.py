"""dpo runs through the real app: a preference dataset registers with its format, a dpo dry run
shows every preference default, a dataset of the wrong kind is refused with what to use, and
what a dpo job reports reads back as the run's Preference and data fit."""

from __future__ import annotations

import json
from typing import Any

import httpx

from akka_training.core.documents import deep_merge
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, register, sft_plan


def pair_rows(count: int) -> bytes:
    rows = [
        {
            "input": {"messages": [{"role": "user", "content": f"What is {i} + {i}?"}]},
            "preferred_output": [{"role": "assistant", "content": f"#### {2 * i}"}],
            "non_preferred_output": [{"role": "assistant", "content": f"#### {2 * i + 1}"}],
        }
        for i in range(count)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def dpo_plan(**changes: Any) -> dict[str, Any]:
    plan = sft_plan(config={"dataset": "maths/pairs", "method": "dpo"})
    return deep_merge(plan, changes)


def test_a_preference_dataset_registers_with_its_format(api: httpx.Client) -> None:
    register(api, "maths/pairs", pair_rows(6))
    got = api.get("/v1/datasets/maths/pairs").json()
    assert (got["format"], got["rows"]) == ("preference", 6)


def test_a_dpo_dry_run_shows_every_preference_default(api: httpx.Client) -> None:
    register(api, "maths/pairs", pair_rows(6))
    response = api.post("/v1/runs", params={"dry_run": "true"}, json=dpo_plan())
    assert response.status_code == 200, response.text
    settings = response.json()["settings"]
    assert (settings["method"], settings["engine"]) == ("dpo", "trl")
    assert settings["dataset"]["format"] == "preference"
    assert settings["config"]["hyperparams"]["preference"] == {
        "beta": 0.1,
        "lossType": "sigmoid",
        "labelSmoothing": 0.0,
        "maxPromptLength": 128,  # half of maxSeqLength 256
    }


def test_a_dataset_of_the_wrong_kind_is_refused_at_submission(api: httpx.Client) -> None:
    register(api, "maths/pairs", pair_rows(6))
    register(api, "maths/train", chat_rows(6))
    status, body = answer(
        api.post(
            "/v1/runs", params={"dry_run": "true"}, json=dpo_plan(config={"dataset": "maths/train"})
        )
    )
    assert status == 422
    assert body["error"]["problems"] == [
        {
            "field": "config.dataset",
            "message": "config.dataset maths/train:v1 is a chat dataset; a dpo run trains on "
            "preference pairs (prompt, chosen and rejected, or OpenAI's input, preferred_output "
            "and non_preferred_output). Register a preference dataset, or set config.method to "
            "sft.",
        }
    ]
    status, body = answer(
        api.post(
            "/v1/runs", params={"dry_run": "true"}, json=sft_plan(config={"dataset": "maths/pairs"})
        )
    )
    assert status == 422
    assert body["error"]["problems"] == [
        {
            "field": "config.dataset",
            "message": "config.dataset maths/pairs:v1 is a preference dataset (pairs of a chosen "
            "and a rejected answer); an sft run trains on chat or prompt-completion rows. Set "
            "config.method to dpo, or choose a chat or prompt-completion dataset.",
        }
    ]


def test_a_dpo_runs_preference_figures_and_data_fit_read_back(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    register(api, "maths/pairs", pair_rows(6))
    run_id = api.post("/v1/runs", json=dpo_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)
    base = f"/v1/jobs/{run_id}/attempts/{launch.attempt}"
    fit = {"rows": 6, "rowsTruncated": 2, "answersTruncated": 1, "rowsDropped": 1}
    body = {"totalSteps": 2, "dataFit": {**fit, "maxSeqLength": 256, "promptsTruncated": 1}}
    assert job.post(f"{base}/training", json=body).is_success
    for step, margin in ((1, 0.0), (2, 0.25)):
        metrics = {
            "loss": 0.69,
            "rewards/chosen": margin / 2,
            "rewards/rejected": -margin / 2,
            "rewards/margins": margin,
            "rewards/accuracies": 0.5 * step,
            "logps/chosen": -12.5,
            "logps/rejected": -14.0,
        }
        response = job.post(f"{base}/steps", json={"step": step, "metrics": metrics})
        assert response.status_code == 200, response.text

    got = api.get(f"/v1/runs/{run_id}").json()
    assert got["preference"] == {
        "step": 2,
        "rewardsChosen": 0.125,
        "rewardsRejected": -0.125,
        "rewardsMargins": 0.25,
        "rewardsAccuracies": 1.0,
        "logpsChosen": -12.5,
        "logpsRejected": -14.0,
        "reference": "the base model",
    }
    assert got["results"]["trainingLoss"] == 0.69
    assert got["dataFit"] == {**fit, "maxSeqLength": 256, "promptsTruncated": 1}
    steps = api.get(f"/v1/runs/{run_id}/metrics").json()["steps"]
    assert [s["rewards/margins"] for s in steps] == [0.0, 0.25]


def report_to_the_end(trainer: InProcessTrainer, run_id: str, figures: dict[str, float]) -> None:
    """A job of `run_id` that trains 4 steps with snapshots at 2 and 4, and completes."""
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)
    base = f"/v1/jobs/{run_id}/attempts/{launch.attempt}"
    assert job.post(f"{base}/training", json={"totalSteps": 4}).is_success
    for step in (1, 2, 3, 4):
        body = {"step": step, "metrics": {"loss": 1.0 / step, **figures}}
        assert job.post(f"{base}/steps", json=body).is_success
        if step % 2 == 0:
            keys = f"runs/{run_id}/snapshots/step-{step}"
            snapshot = {
                "name": f"step-{step}",
                "step": step,
                "weights": f"{keys}/weights/",
                "trainingState": f"{keys}/training-state/",
            }
            assert job.post(f"{base}/snapshots", json=snapshot).is_success
    finished = {"adapter": f"runs/{run_id}/adapter/", "step": 4}
    assert job.post(f"{base}/finished", json=finished).is_success


def test_a_dpo_run_records_its_reference_and_a_continuation_keeps_it(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    """From the base model the reference is the base model; from an SFT run's adapter it is
    that adapter; a branch from a dpo run's snapshot measures against the snapshot; and a
    continuation keeps the reference of the run it continues, not its snapshot's adapter."""
    register(api, "maths/train", chat_rows(6))
    register(api, "maths/pairs", pair_rows(6))
    dry = api.post("/v1/runs", params={"dry_run": "true"}, json=dpo_plan()).json()
    assert dry["settings"]["reference"] == {
        "kind": "base-model",
        "run": None,
        "snapshot": None,
        "weights": None,
    }
    assert (
        api.post("/v1/runs", params={"dry_run": "true"}, json=sft_plan()).json()["settings"][
            "reference"
        ]
        is None
    )

    sft_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    report_to_the_end(trainer, sft_id, {})
    dpo = api.post("/v1/runs", json=dpo_plan(source={"run": sft_id})).json()
    from_sft = {
        "kind": "adapter",
        "run": sft_id,
        "snapshot": None,
        "weights": f"runs/{sft_id}/adapter/",
    }
    assert dpo["settings"]["reference"] == from_sft
    report_to_the_end(trainer, dpo["id"], {"rewards/chosen": 0.5, "rewards/rejected": -0.5})
    assert api.get(f"/v1/runs/{dpo['id']}").json()["preference"]["reference"] == f"run {sft_id}"

    continued = api.post(
        f"/v1/runs/{dpo['id']}/continue", json={"snapshot": "step-2", "steps": 2}
    ).json()
    assert continued["source"] == {"run": dpo["id"], "snapshot": "step-2", "kind": "continue"}
    assert continued["settings"]["reference"] == from_sft
    branched = api.post(f"/v1/runs/{dpo['id']}/branch", json={"snapshot": "step-2"}).json()
    assert branched["settings"]["reference"] == {
        "kind": "adapter",
        "run": dpo["id"],
        "snapshot": "step-2",
        "weights": f"runs/{dpo['id']}/snapshots/step-2/weights/",
    }


def test_a_preference_evaluation_measures_a_dpo_run_against_its_own_reference(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    """The SFT run and the base model are measured against the base model, the dpo run from
    the SFT adapter against that adapter, unless the metric asks for the base model."""
    register(api, "maths/train", chat_rows(6))
    register(api, "maths/pairs", pair_rows(6))
    sft_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    report_to_the_end(trainer, sft_id, {})
    dpo_id = api.post("/v1/runs", json=dpo_plan(source={"run": sft_id})).json()["id"]
    report_to_the_end(trainer, dpo_id, {})

    def reference(source: str | None, **metric: str) -> Any:
        plan: dict[str, Any] = {
            "kind": "evaluation",
            "project": "maths",
            "baseModel": "tiny-chat",
            "dataset": "maths/pairs",
            "metrics": [{"kind": "preference", **metric}],
        }
        if source is not None:
            plan["source"] = {"run": source}
        response = api.post("/v1/evaluations", params={"dry_run": "true"}, json=plan)
        assert response.status_code == 200, response.text
        return response.json()["resolved"]["reference"]

    base = {"kind": "base-model", "run": None, "snapshot": None, "weights": None}
    assert reference(None) == base
    assert reference(sft_id) == base
    assert reference(dpo_id) == {
        "kind": "adapter",
        "run": sft_id,
        "snapshot": None,
        "weights": f"runs/{sft_id}/adapter/",
    }
    assert reference(dpo_id, reference="base-model") == base
    status, body = answer(
        api.post(
            "/v1/evaluations",
            params={"dry_run": "true"},
            json={
                "kind": "evaluation",
                "project": "maths",
                "baseModel": "tiny-chat",
                "dataset": "maths/pairs",
                "metrics": [{"kind": "preference", "reference": "sft"}],
            },
        )
    )
    assert status == 422, body
    assert body["error"]["problems"][0] == {
        "field": "metrics[0].preference.reference",
        "message": "metrics[0].preference.reference: set it to 'run' or 'base-model'.",
    }


def test_a_preference_evaluation_needs_a_preference_dataset_and_only_it(
    api: httpx.Client,
) -> None:
    register(api, "maths/pairs", pair_rows(6))
    register(api, "maths/train", chat_rows(6))
    plan = {
        "kind": "evaluation",
        "project": "maths",
        "baseModel": "tiny-chat",
        "dataset": "maths/pairs",
        "metrics": [{"kind": "preference"}],
    }
    response = api.post("/v1/evaluations", params={"dry_run": "true"}, json=plan)
    assert response.status_code == 200, response.text
    on_chat = {**plan, "dataset": "maths/train"}
    status, body = answer(api.post("/v1/evaluations", params={"dry_run": "true"}, json=on_chat))
    assert status == 422
    assert body["error"]["problems"] == [
        {
            "field": "dataset",
            "message": "Dataset maths/train:v1 is a chat dataset, and a preference metric scores "
            "pairs of a chosen and a rejected answer; evaluate it on a preference dataset.",
        }
    ]
    generated = {**plan, "metrics": [{"name": "correct", "kind": "match"}]}
    status, body = answer(api.post("/v1/evaluations", params={"dry_run": "true"}, json=generated))
    assert status == 422
    assert body["error"]["problems"] == [
        {
            "field": "dataset",
            "message": "Dataset maths/pairs:v1 is a preference dataset, whose pairs only a "
            "preference metric scores; add {kind: preference} to metrics, or evaluate on a chat "
            "or prompt-completion dataset.",
        }
    ]
