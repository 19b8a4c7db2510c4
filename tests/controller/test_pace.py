"""The controller's pace: a pass every `interval-seconds` while something moves, every
`steady-seconds` while nothing does (the open runs train with live jobs or rest paused), and at
once when a request wakes it. A real controller thread on a clock the test holds, the app served
on loopback, and the scripted job (a real child process reporting a step every 0.2 s)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from akka_training.controller.loop import Controller
from akka_training.core.clock import ManualClock
from akka_training.server.services.pipelines import advance_all
from akka_training.testing.app import InProcessTrainer
from akka_training.testing.service import free_port
from akka_training.testing.waiting import until
from tests.server.routers.helpers import chat_rows, register, sft_plan

pytestmark = pytest.mark.slow


# The pace, in seconds of the test's clock (an eighth: sums of it are exact).
INTERVAL = 0.125
STEADY = 30.0


@pytest.fixture
def served(
    in_process_factory: Callable[..., InProcessTrainer],
) -> Iterator[tuple[InProcessTrainer, Controller, ManualClock]]:
    """An in-process trainer whose app answers jobs on a loopback port, with its controller
    running in its own thread on a clock the test holds: a pass every `INTERVAL` while
    something moves, every `STEADY` while nothing does."""
    port = free_port()
    trainer = in_process_factory(
        {
            "trainer": {
                "listen": {"host": "127.0.0.1", "port": port},
                "controller": {"interval-seconds": INTERVAL, "steady-seconds": STEADY},
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
    until(lambda: server.started, what="the app to serve", timeout=30, interval=0.01)
    clock = ManualClock()
    controller = Controller(trainer.ctx, clock=clock)
    controller.hooks.append(lambda: advance_all(trainer.ctx))
    trainer.ctx.controller = controller
    controller.start()
    clock.settle(threads=1)  # its first pass is done: it waits for the clock
    try:
        yield trainer, controller, clock
    finally:
        controller.stop()
        server.should_exit = True
        serving.join(timeout=10)


def test_passes_are_rare_while_a_run_only_trains_and_a_pause_is_taken_at_once(
    served: tuple[InProcessTrainer, Controller, ManualClock],
) -> None:
    trainer, controller, clock = served
    api = trainer.client()
    register(api, "maths/train", chat_rows(12))
    plan = sft_plan()
    plan["config"]["hyperparams"]["training"]["maxSteps"] = 1000
    run_id = api.post("/v1/runs", json=plan).json()["id"]
    run = _pass_until(
        clock,
        lambda: (
            (r := _run(api, run_id))["phase"] == "TRAINING" and r["progress"]["observedStep"] and r
        ),
        "the run to train",
    )
    _pass_until(clock, lambda: controller.steady, "a pass that finds nothing to move")

    # Training with a live job: after a pass that finds it so, the next comes `STEADY` later.
    controller.wake()
    clock.settle()
    assert controller.steady
    ticks = controller._ticks
    clock.advance(STEADY - 1)
    clock.settle()
    assert controller._ticks == ticks
    # Meanwhile the job goes on reporting steps: the service takes them without a pass.
    until(
        lambda: _run(api, run_id)["progress"]["observedStep"] > run["progress"]["observedStep"],
        what="the job to report another step",
        timeout=60,
    )
    assert controller._ticks == ticks
    clock.advance(1)
    clock.settle()
    assert controller._ticks == ticks + 1

    # A pause wakes it: a pass comes with no time passing, and finds something to move; the
    # passes then come every `INTERVAL` until the run stops at its next step and rests PAUSED,
    # its device given back.
    began = clock.monotonic()
    assert api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "save"}).is_success
    clock.settle()
    assert (controller._ticks, controller.steady, clock.monotonic()) == (ticks + 2, False, began)
    paused = _pass_until(
        clock, lambda: (r := _run(api, run_id))["phase"] == "PAUSED" and r, "the run to pause"
    )
    assert api.get("/v1/capacity").json()["claims"] == []
    assert paused["progress"]["savedStep"] is not None


def _run(api: httpx.Client, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = api.get(f"/v1/runs/{run_id}").json()
    return run


def _pass_until(clock: ManualClock, done: Callable[[], Any], what: str) -> Any:
    """Move the clock on by `INTERVAL` (the next pass, if something moves) until `done()`
    returns something truthy, and return that."""

    def look() -> Any:
        clock.advance(INTERVAL)
        clock.settle()
        return done()

    return until(look, what=what, timeout=60)
