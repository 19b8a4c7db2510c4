"""Tinker sessions outlive the trainer process: the real `tinker` SDK trains, the trainer is
killed (SIGKILL, by pid) and started again on the same home and database, and the same
training and sampling clients go on; a session whose client vanished ends across the restart
once its heartbeat timeout has passed. On SQLite and on Postgres."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import tinker
from tinker import types

from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.conftest import drop_schema, postgres_schema_url
from tests.integration.helpers import ensure_project
from tests.integration.test_tinker_api import datums, key, prompt_of, two_steps

pytestmark = [
    pytest.mark.slow,
    # The SDK's own connections, left to the garbage collector (as in test_tinker_api.py).
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

# Short enough to see a vanished client's session end, long enough for the SDK's heartbeat
# (every 10 s) to keep its own session alive.
HEARTBEAT_SECONDS = 20


@pytest.fixture(autouse=True)
def sdk_sockets_collected() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: the trainer's own SQLite file in its home; else a fresh Postgres schema."""
    if request.param == "sqlite":
        yield None
        return
    server: str = request.getfixturevalue("postgres_server")
    schema, url = postgres_schema_url(server)
    yield url
    drop_schema(server, schema)


def vanished_session(trainer: TrainerProcess, api_key: str) -> tuple[str, str]:
    """A session and a training client made by a client that then vanished (it never beats)."""
    headers = {"X-API-Key": api_key}
    base = f"{trainer.url}/tinker/api/v1"
    made = httpx.post(f"{base}/create_session", json={"project_id": "demo"}, headers=headers)
    session_id = str(made.json()["session_id"])
    body = {
        "session_id": session_id,
        "model_seq_id": 0,
        "base_model": "tiny-chat",
        "lora_config": {"rank": 8},
    }
    created = httpx.post(f"{base}/create_model", json=body, headers=headers)
    assert created.status_code == 200, created.text
    return session_id, str(created.json()["model_id"])


def test_a_tinker_loop_goes_on_after_the_trainer_restarts(
    trainer_factory: Any, dev_models: Path, database_url: str | None
) -> None:
    settings: dict[str, Any] = {
        "trainer": {
            "dev-models-dir": str(dev_models),
            "controller": {"interval-seconds": 0.2, "report-seconds": 0.2},
            "pools": [{"name": "default", "accelerator": "cpu", "devices": 2}],
            "tinker": {"heartbeat-seconds": HEARTBEAT_SECONDS},
        }
    }
    if database_url is not None:
        settings["trainer"]["database"] = {"url": database_url}
    trainer: TrainerProcess = trainer_factory(settings)
    ensure_project(trainer, "demo")
    api_key = key(trainer, "demo")
    service = tinker.ServiceClient(
        base_url=f"{trainer.url}/tinker", api_key=api_key, project_id="demo"
    )
    rest = tinker.RestClient(base_url=f"{trainer.url}/tinker", api_key=api_key)
    training = service.create_lora_training_client(base_model="tiny-chat", rank=8, seed=0).result()
    run_id = training.model_id
    data = datums(dev_models)
    before = two_steps(training, data)
    saved = training.save_weights_for_sampler("before-restart").result()
    sampler = service.create_sampling_client(model_path=saved.path).result()
    greedy = types.SamplingParams(max_tokens=6, temperature=0)
    prompt = types.ModelInput.from_ints(prompt_of(dev_models, "What is 2 + 1? ####"))
    sampled = sampler.sample(prompt, num_samples=1, sampling_params=greedy).result()
    (session_id,) = rest.list_sessions().result().sessions
    gone_session, gone_run = vanished_session(trainer, api_key)

    trainer.kill()  # SIGKILL, by pid: the jobs live on
    trainer.start()
    restarted = datetime.now().astimezone()

    # The SDK's own heartbeat thread is answered by the restarted trainer ...
    def beat_since_restart() -> bool:
        held = rest.get_session(session_id).result()
        assert held.user_metadata is not None
        return datetime.fromisoformat(held.user_metadata["heartbeat_at"]) > restarted

    until(beat_since_restart, what="a heartbeat of the SDK after the restart", timeout=30)
    # ... and the same training client goes on where it was.
    after = two_steps(training, data)
    assert after[-1] < before[0]
    client = trainer.client()
    until(lambda: len(client.metrics(run_id).steps) == 4, what="four steps")
    assert [s.step for s in client.metrics(run_id).steps] == [1, 2, 3, 4]
    # The sampling client is routed to the run's job again, which still holds its weights.
    again = sampler.sample(prompt, num_samples=1, sampling_params=greedy).result()
    assert again.sequences[0].tokens == sampled.sequences[0].tokens
    held = rest.get_session(session_id).result()
    assert held.training_run_ids == [run_id]
    assert held.sampler_ids == [f"{run_id}:sampler:before-restart"]

    # The session whose client vanished before the restart ends after it, and gives its
    # devices back.
    until(
        lambda: client.run(gone_run).phase in ("COMPLETED", "CANCELLED"),
        what="the vanished client's run to end",
        timeout=HEARTBEAT_SECONDS + 60,
    )
    ended = rest.get_session(gone_session).result()
    assert ended.user_metadata is not None and ended.user_metadata["ended"] == "expired"
    events = [line.message for line in client.wait_run(gone_run, timeout=1) if line.type == "event"]
    assert any(f"Tinker session {gone_session} sent no heartbeat" in e for e in events), events

    service.close("success").result()
    until(lambda: client.run(run_id).phase == "COMPLETED", what="the run to end", timeout=120)
    assert "Traceback" not in trainer.log()
