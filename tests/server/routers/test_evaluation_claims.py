"""An evaluation claims its devices like a run: it waits QUEUED behind a run that holds the
pool's only device (and says why), is launched on the granted device once the run ends, shows
in capacity, and gives its device back when it is cancelled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from akka_training.controller.loop import Controller
from akka_training.controller.tasks import prepare_task_launch, reconcile_tasks
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, register, sft_plan

ONE_DEVICE = {
    "trainer": {
        "projects": [{"name": "maths"}],
        "pools": [
            {
                "name": "default",
                "accelerator": "cpu",
                "devices": 1,
                "max-claim": 1,
                "host-ram-gib": 16,
            }
        ],
    }
}


def evaluation_plan(**execution: Any) -> dict[str, Any]:
    return {
        "kind": "evaluation",
        "project": "maths",
        "baseModel": "tiny-chat",
        "dataset": "maths/train",
        "metrics": [{"name": "correct", "kind": "match"}],
        **({"execution": execution} if execution else {}),
    }


def claims(api: httpx.Client) -> list[tuple[str, str, str, int]]:
    body = api.get("/v1/capacity").json()
    return [(c["kind"], c["for"], c["state"], c["devices"]) for c in body["claims"]]


def free(api: httpx.Client) -> int:
    pools = api.get("/v1/capacity").json()["pools"]
    return int(pools[0]["free"])


def test_an_evaluation_waits_for_the_device_a_run_holds_and_starts_when_the_run_ends(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(ONE_DEVICE)
    api = trainer.client()
    register(api, "maths/train", chat_rows(8))
    controller = Controller(trainer.ctx)
    run = api.post("/v1/runs", json=sft_plan())
    assert run.status_code == 200, run.text
    run_id = run.json()["id"]
    started = api.post("/v1/evaluations", json=evaluation_plan())
    assert started.status_code == 200, started.text
    evaluation = started.json()
    assert (evaluation["state"], evaluation["gpus"], evaluation["claim"]) == (
        "PENDING",
        1,
        "QUEUED",
    )

    # The run came first: it gets the pool's only device, and the evaluation waits behind it.
    controller._observe()
    controller._admit()
    reconcile_tasks(trainer.ctx, controller.limits)
    assert claims(api) == [
        ("run", run_id, "GRANTED", 1),
        ("evaluation", evaluation["id"], "QUEUED", 1),
    ]
    assert free(api) == 0
    waiting = api.get(f"/v1/evaluations/{evaluation['id']}").json()
    assert (waiting["state"], waiting["claim"]) == ("PENDING", "QUEUED")
    assert waiting["queue"]["waitingFor"] == ["devices: needs 1, pool default has 0 free"]
    assert prepare_task_launch(trainer.ctx, evaluation["id"]) is None

    # The run ends; its device goes to the evaluation, whose job is launched on it.
    assert api.post(f"/v1/runs/{run_id}/cancel").status_code == 200
    controller.reconcile(run_id)
    controller._admit()
    assert claims(api) == [("evaluation", evaluation["id"], "GRANTED", 1)]
    granted = api.get(f"/v1/evaluations/{evaluation['id']}").json()
    assert (granted["claim"], granted["queue"]) == ("GRANTED", None)
    launch = prepare_task_launch(trainer.ctx, evaluation["id"])
    assert launch is not None
    assert (launch.devices, launch.device_ids) == (1, [0])
    assert "CUDA_VISIBLE_DEVICES" not in launch.env

    # A cancel before its job ran gives the device back at once.
    cancelled = api.post(f"/v1/evaluations/{evaluation['id']}/cancel").json()
    assert (cancelled["state"], cancelled["claim"]) == ("CANCELLED", None)
    assert claims(api) == []
    assert free(api) == 1


def test_an_evaluation_that_claims_more_than_the_pool_accepts_is_refused(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(ONE_DEVICE)
    api = trainer.client()
    register(api, "maths/train", chat_rows(8))
    words = (
        "The evaluation claims 2 devices, more than pool default accepts (MAX CLAIM 1); set "
        "execution.gpus to 1 or less, or choose another execution.pool (`akka training "
        "capacity`)."
    )
    assert answer(api.post("/v1/evaluations", json=evaluation_plan(gpus=2))) == (
        422,
        error(
            "plan-refused",
            f"The evaluation plan was refused (1 problem):\n  - {words}",
            [{"field": "execution.gpus", "message": words}],
        ),
    )
    assert claims(api) == []
