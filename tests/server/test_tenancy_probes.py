"""Nothing leaks across projects: with a token of project `maths`, every route that names
something of project `physics` answers an existing thing exactly as one that is not there (the
same status, and the same body once the name the caller typed is set aside), and no answer
names anything of `physics` that the caller did not type.

Each probe is sent twice, once naming what `physics` holds and once naming what it does not;
the admin's answer to the first shows the thing is really there."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import chat_rows, project_token, register, sft_plan

# What physics holds under names the probes never type in their "absent" half: none of these
# may appear in an answer to the maths token.
SECRETS = ("waves", "grader", "hidden-alias")


@pytest.fixture
def trainer(in_process_factory: Callable[..., InProcessTrainer]) -> InProcessTrainer:
    return in_process_factory(
        {"trainer": {"projects": [{"name": "maths", "quota": 2}, {"name": "physics", "quota": 2}]}}
    )


@dataclass
class World:
    admin: httpx.Client
    maths: httpx.Client  # a client with a token of maths only
    run: str  # a physics run
    pipeline: str
    evaluation: str
    token: str  # the id of a token of physics


def _bundle_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("scoring.py", "def score(**kw):\n    return 1.0\n")
    return out.getvalue()


@pytest.fixture
def world(trainer: InProcessTrainer) -> World:
    admin = trainer.client()
    register(admin, "maths/train", chat_rows(12))
    register(admin, "physics/waves", chat_rows(12), alias="hidden-alias")
    bundle = admin.post("/v1/bundles/physics/grader", content=_bundle_zip())
    assert bundle.status_code == 201, bundle.text
    physics_plan = sft_plan(project="physics", config={"dataset": "physics/waves"})
    run = admin.post("/v1/runs", json=physics_plan)
    assert run.status_code == 200, run.text
    stage = {k: v for k, v in physics_plan.items() if k not in ("kind", "project")}
    pipeline = admin.post(
        "/v1/pipelines",
        json={
            "kind": "pipeline",
            "project": "physics",
            "stages": [{**stage, "name": "one", "type": "train"}],
        },
    )
    assert pipeline.status_code == 200, pipeline.text
    evaluation = admin.post("/v1/evaluations", json=_evaluation_plan("physics", "physics/waves"))
    assert evaluation.status_code == 200, evaluation.text
    token = admin.post("/v1/tokens", json={"name": "physicists", "projects": ["physics"]})
    assert token.status_code == 201, token.text
    return World(
        admin=admin,
        maths=trainer.client(project_token(admin, "maths")),
        run=run.json()["id"],
        pipeline=pipeline.json()["id"],
        evaluation=evaluation.json()["id"],
        token=token.json()["id"],
    )


def _evaluation_plan(project: str, dataset: str, **changes: Any) -> dict[str, Any]:
    return {
        "kind": "evaluation",
        "project": project,
        "baseModel": "tiny-chat",
        "dataset": dataset,
        "metrics": [{"name": "correct", "kind": "match"}],
        **changes,
    }


def absent_like(real: str) -> str:
    """An id of the same shape as `real` that names nothing: its hex tail moved by one."""
    tail = real[-12:]
    return real[:-12] + format((int(tail, 16) + 1) % 16**12, "012x")


@dataclass
class Probe:
    """A request naming `ref`: `path` and `body` are built from it."""

    name: str
    method: str
    path: Callable[[str], str]
    body: Callable[[str], Any] | None = None
    params: dict[str, str] | None = None

    def send(self, client: httpx.Client, ref: str) -> httpx.Response:
        body = self.body(ref) if self.body is not None else None
        return client.request(self.method, self.path(ref), json=body, params=self.params)


def _masked(response: httpx.Response, ref: str) -> tuple[int, str]:
    """The answer with the name the caller typed set aside."""
    return response.status_code, response.text.replace(json.dumps(ref)[1:-1], "REF")


def assert_one_answer(world: World, probes: list[Probe], present: str, absent: str) -> None:
    """Each probe answers the maths token the same for `present` and `absent`, names no secret,
    and is not an answer the admin gets for `present` (so the probe reaches the thing)."""
    differing = []
    for probe in probes:
        seen = _masked(probe.send(world.maths, present), present)
        unseen = _masked(probe.send(world.maths, absent), absent)
        if seen != unseen:
            differing.append((probe.name, seen, unseen))
        leaked = [
            s for s in (*SECRETS, world.run, world.pipeline, world.evaluation) if s in seen[1]
        ]
        assert not leaked, (probe.name, leaked, seen)
        assert seen[0] in (403, 404, 422), (probe.name, seen)
    assert differing == []


def test_a_dataset_of_another_project_answers_as_one_that_is_not_there(world: World) -> None:
    probes = [
        Probe("get", "GET", lambda r: f"/v1/datasets/{r}"),
        Probe("get a version", "GET", lambda r: f"/v1/datasets/{r}:v99"),
        Probe("get by alias", "GET", lambda r: f"/v1/datasets/{r}:hidden-alias"),
        Probe("versions", "GET", lambda r: f"/v1/datasets/{r}/versions"),
        Probe("alias", "PUT", lambda r: f"/v1/datasets/{r}/aliases/prod"),
        Probe(
            "run dry run",
            "POST",
            lambda _: "/v1/runs",
            lambda r: sft_plan(config={"dataset": r}),
            {"dry_run": "true"},
        ),
        Probe(
            "run evalDataset",
            "POST",
            lambda _: "/v1/runs",
            lambda r: sft_plan(config={"evalDataset": r}),
            {"dry_run": "true"},
        ),
        Probe(
            "evaluation dry run",
            "POST",
            lambda _: "/v1/evaluations",
            lambda r: _evaluation_plan("maths", r),
            {"dry_run": "true"},
        ),
    ]
    assert world.admin.get("/v1/datasets/physics/waves").status_code == 200
    assert_one_answer(world, probes, "physics/waves", "physics/nosuch")


def test_a_bundle_of_another_project_answers_as_one_that_is_not_there(world: World) -> None:
    rule = {"name": "r", "kind": "rule", "function": "scoring:score"}
    probes = [
        Probe("get", "GET", lambda r: f"/v1/bundles/{r}"),
        Probe("get a version", "GET", lambda r: f"/v1/bundles/{r}:v99"),
        Probe("get v1", "GET", lambda r: f"/v1/bundles/{r}:v1"),
        Probe(
            "evaluation metric",
            "POST",
            lambda _: "/v1/evaluations",
            lambda r: _evaluation_plan("maths", "maths/train", metrics=[{**rule, "bundle": r}]),
            {"dry_run": "true"},
        ),
    ]
    assert world.admin.get("/v1/bundles/physics/grader").status_code == 200
    assert_one_answer(world, probes, "physics/grader", "physics/nosuch")


def test_a_run_of_another_project_answers_as_one_that_is_not_there(world: World) -> None:
    def under(path: str) -> Callable[[str], str]:
        return lambda r: f"/v1/runs/{r}{path}"

    probes = [
        Probe(path, "GET", under(path))
        for path in (
            "",
            "/snapshots",
            "/metrics",
            "/rollouts",
            "/tree",
            "/logs",
            "/grafana",
            "/adapter",
            "/merged",
        )
    ]
    probes += [
        Probe(path, "POST", under(path)) for path in ("/cancel", "/resume", "/verifications")
    ]
    probes += [
        Probe("pause", "POST", lambda r: f"/v1/runs/{r}/pause", lambda _: {}),
        Probe("branch", "POST", lambda r: f"/v1/runs/{r}/branch", lambda _: {"snapshot": "s"}),
        Probe(
            "regrade",
            "POST",
            lambda r: f"/v1/runs/{r}/regrades",
            lambda _: {"reward": {"terms": [{"name": "n", "kind": "length", "target": 10}]}},
        ),
        Probe(
            "source of a dry run",
            "POST",
            lambda _: "/v1/runs",
            lambda r: sft_plan(source={"run": r}),
            {"dry_run": "true"},
        ),
        Probe(
            "source of an evaluation",
            "POST",
            lambda _: "/v1/evaluations",
            lambda r: _evaluation_plan("maths", "maths/train", source={"run": r}),
            {"dry_run": "true"},
        ),
    ]
    assert world.admin.get(f"/v1/runs/{world.run}").status_code == 200
    assert_one_answer(world, probes, world.run, absent_like(world.run))
    # A prefix of another's run is no more telling than a whole id.
    assert_one_answer(world, probes[:1], world.run[:6], absent_like(world.run)[:6])


def test_pipelines_evaluations_and_tasks_of_another_project_are_not_there(world: World) -> None:
    pipelines = [
        Probe("get", "GET", lambda r: f"/v1/pipelines/{r}"),
        Probe("cancel", "POST", lambda r: f"/v1/pipelines/{r}/cancel"),
        Probe("resume", "POST", lambda r: f"/v1/pipelines/{r}/resume"),
        Probe("adapter of a pipeline", "GET", lambda r: f"/v1/runs/{r}/adapter"),
    ]
    evaluations = [
        Probe("get", "GET", lambda r: f"/v1/evaluations/{r}"),
        Probe("samples", "GET", lambda r: f"/v1/evaluations/{r}/samples"),
        Probe("cancel", "POST", lambda r: f"/v1/evaluations/{r}/cancel"),
        Probe("task", "GET", lambda r: f"/v1/tasks/{r}"),
        Probe("cancel task", "POST", lambda r: f"/v1/tasks/{r}/cancel"),
    ]
    assert world.admin.get(f"/v1/pipelines/{world.pipeline}").status_code == 200
    assert world.admin.get(f"/v1/evaluations/{world.evaluation}").status_code == 200
    assert_one_answer(world, pipelines, world.pipeline, absent_like(world.pipeline))
    assert_one_answer(world, evaluations, world.evaluation, absent_like(world.evaluation))


def test_a_token_of_another_project_is_not_there(world: World) -> None:
    revoke = [Probe("revoke", "DELETE", lambda r: f"/v1/tokens/{r}")]
    assert_one_answer(world, revoke, world.token, absent_like(world.token))
    listed = [t["id"] for t in world.admin.get("/v1/tokens").json()]
    assert world.token in listed  # still there: the probe revoked nothing
    assert world.maths.delete(f"/v1/tokens/{world.token}").json() == {
        "error": {"code": "not-found", "message": f"There is no token {world.token!r}."}
    }


def test_the_words_of_each_answer(world: World) -> None:
    """What the maths token reads: a refusal for a project it cannot use, and not-found for an
    id of another project."""
    assert world.maths.get("/v1/datasets/physics/waves").json() == {
        "error": {
            "code": "forbidden",
            "message": "This token has no access to project 'physics'; use a token of that "
            "project or an admin token.",
        }
    }
    assert world.maths.get(f"/v1/runs/{world.run}").json() == {
        "error": {"code": "not-found", "message": f"There is no run {world.run!r}."}
    }
    refused = world.maths.post(
        "/v1/runs", params={"dry_run": "true"}, json=sft_plan(config={"dataset": "physics/waves"})
    ).json()["error"]
    assert refused["problems"] == [
        {
            "field": "config.dataset",
            "message": "config.dataset: This token has no access to project 'physics'; use a "
            "token of that project or an admin token.",
        }
    ]
