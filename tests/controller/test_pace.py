"""The controller's pace: a pass every `interval-seconds` while something moves, every
`steady-seconds` while nothing does (the open runs train with live jobs or rest paused), and at
once when a request wakes it. A real controller thread, the app served on loopback, and the
scripted job (a real child process reporting a step every 0.2 s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from akka_training.controller.loop import Controller
from akka_training.server.services.pipelines import advance_all
from akka_training.testing.app import InProcessTrainer
from akka_training.testing.service import free_port
from tests.server.routers.helpers import chat_rows, register, sft_plan

pytestmark = pytest.mark.slow


@pytest.fixture
def served(in_process_factory: Callable[..., InProcessTrainer]) -> Iterator[InProcessTrainer]:
    """An in-process trainer whose app answers jobs on a loopback port, with its controller
    running in its own thread: a pass at least every 0.1 s while something moves, every 30 s
    while nothing does."""
    port = free_port()
    trainer = in_process_factory(
        {
            "trainer": {
                "listen": {"host": "127.0.0.1", "port": port},
                "controller": {"interval-seconds": 0.1, "steady-seconds": 30},
                "projects": [{"name": "maths", "quota": 2}],
            }
        }
    )
    server = uvicorn.Server(
        uvicorn.Config(
            trainer.app, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
        )
    )
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    while not server.started:
        time.sleep(0.01)
    controller = Controller(trainer.ctx)
    controller.hooks.append(lambda: advance_all(trainer.ctx))
    trainer.ctx.controller = controller
    controller.start()
    try:
        yield trainer
    finally:
        controller.stop()
        server.should_exit = True
        serving.join(timeout=10)


def test_passes_are_rare_while_a_run_only_trains_and_a_pause_is_taken_at_once(
    served: InProcessTrainer,
) -> None:
    controller = served.ctx.controller
    assert controller is not None
    api = served.client()
    register(api, "maths/train", chat_rows(12))
    plan = sft_plan()
    plan["config"]["hyperparams"]["training"]["maxSteps"] = 1000
    run_id = api.post("/v1/runs", json=plan).json()["id"]
    run = _wait(api, run_id, lambda r: r["phase"] == "TRAINING" and r["progress"]["observedStep"])

    # Training with a live job: the pass after the one that saw it comes 30 s later, not after
    # 0.1 s (the next 1.5 s see at most the pass that found it so).
    deadline = time.monotonic() + 5
    while not controller.steady and time.monotonic() < deadline:
        time.sleep(0.05)
    assert controller.steady
    ticks = controller._ticks
    time.sleep(1.5)
    assert controller._ticks - ticks <= 1
    assert (
        api.get(f"/v1/runs/{run_id}").json()["progress"]["observedStep"]
        > run["progress"]["observedStep"]
    )

    # A pause wakes it: the run stops at its next step and rests PAUSED, its device given back,
    # long before a 30 s pass would have come.
    began = time.monotonic()
    assert api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "save"}).is_success
    paused = _wait(api, run_id, lambda r: r["phase"] == "PAUSED")
    assert time.monotonic() - began < 15
    assert api.get("/v1/capacity").json()["claims"] == []
    assert paused["progress"]["savedStep"] is not None


def _wait(
    api: httpx.Client, run_id: str, done: Callable[[dict[str, Any]], Any], timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = api.get(f"/v1/runs/{run_id}").json()
        if done(run):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.05)
