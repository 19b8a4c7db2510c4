"""Health, info, who may call, tokens, and the one error shape, through the real app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from akka_training.config.settings import SettingsError
from akka_training.testing.app import InProcessTrainer
from akka_training.testing.otlp_receiver import OtlpReceiver
from tests.server.routers.helpers import answer, error, project_token, register, sft_plan

NO_TOKEN = "This request needs a token: log in with `akka auth login`, or set AKKA_ACCESS_TOKEN."
UNKNOWN_TOKEN = "The token is not known to this trainer or was revoked; log in again."


def test_health_needs_no_token_and_everything_else_does(trainer: InProcessTrainer) -> None:
    anonymous = trainer.client(anonymous=True)

    assert answer(anonymous.get("/healthz")) == (200, {"status": "ok"})
    assert answer(anonymous.get("/readyz")) == (200, {"status": "ok"})
    for path in ("/v1/info", "/v1/projects", "/v1/runs", "/v1/capacity", "/v1/datasets"):
        assert answer(anonymous.get(path)) == (401, error("unauthorized", NO_TOKEN)), path
    assert answer(trainer.client("akka_not-a-token").get("/v1/runs")) == (
        401,
        error("unauthorized", UNKNOWN_TOKEN),
    )


def test_info_describes_this_deployment(trainer: InProcessTrainer, api: httpx.Client) -> None:
    info = api.get("/v1/info").json()

    assert {k: info[k] for k in ("engine", "backend", "pools", "defaultPool")} == {
        "engine": "trl",
        "backend": "local",
        "pools": ["default"],
        "defaultPool": "default",
    }
    # SFT and DPO train on TRL whatever the reinforcement engine.
    assert info["engines"] == {"sft": "trl", "dpo": "trl", "grpo": "trl", "gspo": "trl"}
    assert info["storage"] == f"file://{trainer.home.resolve()}/blobs"
    assert info["database"].startswith(
        "sqlite (" if trainer.ctx.db.dialect == "sqlite" else "postgresql (postgresql+psycopg://"
    )
    assert info["startup"].endswith("(development catalog)")


def test_a_project_token_reaches_its_projects_only(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    assert api.post("/v1/projects", json={"name": "physics"}).status_code == 201
    physicist = trainer.client(project_token(api, "physics"))
    no_access = error(
        "forbidden",
        "This token has no access to project 'maths'; use a token of that project or an admin "
        "token.",
    )

    assert answer(physicist.get("/v1/projects/maths")) == (403, no_access)
    assert answer(physicist.get("/v1/runs", params={"project": "maths"})) == (403, no_access)
    assert answer(physicist.get("/v1/capacity", params={"project": "maths"})) == (403, no_access)
    assert answer(physicist.post("/v1/runs", json=sft_plan())) == (403, no_access)
    assert answer(physicist.post("/v1/datasets/maths/train", content=b"{}\n")) == (403, no_access)
    assert [p["name"] for p in physicist.get("/v1/projects").json()] == ["physics"]
    assert answer(physicist.post("/v1/projects", json={"name": "chemistry"})) == (
        403,
        error("forbidden", "This needs an admin token."),
    )


def test_tokens_are_created_listed_exchanged_and_revoked(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    created = api.post("/v1/tokens", json={"name": "ci", "projects": ["maths"]})
    assert created.status_code == 201
    token = created.json()
    assert {k: token[k] for k in ("name", "kind", "projects", "expiresAt", "revokedAt")} == {
        "name": "ci",
        "kind": "project",
        "projects": ["maths"],
        "expiresAt": None,
        "revokedAt": None,
    }
    assert token["token"].startswith("akka_")
    listed = api.get("/v1/tokens").json()
    assert [(t["name"], t["kind"]) for t in listed] == [
        ("admin (in-process trainer)", "admin"),
        ("ci", "project"),
    ]
    assert all("token" not in t for t in listed)  # a secret is shown once, when created

    exchanged = api.post("/v1/auth/exchange", json={"login": token["token"]}).json()
    access = trainer.client(exchanged["accessToken"])
    who = access.get("/v1/auth/whoami").json()
    assert (who["name"], who["kind"], who["projects"]) == ("access for ci", "access", ["maths"])
    assert exchanged["login"]["id"] == token["id"]

    revoked = api.delete(f"/v1/tokens/{token['id']}").json()
    assert revoked["revokedAt"] is not None
    # The login and what it was exchanged for stop working.
    assert answer(trainer.client(token["token"]).get("/v1/runs")) == (
        401,
        error("unauthorized", UNKNOWN_TOKEN),
    )
    assert answer(access.get("/v1/runs")) == (
        401,
        error("unauthorized", "The login behind this token was revoked; log in again."),
    )
    assert answer(api.post("/v1/auth/exchange", json={"login": token["token"]})) == (
        401,
        error(
            "unauthorized",
            "This login is not valid at this API host (unknown, revoked or expired); run `akka "
            "auth login` again.",
        ),
    )


def test_token_refusals(api: httpx.Client) -> None:
    assert answer(api.post("/v1/tokens", json={"name": "ci"})) == (
        400,
        error("invalid", "Name the projects the token may use (--project), or ask for --admin."),
    )
    assert answer(api.post("/v1/tokens", json={"name": "ci", "projects": ["nope"]})) == (
        404,
        error("not-found", "There is no project 'nope'."),
    )
    assert answer(api.delete("/v1/tokens/t-nope")) == (
        404,
        error("not-found", "There is no token 't-nope'."),
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "expected"),
    [
        (
            "GET",
            "/v1/runs/0123456789ab",
            None,
            404,
            error("not-found", "There is no run '0123456789ab'."),
        ),
        (
            "GET",
            "/v1/runs/ab",
            None,
            400,
            error("invalid", "Give at least 3 characters of a run id."),
        ),
        (
            "POST",
            "/v1/projects",
            {"quota": 1},
            400,
            error(
                "invalid",
                "The request is not valid:\n  - name is required; set it.",
                [{"field": "name", "message": "name is required; set it."}],
            ),
        ),
        (
            "POST",
            "/v1/projects",
            {"name": "optics", "quotaa": 1},
            400,
            error(
                "invalid",
                "The request is not valid:\n  - quotaa is not a known field; remove it or "
                "check its spelling.",
                [
                    {
                        "field": "quotaa",
                        "message": "quotaa is not a known field; remove it or check its spelling.",
                    }
                ],
            ),
        ),
        (
            "POST",
            "/v1/runs",
            {"kind": "evaluation"},
            422,
            error(
                "plan-refused",
                "The plan was refused (1 problem):\n  - kind is 'evaluation'; set it to run or "
                "pipeline.",
                [{"field": "kind", "message": "kind is 'evaluation'; set it to run or pipeline."}],
            ),
        ),
        (
            "POST",
            "/v1/jobs/r1/attempts/1/steps",
            {"step": 1},
            403,
            error("forbidden", "This token reports for another run or attempt."),
        ),
    ],
)
def test_errors_answer_in_one_shape(
    api: httpx.Client, method: str, path: str, body: Any, status: int, expected: dict[str, Any]
) -> None:
    assert answer(api.request(method, path, json=body)) == (status, expected)


def test_a_job_token_reads_nothing(api: httpx.Client, trainer: InProcessTrainer) -> None:
    api.post("/v1/datasets/maths/train", content=b'{"prompt": "1+1", "completion": "2"}\n')
    run = api.post("/v1/runs", json=sft_plan()).json()
    job = trainer.job_client(trainer.admit(run["id"]))
    refused = error("forbidden", "A job token can only report for its own run.")

    for path in (
        "/v1/runs",
        "/v1/projects",
        "/v1/datasets",
        "/v1/capacity",
        "/v1/tokens",
        "/v1/bundles",
        "/v1/pipelines",
        "/v1/tasks",
        "/v1/info",
        "/v1/auth/whoami",
        f"/v1/runs/{run['id']}",
        "/v1/base-models",
    ):
        assert answer(job.get(path)) == (403, refused), path
    assert answer(job.post("/v1/tokens", json={"name": "mine", "projects": ["maths"]})) == (
        403,
        refused,
    )
    assert answer(job.post("/v1/datasets/maths/more", content=b"{}\n")) == (403, refused)


def test_a_job_token_is_revoked_when_its_attempt_ends(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    api.post("/v1/datasets/maths/train", content=b'{"prompt": "1+1", "completion": "2"}\n')
    run = api.post("/v1/runs", json=sft_plan()).json()
    launch = trainer.admit(run["id"])
    job = trainer.job_client(launch)
    reports = f"/v1/jobs/{run['id']}/attempts/{launch.attempt}"
    assert answer(job.post(f"{reports}/heartbeat", json={})) == (200, {"action": "continue"})

    ended = job.post(f"{reports}/failed", json={"code": "training-error", "detail": "boom"})
    assert ended.status_code == 200, ended.text

    # The job's late reports are told to stop; anywhere else the token is unknown.
    assert answer(job.post(f"{reports}/heartbeat", json={})) == (
        409,
        error(
            "conflict", f"Attempt {launch.attempt} of run {run['id']} is no longer current; stop."
        ),
    )
    assert answer(job.get("/v1/runs")) == (401, error("unauthorized", UNKNOWN_TOKEN))


def test_capacity_shows_a_project_token_its_own_projects_only(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    assert api.post("/v1/projects", json={"name": "physics", "quota": 1}).status_code == 201
    api.post("/v1/datasets/maths/train", content=b'{"prompt": "1+1", "completion": "2"}\n')
    run = api.post("/v1/runs", json=sft_plan()).json()
    physicist = trainer.client(project_token(api, "physics"))

    mine = physicist.get("/v1/capacity").json()
    everyone = api.get("/v1/capacity").json()

    assert [p["project"] for p in mine["projects"]] == ["physics"]
    assert mine["claims"] == []
    assert [p["project"] for p in everyone["projects"]] == ["maths", "physics"]
    assert [c["for"] for c in everyone["claims"]] == [run["id"]]
    # The pools are shared: a project's token sees them whole.
    assert mine["pools"] == everyone["pools"]


def test_a_prefix_of_another_projects_run_answers_as_no_run(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    assert api.post("/v1/projects", json={"name": "physics"}).status_code == 201
    api.post("/v1/datasets/maths/train", content=b'{"prompt": "1+1", "completion": "2"}\n')
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    physicist = trainer.client(project_token(api, "physics"))
    prefix = run_id[:-2]

    for path in (f"/v1/runs/{prefix}", f"/v1/runs/{prefix}/metrics", f"/v1/runs/{prefix}/adapter"):
        assert answer(physicist.get(path)) == (
            404,
            error("not-found", f"There is no run {prefix!r}."),
        ), path
    # The project's own tokens still find it by the prefix.
    assert api.get(f"/v1/runs/{prefix}").json()["id"] == run_id


# Two in-process trainers each (SQLite and Postgres) with an OTLP receiver: kept out of
# the fast layer.
@pytest.mark.slow
def test_the_service_metrics_leave_by_one_path(
    in_process_factory: Any, trainer: InProcessTrainer, api: httpx.Client
) -> None:
    # No collector: Prometheus scrapes /metrics (with an admin token here; the metrics token
    # is tested below).
    scraped = api.get("/metrics")
    assert scraped.status_code == 200
    assert "akka_optimize_training_pool_devices_declared" in scraped.text
    assert api.get("/v1/info").json()["telemetry"] == (
        "service metrics at /metrics; jobs write metrics.jsonl and TensorBoard"
    )

    # With a collector the service exports over OTLP, and /metrics says where they went.
    with OtlpReceiver() as receiver:
        exporting = in_process_factory(
            {"trainer": {"telemetry": {"collector-endpoint": receiver.endpoint}}}
        )
        answered = exporting.client().get("/metrics")
        info = exporting.client().get("/v1/info").json()
        exporting.close()
    assert answer(answered) == (
        404,
        error(
            "not-found",
            f"this deployment exports the service's metrics over OTLP to {receiver.endpoint} "
            "(trainer.telemetry.service-metrics: otlp), so /metrics serves none: scrape the "
            "collector's Prometheus exporter, or set trainer.telemetry.service-metrics to "
            "scrape to serve them here instead",
        ),
    )
    assert info["telemetry"] == (
        f"service metrics over OTLP to {receiver.endpoint}; jobs over OTLP to {receiver.endpoint}"
    )


# Two in-process trainers each (SQLite and Postgres) with an OTLP receiver: kept out of
# the fast layer.
@pytest.mark.slow
def test_a_dataset_registration_is_a_span_with_the_service_s_name(in_process_factory: Any) -> None:
    with OtlpReceiver() as receiver:
        trainer = in_process_factory(
            {
                "trainer": {
                    "projects": [{"name": "maths"}],
                    "telemetry": {"collector-endpoint": receiver.endpoint},
                }
            }
        )
        rows = b'{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}\n'
        registered = register(trainer.client(), "maths/train", rows)
        trainer.close()
        span = receiver.wait_for_span("akka.optimize.training.dataset.register")
    assert span.attributes == {
        "akka.optimize.training.project": "maths",
        "akka.optimize.training.dataset": registered["ref"],
    }
    # Spans and metrics of the service carry one service.name.
    assert span.resource["service.name"] == "akka-training"
    assert receiver.wait_for_metric("akka.optimize.training.pool.devices.declared").resource[
        "service.name"
    ] == ("akka-training")


def test_metrics_answer_the_metrics_token_and_admin_tokens_only(
    in_process_factory: Any, tmp_path: Path
) -> None:
    secret = "m" * 40
    token_file = tmp_path / "metrics-token"
    token_file.write_text(secret + "\n")
    trainer = in_process_factory(
        {
            "trainer": {
                "projects": [{"name": "maths"}],
                "telemetry": {"metrics-token-file": str(token_file)},
            }
        }
    )
    api = trainer.client()
    prometheus = trainer.client(secret)

    scraped = prometheus.get("/metrics")
    assert scraped.status_code == 200
    assert "akka_optimize_training_pool_devices_declared" in scraped.text
    assert api.get("/metrics").status_code == 200
    # Neither the metrics token nor anything else it may do.
    assert answer(prometheus.get("/v1/runs")) == (401, error("unauthorized", UNKNOWN_TOKEN))
    assert answer(trainer.client(anonymous=True).get("/metrics")) == (
        401,
        error(
            "unauthorized",
            "GET /metrics needs a token: give Prometheus the metrics token "
            "(trainer.telemetry.metrics-token-file) or an admin token as its bearer token "
            "(authorization.credentials_file in its scrape config).",
        ),
    )
    assert answer(trainer.client("m" * 39).get("/metrics")) == (
        401,
        error("unauthorized", UNKNOWN_TOKEN),
    )
    assert answer(trainer.client(project_token(api, "maths")).get("/metrics")) == (
        403,
        error(
            "forbidden",
            "The service's metrics cover every project: scrape them with the metrics token "
            "(trainer.telemetry.metrics-token-file) or an admin token.",
        ),
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read (No such file or directory)"),
        ("short", "holds a token shorter than 32 characters"),
    ],
)
def test_a_metrics_token_file_that_will_not_do_stops_the_start(
    in_process_factory: Any, tmp_path: Path, content: str | None, problem: str
) -> None:
    token_file = tmp_path / "metrics-token"
    if content is not None:
        token_file.write_text(content)
    with pytest.raises(SettingsError) as refused:
        in_process_factory({"trainer": {"telemetry": {"metrics-token-file": str(token_file)}}})
    assert str(refused.value).startswith(
        f"Bad setting: trainer.telemetry.metrics-token-file {token_file} {problem}"
    )


def test_the_last_live_admin_token_cannot_be_revoked(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    admin_id = api.get("/v1/auth/whoami").json()["tokenId"]
    assert answer(api.delete(f"/v1/tokens/{admin_id}")) == (
        409,
        error(
            "conflict",
            f"Token {admin_id} is the last live admin token; revoking it would leave no one able "
            "to manage the trainer. Create another admin token first (`akka auth tokens create "
            "NAME --admin`), then revoke this one. Locked out already: start the trainer with "
            "`trainer.bootstrap.admin-token` set to a new secret.",
        ),
    )
    # With a second live admin token the first can go; then the second is the last.
    second = api.post("/v1/tokens", json={"name": "ops", "admin": True}).json()
    revoked = api.delete(f"/v1/tokens/{admin_id}").json()
    assert revoked["revokedAt"] is not None
    ops = trainer.client(second["token"])
    assert answer(ops.delete(f"/v1/tokens/{second['id']}"))[0] == 409


def test_a_token_lives_at_least_an_hour(api: httpx.Client) -> None:
    message = "expiresInDays is 1e-09; set it to at least 0.0416667."
    assert answer(
        api.post("/v1/tokens", json={"name": "ci", "admin": True, "expiresInDays": 1e-9})
    ) == (
        400,
        error(
            "invalid",
            f"The request is not valid:\n  - {message}",
            [{"field": "expiresInDays", "message": message}],
        ),
    )
    hour = api.post("/v1/tokens", json={"name": "ci", "admin": True, "expiresInDays": 1 / 24})
    assert hour.status_code == 201
