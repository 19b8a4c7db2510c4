"""The Tinker API's routes through the real app, without a job: keys, sessions, training clients
waiting for their devices, and each refusal with its words. The SDK against a live trainer is in
tests/integration/test_tinker_api.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from akka_training.core.clock import ManualClock
from akka_training.server.routers.tinker import start_sessions, stop_expiry
from akka_training.server.services import tinker as service
from akka_training.server.services import tinker_rest as rest
from akka_training.storage.models import Event
from akka_training.testing.app import InProcessTrainer

BASE = "/tinker/api/v1"


def tinker_key(api: httpx.Client, project: str) -> tuple[str, str]:
    created = api.post("/v1/tokens", json={"name": f"{project}-tinker", "projects": [project]})
    assert created.status_code == 201, created.text
    body = created.json()
    return body["id"], "tml-" + body["token"]


def call(
    api: httpx.Client, key: str, path: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    headers = {"X-API-Key": key}
    if body is None:
        return api.get(BASE + path, headers=headers)
    return api.post(BASE + path, json=body, headers=headers)


@pytest.fixture
def keys(api: httpx.Client) -> dict[str, str]:
    assert api.post("/v1/projects", json={"name": "other"}).status_code in (200, 201)
    return {"maths": tinker_key(api, "maths")[1], "other": tinker_key(api, "other")[1]}


def driven(trainer: InProcessTrainer) -> service.Sessions:
    """The trainer's hold on the sessions, made now (as the service's start makes it), whose
    expiry the test drives itself: the thread that would end sessions is stopped."""
    held = start_sessions(trainer.app)
    stop_expiry(trainer.app)
    return held


def session(api: httpx.Client, key: str) -> str:
    made = call(
        api, key, "/create_session", {"tags": [], "user_metadata": {}, "sdk_version": "0.38.0"}
    )
    assert made.status_code == 200, made.text
    session_id: str = made.json()["session_id"]
    return session_id


def test_what_the_sdk_asks_first(api: httpx.Client, keys: dict[str, str]) -> None:
    config = call(api, keys["maths"], "/client/config", {"sdk_version": "0.38.0"}).json()
    assert config["pjwt_auth_enabled"] is False
    assert config["use_pyqwest_transport"] is False
    models = call(api, keys["maths"], "/get_server_capabilities").json()["supported_models"]
    assert "tiny-chat" in {m["model_name"] for m in models}
    assert call(
        api, keys["maths"], "/session_heartbeat", {"session_id": session(api, keys["maths"])}
    ).json() == {"type": "session_heartbeat"}


def test_a_key_is_tml_and_a_token_of_this_trainer(api: httpx.Client) -> None:
    bare = call(api, "akka_not-prefixed", "/get_server_capabilities")
    assert bare.status_code == 401
    assert "'tml-' followed by a token of this trainer" in bare.json()["error"]["message"]
    token_id, key = tinker_key(api, "maths")
    assert call(api, key, "/get_server_capabilities").status_code == 200
    assert api.delete(f"/v1/tokens/{token_id}").status_code == 200
    revoked = call(api, key, "/get_server_capabilities")
    assert revoked.status_code == 401
    assert "revoked" in revoked.json()["error"]["message"]


def test_a_session_names_its_project_when_the_key_has_several(api: httpx.Client) -> None:
    admin_key = "tml-" + api.headers["authorization"].split(" ", 1)[1]
    refused = call(
        api,
        admin_key,
        "/create_session",
        {"tags": [], "user_metadata": {}, "sdk_version": "0.38.0"},
    )
    assert refused.status_code == 400
    assert "Say which project this session trains in" in refused.json()["error"]["message"]


def test_a_training_client_is_a_queued_run_of_the_project(
    trainer: InProcessTrainer, api: httpx.Client, keys: dict[str, str]
) -> None:
    # The question about a queued client is answered at once (no hold): nothing here starts it.
    trainer.ctx.settings.trainer.tinker.creation_hold_seconds = 0.0
    key = keys["maths"]
    session_id = session(api, key)
    unknown = call(
        api,
        key,
        "/create_model",
        {
            "session_id": session_id,
            "model_seq_id": 0,
            "base_model": "nope",
            "lora_config": {"rank": 8},
        },
    )
    assert unknown.status_code == 400
    assert "There is no base model 'nope' here" in unknown.json()["error"]["message"]

    created = call(
        api,
        key,
        "/create_model",
        {
            "session_id": session_id,
            "model_seq_id": 0,
            "base_model": "tiny-chat",
            "lora_config": {"rank": 8},
        },
    )
    assert created.status_code == 200, created.text
    run_id = created.json()["model_id"]
    run = api.get(f"/v1/runs/{run_id}").json()
    assert (run["method"], run["phase"], run["project"]) == ("tinker", "QUEUED", "maths")
    # Waiting for its devices: the SDK is told to try again.
    waiting = call(api, key, "/retrieve_future", {"request_id": f"{run_id}:0"}).json()
    assert waiting == {
        "type": "try_again",
        "request_id": f"{run_id}:0",
        "queue_state": "paused_capacity",
    }
    info = call(api, key, "/get_info", {"model_id": run_id}).json()
    assert (info["model_data"]["model_name"], info["lora_rank"]) == ("tiny-chat", 8)

    early = call(api, key, "/optim_step", {"model_id": run_id, "seq_id": 1, "adam_params": {}})
    assert early.status_code == 409
    assert "its model is not loaded yet" in early.json()["error"]["message"]
    sampler = call(api, key, "/save_weights_for_sampler", {"model_id": run_id, "seq_id": 1})
    assert sampler.status_code == 409
    assert "its model is not loaded yet" in sampler.json()["error"]["message"]

    # Sampling clients: of sampler paths only, of a base model with a training client loaded.
    snapshot = call(
        api,
        key,
        "/create_sampling_session",
        {
            "session_id": session_id,
            "sampling_session_seq_id": 0,
            "model_path": f"tinker://{run_id}/weights/one",
        },
    )
    assert snapshot.status_code == 400
    assert "is a training snapshot (save_state)" in snapshot.json()["error"]["message"]
    base = call(
        api,
        key,
        "/create_sampling_session",
        {"session_id": session_id, "sampling_session_seq_id": 1, "base_model": "tiny-chat"},
    )
    assert base.status_code == 409
    assert "needs a training client of it in this session" in base.json()["error"]["message"]
    lost = call(api, key, "/asample", {"num_samples": 1, "prompt": {"chunks": []}})
    assert lost.status_code == 400
    assert "A sample names its sampling session" in lost.json()["error"]["message"]

    # Another project's key touches neither the run nor the session.
    other = call(api, keys["other"], "/get_info", {"model_id": run_id})
    assert other.status_code == 403
    assert "This key has no access to project 'maths'" in other.json()["error"]["message"]
    beat = call(api, keys["other"], "/session_heartbeat", {"session_id": session_id})
    assert beat.status_code == 404
    assert f"There is no Tinker session {session_id!r}" in beat.json()["error"]["message"]

    # Ending the session cancels the run still waiting, and its heartbeat is told it is over.
    assert (
        call(
            api, key, f"/sessions/{session_id}/finish", {"reason": {"type": "success"}}
        ).status_code
        == 200
    )
    assert api.get(f"/v1/runs/{run_id}").json()["phase"] == "CANCELLED"
    assert call(api, key, "/session_heartbeat", {"session_id": session_id}).status_code == 410
    ended = call(api, key, "/retrieve_future", {"request_id": f"{run_id}:0"}).json()
    assert ended["error"] == f"Run {run_id} has ended (cancelled)."


def test_a_session_without_heartbeats_gives_its_devices_back(
    trainer: InProcessTrainer, api: httpx.Client, keys: dict[str, str]
) -> None:
    clock = ManualClock(wall=datetime(2026, 1, 1, tzinfo=UTC))
    trainer.ctx.clock = clock
    held = driven(trainer)
    key = keys["maths"]
    session_id = session(api, key)
    created = call(
        api,
        key,
        "/create_model",
        {
            "session_id": session_id,
            "model_seq_id": 0,
            "base_model": "tiny-chat",
            "lora_config": {"rank": 8},
        },
    )
    run_id = created.json()["model_id"]

    clock.advance(30)
    assert call(api, key, "/session_heartbeat", {"session_id": session_id}).status_code == 200
    clock.advance(59)  # within trainer.tinker.heartbeat-seconds (60) of the last heartbeat
    assert service.expire(trainer.ctx, held) == []
    clock.advance(2)
    assert service.expire(trainer.ctx, held) == [session_id]

    run = api.get(f"/v1/runs/{run_id}").json()
    assert run["phase"] == "CANCELLED"
    with trainer.ctx.db.session() as db:
        events = list(db.scalars(select(Event.message).where(Event.run_id == run_id)))
    assert any(
        f"Tinker session {session_id} sent no heartbeat for 60 s" in message for message in events
    )
    assert call(api, key, "/session_heartbeat", {"session_id": session_id}).status_code == 410


def create_model(api: httpx.Client, key: str, session_id: str) -> str:
    body = {
        "session_id": session_id,
        "model_seq_id": 0,
        "base_model": "tiny-chat",
        "lora_config": {"rank": 8},
    }
    created = call(api, key, "/create_model", body)
    assert created.status_code == 200, created.text
    run_id: str = created.json()["model_id"]
    return run_id


def restarted(
    in_process_factory: Callable[..., InProcessTrainer], clock: ManualClock
) -> InProcessTrainer:
    """Another service process on the same database (the trainer started again, or a replica),
    on `clock`."""
    again = in_process_factory({"trainer": {"projects": [{"name": "maths", "quota": 2}]}})
    again.ctx.clock = clock
    return again


def test_a_session_outlives_the_trainer_process(
    trainer: InProcessTrainer,
    in_process_factory: Callable[..., InProcessTrainer],
    api: httpx.Client,
    keys: dict[str, str],
) -> None:
    trainer.ctx.settings.trainer.tinker.creation_hold_seconds = 0.0
    clock = ManualClock(wall=datetime(2026, 1, 1, tzinfo=UTC))
    trainer.ctx.clock = clock
    key = keys["maths"]
    session_id = session(api, key)
    run_id = create_model(api, key, session_id)
    trainer.close()

    # Down for longer than the heartbeat timeout: the time the trainer was down does not count
    # against the session, whose client beats again once it answers.
    clock.advance(300)
    again = restarted(in_process_factory, clock)
    again.ctx.settings.trainer.tinker.creation_hold_seconds = 0.0
    held = driven(again)
    api = again.client()
    beat = call(api, key, "/session_heartbeat", {"session_id": session_id})
    assert beat.json() == {"type": "session_heartbeat"}
    assert service.expire(again.ctx, held) == []
    waiting = call(api, key, "/retrieve_future", {"request_id": f"{run_id}:0"}).json()
    assert waiting["type"] == "try_again"
    info = call(api, key, "/get_info", {"model_id": run_id}).json()
    assert info["model_id"] == run_id
    held = call(api, key, f"/sessions/{session_id}").json()
    assert held["training_run_ids"] == [run_id]
    assert held["user_metadata"] == {"project": "maths", "heartbeat_at": clock.now().isoformat()}
    assert call(api, key, "/sessions").json()["sessions"] == [session_id]
    # The session's project stays its own.
    foreign = call(api, keys["other"], "/session_heartbeat", {"session_id": session_id})
    assert foreign.status_code == 404
    assert (
        f"There is no Tinker session {session_id!r} on this trainer"
        in (foreign.json()["error"]["message"])
    )
    assert call(api, keys["other"], "/sessions").json()["sessions"] == []

    # The restarted trainer's session takes new training clients, and its client closes it.
    second = create_model(api, key, session_id)
    held = call(api, key, f"/sessions/{session_id}").json()
    assert held["training_run_ids"] == [run_id, second]
    finish = call(api, key, f"/sessions/{session_id}/finish", {"reason": {"type": "success"}})
    assert finish.status_code == 200
    assert {api.get(f"/v1/runs/{r}").json()["phase"] for r in (run_id, second)} == {"CANCELLED"}
    closed = call(api, key, "/session_heartbeat", {"session_id": session_id})
    assert closed.status_code == 410
    assert closed.json() == {"detail": f"Session {session_id} has finished."}
    refused = call(
        api,
        key,
        "/create_model",
        {
            "session_id": session_id,
            "model_seq_id": 2,
            "base_model": "tiny-chat",
            "lora_config": {"rank": 8},
        },
    )
    assert refused.status_code == 409
    assert (
        f"Session {session_id} has finished; create a new ServiceClient."
        in (refused.json()["error"]["message"])
    )


def test_a_session_whose_client_vanished_ends_after_a_restart(
    trainer: InProcessTrainer,
    in_process_factory: Callable[..., InProcessTrainer],
    api: httpx.Client,
    keys: dict[str, str],
) -> None:
    clock = ManualClock(wall=datetime(2026, 1, 1, tzinfo=UTC))
    trainer.ctx.clock = clock
    key = keys["maths"]
    session_id = session(api, key)
    run_id = create_model(api, key, session_id)
    trainer.close()

    clock.advance(30)
    again = restarted(in_process_factory, clock)
    held = driven(again)  # as the restarted service starts, before any Tinker request
    api = again.client()
    clock.advance(59)  # within heartbeat-seconds (60) of the restart
    assert service.expire(again.ctx, held) == []
    clock.advance(2)
    assert service.expire(again.ctx, held) == [session_id]
    assert service.expire(again.ctx, held) == []  # ended once

    assert api.get(f"/v1/runs/{run_id}").json()["phase"] == "CANCELLED"
    with again.ctx.db.session() as db:
        events = list(db.scalars(select(Event.message).where(Event.run_id == run_id)))
    assert any(
        f"Tinker session {session_id} sent no heartbeat for 60 s" in message for message in events
    )
    gone = call(api, key, "/session_heartbeat", {"session_id": session_id})
    assert gone.status_code == 410
    assert gone.json() == {
        "detail": f"Session {session_id} has ended: it sent no heartbeat for 60 s."
    }
    assert call(api, key, f"/sessions/{session_id}").json()["user_metadata"] == {
        "project": "maths",
        "heartbeat_at": "2026-01-01T00:00:00+00:00",
        "ended": "expired",
    }


def test_replicas_share_sessions_and_end_each_once(
    trainer: InProcessTrainer,
    in_process_factory: Callable[..., InProcessTrainer],
    api: httpx.Client,
    keys: dict[str, str],
) -> None:
    clock = ManualClock(wall=datetime(2026, 1, 1, tzinfo=UTC))
    trainer.ctx.clock = clock
    key = keys["maths"]
    session_id = session(api, key)
    create_model(api, key, session_id)
    mine = driven(trainer)
    replica = restarted(in_process_factory, clock)
    theirs = driven(replica)
    other_api = replica.client()

    # Heartbeats through the replica keep the session alive here.
    clock.advance(50)
    assert call(other_api, key, "/session_heartbeat", {"session_id": session_id}).is_success
    clock.advance(50)
    assert service.expire(trainer.ctx, mine) == []
    clock.advance(61)
    assert service.expire(replica.ctx, theirs) == [session_id]
    assert service.expire(trainer.ctx, mine) == []


@pytest.mark.parametrize(
    ("method", "path", "words"),
    [
        ("DELETE", "/training_runs/r1/checkpoints/weights/a", "Deleting a checkpoint is not"),
        ("POST", "/training_runs/r1/checkpoints/weights/a/publish", "Publishing a checkpoint"),
        ("DELETE", "/training_runs/r1/checkpoints/weights/a/publish", "Publishing a checkpoint"),
        ("PUT", "/training_runs/r1/checkpoints/weights/a/ttl", "Checkpoint TTLs are not"),
        ("POST", "/copy_weights", "Copying weights between projects is not supported"),
        ("POST", "/save_weights_external", "save_weights_external is not supported"),
        ("PUT", "/sessions/s1/project", "Moving a session to another project is not"),
        ("GET", "/sessions/s1/trace_export", "Session traces are not supported"),
        ("POST", "/sessions/search", "Searching sessions is not supported"),
    ],
)
def test_what_the_trainer_has_no_counterpart_for_is_refused(
    api: httpx.Client, keys: dict[str, str], method: str, path: str, words: str
) -> None:
    refused = api.request(method, BASE + path, headers={"X-API-Key": keys["maths"]}, json={})
    assert refused.status_code == 400
    assert words in refused.json()["error"]["message"]


def test_rest_reads_refuse_what_they_cannot_answer(
    trainer: InProcessTrainer, api: httpx.Client, keys: dict[str, str]
) -> None:
    key = keys["maths"]
    missing = call(api, key, "/training_runs/nope")
    assert missing.status_code == 404
    assert "There is no training run 'nope' on this trainer" in missing.json()["error"]["message"]
    paged = call(api, key, "/training_runs?limit=0")
    assert paged.status_code == 400
    assert "limit is 1 to 1000 and offset 0 or more" in paged.json()["error"]["message"]
    not_a_path = call(api, key, "/weights_info", {"tinker_path": "tinker://r1/sampler_weights/a"})
    assert not_a_path.status_code == 400
    assert "is not a path of saved weights" in not_a_path.json()["error"]["message"]
    assert call(api, key, "/training_runs").json()["cursor"]["total_count"] == 0
    body = {
        "session_id": session(api, key),
        "model_seq_id": 0,
        "base_model": "tiny-chat",
        "lora_config": {"rank": 8},
    }
    run_id = call(api, key, "/create_model", body).json()["model_id"]
    (listed,) = call(api, key, "/training_runs").json()["training_runs"]
    assert (listed["training_run_id"], listed["lora_rank"]) == (run_id, 8)
    assert listed["user_metadata"] == {"project": "maths", "phase": "queued"}
    assert call(api, key, f"/training_runs/{run_id}/checkpoints").json()["checkpoints"] == []
    foreign = call(api, keys["other"], f"/training_runs/{run_id}")
    assert foreign.status_code == 403
    assert "has no access to project 'maths'" in foreign.json()["error"]["message"]

    # A download URL holds while its signature does and until it expires.
    clock = ManualClock(wall=datetime(2026, 1, 1, tzinfo=UTC))
    trainer.ctx.clock = clock
    session(api, key)
    held: service.Sessions = trainer.app.state.tinker_sessions
    expires = int(clock.now().timestamp()) + 60
    good = rest.sign(held.secret, "r1", "a", "adapter_config.json", expires)
    url = f"{BASE}/external_weights/r1/a/files/adapter_config.json?expires={expires}"
    forged = api.get(f"{url}&signature={'0' * len(good)}")
    assert forged.status_code == 403
    assert "This download URL is not valid here" in forged.json()["error"]["message"]
    clock.advance(61)
    late = api.get(f"{url}&signature={good}")
    assert late.status_code == 403
    assert "This download URL has expired" in late.json()["error"]["message"]


def test_get_info_names_the_tokenizer_by_the_catalogs_hub_name(
    trainer: InProcessTrainer, api: httpx.Client, keys: dict[str, str]
) -> None:
    key = keys["maths"]
    body = {
        "session_id": session(api, key),
        "model_seq_id": 0,
        "base_model": "tiny-chat",
        "lora_config": {"rank": 8},
    }
    run_id = call(api, key, "/create_model", body).json()["model_id"]
    info = call(api, key, "/get_info", {"model_id": run_id}).json()
    assert info["model_data"]["tokenizer_id"] == "tiny-chat"  # no Hugging Face name: its id
    trainer.ctx.catalog = [
        m.model_copy(update={"hub_id": "example/tiny-chat"}) if m.id == "tiny-chat" else m
        for m in trainer.ctx.catalog
    ]
    info = call(api, key, "/get_info", {"model_id": run_id}).json()
    assert info["model_data"]["tokenizer_id"] == "example/tiny-chat"
