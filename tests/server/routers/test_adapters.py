"""A run's adapter and merged model through the real app: the manifest in the Hugging Face
layout, every file streamed with the sha256 the manifest gives, the model card and settings,
the public name of the base model, and every refusal in its words; the merge as a task with
its own token and reports."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml

from akka_training.controller.tasks import prepare_task_launch
from akka_training.devmodels.catalog import read_catalog
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, project_token, register, sft_plan

WEIGHTS = b"\x10\x00\x00\x00\x00\x00\x00\x00" + b'{"__metadata__":{}}' + b"\x00" * 64
CONFIG = {
    "base_model_name_or_path": "/srv/models/tiny-chat",
    "r": 8,
    "lora_alpha": 16,
    "bias": "none",
    "peft_type": "LORA",
    "task_type": "CAUSAL_LM",
    "target_modules": ["model.layers.0.self_attn.q_proj"],
}
TOKENIZER = {"tokenizer.json": b'{"model": {}}', "chat_template.jinja": b"{{ messages }}"}


@pytest.fixture
def dataset(api: httpx.Client) -> dict[str, Any]:
    return register(api, "maths/train", chat_rows(12))


class Job:
    """Reports as a run's job does, and writes what a job writes to the blob store."""

    def __init__(self, trainer: InProcessTrainer, run_id: str) -> None:
        self.trainer = trainer
        self.run_id = run_id
        self.launch = trainer.admit(run_id)
        self.client = trainer.job_client(self.launch)
        self.blobs = trainer.ctx.blobs
        for name, data in TOKENIZER.items():
            self.blobs.put_bytes(f"runs/{run_id}/tokenizer/{name}", data)

    def report(self, kind: str, body: dict[str, Any]) -> None:
        path = f"/v1/jobs/{self.run_id}/attempts/{self.launch.attempt}/{kind}"
        response = self.client.post(path, json=body)
        assert response.status_code == 200, response.text

    def step(self, step: int, **metrics: float) -> None:
        self.report("steps", {"step": step, "metrics": metrics})

    def snapshot(self, step: int, weights: bytes = WEIGHTS) -> None:
        prefix = f"runs/{self.run_id}/snapshots/step-{step}/"
        self.adapter(prefix + "weights/", weights)
        body = {"name": f"step-{step}", "step": step, "weights": prefix + "weights/"}
        self.report("snapshots", {**body, "trainingState": prefix + "training-state/"})

    def finish(self, step: int, loss: float) -> None:
        prefix = f"runs/{self.run_id}/adapter/"
        self.adapter(prefix, WEIGHTS)
        self.report(
            "finished",
            {
                "adapter": prefix,
                "step": step,
                "adapterModules": ["model.layers.0.self_attn.q_proj"],
                "summary": {"loss": loss},
            },
        )

    def adapter(self, prefix: str, weights: bytes) -> None:
        self.blobs.put_bytes(prefix + "adapter_config.json", json.dumps(CONFIG).encode())
        self.blobs.put_bytes(prefix + "adapter_model.safetensors", weights)


def completed_run(api: httpx.Client, trainer: InProcessTrainer, **plan: Any) -> str:
    run_id: str = api.post("/v1/runs", json=sft_plan(**plan)).json()["id"]
    job = Job(trainer, run_id)
    job.report("training", {"totalSteps": 4})
    for step in (1, 2, 3, 4):
        job.step(step, loss=4.0 / step)
        if step == 2:
            job.snapshot(2, WEIGHTS + b"step-2")
    job.finish(4, 1.0)
    return run_id


def files_of(api: httpx.Client, url: str, **params: str) -> dict[str, bytes]:
    manifest = api.get(url, params=params).json()
    out = {}
    for entry in manifest["files"]:
        response = api.get(f"{url}/files/{entry['path']}", params=params)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/octet-stream"
        assert len(response.content) == entry["bytes"]
        assert hashlib.sha256(response.content).hexdigest() == entry["sha256"]
        out[entry["path"]] = response.content
    return out


def test_a_completed_runs_adapter_leaves_in_the_hugging_face_layout(
    api: httpx.Client, trainer: InProcessTrainer, dataset: Any
) -> None:
    run_id = completed_run(api, trainer, modelName="maths-sft", description="first try")

    manifest = api.get(f"/v1/runs/{run_id}/adapter").json()

    assert {k: v for k, v in manifest.items() if k != "files"} == {
        "run": run_id,
        "project": "maths",
        "kind": "adapter",
        "snapshot": None,
        "step": 4,
        "directory": "maths-sft",
        "baseModel": "tiny-chat",
        "baseModelNameOrPath": "tiny-chat",
        "totalBytes": sum(f["bytes"] for f in manifest["files"]),
    }
    assert [f["path"] for f in manifest["files"]] == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "chat_template.jinja",
        "tokenizer.json",
        "README.md",
        "training_settings.json",
    ]
    files = files_of(api, f"/v1/runs/{run_id}/adapter")
    assert files["adapter_model.safetensors"] == WEIGHTS
    assert files["tokenizer.json"] == TOKENIZER["tokenizer.json"]
    # The base model by the name a user's tools resolve (no hub id in this catalog: its catalog
    # id), never the path on the trainer's disk; the rest of the config as the job wrote it.
    config = json.loads(files["adapter_config.json"])
    assert config == {**CONFIG, "base_model_name_or_path": "tiny-chat", "revision": None}
    record = api.get(f"/v1/runs/{run_id}").json()
    # The settings the run trained under, less the base model's path on the trainer's disk.
    settings = record["settings"]
    base_path = settings["baseModel"].pop("path")
    assert json.loads(files["training_settings.json"]) == settings
    for name, data in files.items():
        assert base_path.encode() not in data, name
        assert str(trainer.home).encode() not in data, name
    card = files["README.md"].decode()
    front = yaml.safe_load(card.split("---")[1])
    assert front == {
        "library_name": "peft",
        "pipeline_tag": "text-generation",
        "tags": ["akka-training", "sft", "lora"],
    }
    for text in (
        "# maths-sft",
        f"This is a LoRA adapter for `tiny-chat`, trained by akka training (run `{run_id}` of "
        "project `maths`).",
        "first try",
        "| Method | sft on trl |",
        f"| Dataset | `maths/train` version 1 (sha256 `{dataset['sha256']}`, 12 rows) |",
        "| Steps | 4 |",
        "| Weights | the final adapter |",
        "| Training loss | 1 |",
        "| Lineage | a fresh adapter (no source run) |",
        "| LoRA | rank 8, alpha 16, 1 modules (q_proj) |",
        "vllm serve tiny-chat --enable-lora --lora-modules maths-sft=DIR --max-lora-rank 8",
        # The snippets say what to replace: DIR, and a catalog id no Hub repository answers to.
        "Replace `DIR` with this directory (where `akka training runs download` put it) or with "
        "the Hub repository you upload it to. `tiny-chat` is the base model's name in the "
        "trainer's catalog, not a Hub repository: replace it with the base model's Hub id or a "
        "directory holding its files.",
        yaml.safe_dump(settings, sort_keys=False, width=100).rstrip(),
    ):
        assert text in card, text
    assert "Evaluation loss" not in card  # the run had no evaluation set
    # The same card each time: the manifest's checksum holds when the file is fetched again.
    assert files_of(api, f"/v1/runs/{run_id}/adapter")["README.md"] == files["README.md"]


def test_the_card_gives_the_evaluation_loss_of_a_run_with_an_evaluation_set(
    api: httpx.Client, trainer: InProcessTrainer, dataset: Any
) -> None:
    held_out = register(api, "maths/held-out", chat_rows(4))
    plan = sft_plan(config={"evalDataset": "maths/held-out"})
    run_id: str = api.post("/v1/runs", json=plan).json()["id"]
    job = Job(trainer, run_id)
    job.report("training", {"totalSteps": 4})
    for step in (1, 2, 3, 4):
        job.step(step, loss=4.0 / step, **({"eval_loss": 3.0 / step} if step % 2 == 0 else {}))
        if step == 2:
            job.snapshot(2, WEIGHTS + b"step-2")
    job.finish(4, 1.0)

    final = files_of(api, f"/v1/runs/{run_id}/adapter")["README.md"].decode()
    assert "| Evaluation loss | 0.75 on `maths/held-out` version 1 (4 rows) |" in final
    assert held_out["rows"] == 4
    snapshot = files_of(api, f"/v1/runs/{run_id}/adapter", snapshot="step-2")["README.md"]
    assert "| Evaluation loss | 1.5 on `maths/held-out` version 1 (4 rows) |" in snapshot.decode()


def test_a_snapshot_leaves_with_its_own_weights_step_and_loss(
    api: httpx.Client, trainer: InProcessTrainer, dataset: Any
) -> None:
    run_id = completed_run(api, trainer)

    manifest = api.get(f"/v1/runs/{run_id}/adapter", params={"snapshot": "step-2"}).json()
    files = files_of(api, f"/v1/runs/{run_id}/adapter", snapshot="step-2")

    assert (manifest["snapshot"], manifest["step"], manifest["directory"]) == (
        "step-2",
        2,
        f"{run_id}-step-2",
    )
    assert files["adapter_model.safetensors"] == WEIGHTS + b"step-2"
    card = files["README.md"].decode()
    assert "| Weights | snapshot `step-2` |" in card and "| Training loss | 2 |" in card
    assert "| Steps | 2 |" in card


# The catalog decides here, not the database: one database is enough.
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_the_catalogs_hub_id_names_the_base_model(
    in_process_factory: Callable[..., InProcessTrainer], dev_models: Path
) -> None:
    entry = next(e for e in read_catalog(dev_models) if e["id"] == "tiny-chat")
    entry |= {"hubId": "Qwen/Qwen3-0.6B", "hubRevision": "c1899de"}
    trainer = in_process_factory({"trainer": {"projects": [{"name": "maths"}], "catalog": [entry]}})
    api = trainer.client()
    register(api, "maths/train", chat_rows(12))
    run_id = completed_run(api, trainer)

    files = files_of(api, f"/v1/runs/{run_id}/adapter")

    config = json.loads(files["adapter_config.json"])
    assert (config["base_model_name_or_path"], config["revision"]) == ("Qwen/Qwen3-0.6B", "c1899de")
    card = files["README.md"].decode()
    front = yaml.safe_load(card.split("---")[1])
    assert (front["base_model"], front["base_model_relation"]) == ("Qwen/Qwen3-0.6B", "adapter")
    assert "| Base model | `Qwen/Qwen3-0.6B` (catalog id `tiny-chat`), revision `c1899de` |" in card
    detail = api.get("/v1/base-models/tiny-chat").json()
    assert (detail["hubId"], detail["hubRevision"]) == ("Qwen/Qwen3-0.6B", "c1899de")


def test_a_run_without_an_adapter_is_refused_with_the_reason(
    api: httpx.Client, trainer: InProcessTrainer, dataset: Any
) -> None:
    queued = api.post("/v1/runs", json=sft_plan()).json()["id"]
    assert answer(api.get(f"/v1/runs/{queued}/adapter")) == (
        409,
        error(
            "conflict",
            f"Run {queued} has no adapter yet: it is QUEUED and has not trained a step. "
            f"Download it once it completes (`akka training runs wait {queued}`).",
        ),
    )
    assert answer(api.post(f"/v1/runs/{queued}/merged", json={})) == (
        409,
        error(
            "conflict",
            f"Run {queued} has no adapter yet: it is QUEUED and has not trained a step. "
            f"Export it once it completes (`akka training runs wait {queued}`).",
        ),
    )
    api.post(f"/v1/runs/{queued}/cancel")

    training = api.post("/v1/runs", json=sft_plan()).json()["id"]
    job = Job(trainer, training)
    job.report("training", {"totalSteps": 4})
    job.step(1, loss=2.0)
    assert answer(api.get(f"/v1/runs/{training}/adapter")) == (
        409,
        error(
            "conflict",
            f"Run {training} has no adapter yet: it is TRAINING at step 1 of 4 and has saved no "
            "snapshot (it saves every 2 steps). Download it once it completes "
            f"(`akka training runs wait {training}`).",
        ),
    )
    job.step(2, loss=1.0)
    job.snapshot(2)
    assert answer(api.get(f"/v1/runs/{training}/adapter")) == (
        409,
        error(
            "conflict",
            f"Run {training} has no final adapter yet: it is TRAINING at step 2 of 4. Download "
            "its latest snapshot with --snapshot step-2 (step 2), or wait until it completes "
            f"(`akka training runs wait {training}`).",
        ),
    )
    job.report("failed", {"code": "device-oom", "detail": "CUDA out of memory"})
    assert answer(api.get(f"/v1/runs/{training}/adapter")) == (
        409,
        error(
            "conflict",
            f"Run {training} has no final adapter: it FAILED at step 2. Its latest snapshot is "
            "step-2 (step 2): download it with --snapshot step-2.",
        ),
    )
    assert api.get(f"/v1/runs/{training}/adapter", params={"snapshot": "step-2"}).status_code == 200
    assert answer(api.get(f"/v1/runs/{training}/adapter", params={"snapshot": "step-9"})) == (
        404,
        error("not-found", f"Run {training} has no snapshot 'step-9'; its snapshots: step-2."),
    )

    early = api.post("/v1/runs", json=sft_plan()).json()["id"]
    Job(trainer, early).report("failed", {"code": "data-error", "detail": "no rows"})
    assert answer(api.get(f"/v1/runs/{early}/adapter")) == (
        409,
        error(
            "conflict",
            f"Run {early} has no adapter: it FAILED before its first save (this run's dataset "
            "could not be prepared for training).",
        ),
    )
    assert answer(api.post(f"/v1/runs/{early}/merged", json={})) == (
        409,
        error(
            "conflict",
            f"Run {early} has no adapter: it FAILED before its first save (this run's dataset "
            "could not be prepared for training).",
        ),
    )


def test_another_projects_run_a_pipeline_and_unknown_files_are_refused(
    api: httpx.Client, trainer: InProcessTrainer, dataset: Any
) -> None:
    run_id = completed_run(api, trainer)
    api.post("/v1/projects", json={"name": "physics"})
    physics = trainer.client(project_token(api, "physics"))
    # Another project's run answers as one that does not exist.
    unknown = error("not-found", f"There is no run {run_id!r}.")
    assert answer(physics.get(f"/v1/runs/{run_id}/adapter")) == (404, unknown)
    assert answer(physics.get(f"/v1/runs/{run_id}/adapter/files/adapter_model.safetensors")) == (
        404,
        unknown,
    )
    assert answer(physics.post(f"/v1/runs/{run_id}/merged", json={})) == (404, unknown)

    names = (
        "adapter_config.json, adapter_model.safetensors, chat_template.jinja, tokenizer.json, "
        "README.md, training_settings.json"
    )
    for path in ("training-state/optimizer.pt", "../../../datasets/sha256/x.jsonl"):
        assert answer(api.get(f"/v1/runs/{run_id}/adapter/files/{quote(path, safe='')}")) == (
            404,
            error(
                "not-found",
                f"The adapter of run {run_id} has no file {path!r}; its files: {names}.",
            ),
        )

    stage = {k: v for k, v in sft_plan().items() if k not in ("kind", "project")}
    pipeline = {
        "kind": "pipeline",
        "project": "maths",
        "stages": [
            {"name": "sft", "type": "train", **stage},
            {"name": "again", "type": "train", "source": {"run": "@sft"}, **stage},
        ],
    }
    started = api.post("/v1/pipelines", json=pipeline).json()
    stage_run = next(r for r in api.get("/v1/runs").json() if r["pipeline"] == started["id"])
    assert answer(api.get(f"/v1/runs/{started['id']}/adapter")) == (
        400,
        error(
            "invalid",
            f"{started['id']} is a pipeline, not a run: download the adapter of one of its "
            f"stages' runs (sft: run {stage_run['id']}, QUEUED; again: not started, so it has "
            "no adapter yet).",
        ),
    )
    assert answer(api.get(f"/v1/runs/{stage_run['id']}/adapter")) == (
        409,
        error(
            "conflict",
            f"Run {stage_run['id']} (stage sft of pipeline {started['id']}) has no adapter yet: "
            "it is QUEUED and has not trained a step. Download it once it completes "
            f"(`akka training runs wait {stage_run['id']}`).",
        ),
    )


def test_a_merge_is_a_task_with_its_own_token_reports_and_result(
    api: httpx.Client, trainer: InProcessTrainer, dataset: Any
) -> None:
    run_id = completed_run(api, trainer, modelName="maths-sft")
    assert answer(api.get(f"/v1/runs/{run_id}/merged")) == (
        404,
        error(
            "not-found",
            f"Run {run_id} has no merged model yet; make one with "
            f"`akka training runs export {run_id} --merged`.",
        ),
    )

    response = api.post(f"/v1/runs/{run_id}/merged", json={})
    assert response.status_code == 201
    task = response.json()
    assert {k: task[k] for k in ("kind", "project", "run", "state", "pool", "result")} == {
        "kind": "merge",
        "project": "maths",
        "run": run_id,
        "state": "PENDING",
        "pool": "default",
        "result": None,
    }
    again = api.post(f"/v1/runs/{run_id}/merged", json={})
    assert (again.status_code, again.json()["id"]) == (200, task["id"])
    assert answer(api.get(f"/v1/runs/{run_id}/merged")) == (
        409,
        error(
            "conflict",
            f"The merge of run {run_id} is PENDING (task {task['id']}): wait for it with "
            f"`akka training runs export {run_id} --merged`.",
        ),
    )

    # What the controller launches: the task's spec, a token of its own, no devices.
    launch = prepare_task_launch(trainer.ctx, task["id"])
    assert launch is not None
    assert (launch.devices, launch.device_ids, launch.env["CUDA_VISIBLE_DEVICES"]) == (0, [], "")
    assert launch.entry_module == "akka_training.engines.tasks.job"
    params = launch.job_spec["params"]
    assert (params["weights"], params["output"], params["baseModel"]["id"]) == (
        f"runs/{run_id}/adapter/",
        f"runs/{run_id}/merged/final/",
        "tiny-chat",
    )
    job = trainer.job_client(launch)
    assert answer(job.get(f"/v1/runs/{run_id}")) == (
        403,
        error("forbidden", "A task token can only report for its own task."),
    )
    # A run's job token may not report for a task.
    run_job = Job(trainer, api.post("/v1/runs", json=sft_plan()).json()["id"])
    assert answer(run_job.client.post(f"/v1/tasks/{task['id']}/reports/started", json={})) == (
        403,
        error("forbidden", "This token reports for another task."),
    )

    def report(kind: str, body: dict[str, Any]) -> str:
        response = job.post(f"/v1/tasks/{task['id']}/reports/{kind}", json=body)
        assert response.status_code == 200, response.text
        action: str = response.json()["action"]
        return action

    assert report("started", {"placement": {"host": "node-1", "pid": 7}}) == "continue"
    report("progress", {"message": "merging the adapter into the base model"})
    assert api.get(f"/v1/tasks/{task['id']}").json()["progress"] == {
        "message": "merging the adapter into the base model",
        "done": None,
        "total": None,
    }
    merged = {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": WEIGHTS * 3}
    for name, data in merged.items():
        trainer.ctx.blobs.put_bytes(f"runs/{run_id}/merged/final/{name}", data)
    digests = [
        {"path": n, "bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
        for n, d in merged.items()
    ]
    output = f"runs/{run_id}/merged/final/"
    report("finished", {"result": {"output": output, "files": digests}})

    done = api.get(f"/v1/tasks/{task['id']}").json()
    assert (done["state"], done["result"], done["failure"]) == (
        "SUCCEEDED",
        {"output": output, "files": digests},
        None,
    )
    assert answer(job.post(f"/v1/tasks/{task['id']}/reports/progress", json={"message": "x"})) == (
        409,
        error("conflict", f"Task {task['id']} has ended; stop."),
    )
    # The ended task's token is revoked: it is good for nothing else either.
    assert answer(job.get(f"/v1/tasks/{task['id']}")) == (
        401,
        error(
            "unauthorized", "The token is not known to this trainer or was revoked; log in again."
        ),
    )
    manifest = api.get(f"/v1/runs/{run_id}/merged").json()
    assert (manifest["kind"], manifest["directory"], manifest["step"]) == (
        "merged",
        "maths-sft-merged",
        4,
    )
    assert manifest["files"][:2] == digests
    files = files_of(api, f"/v1/runs/{run_id}/merged")
    assert files["model.safetensors"] == WEIGHTS * 3
    card = files["README.md"].decode()
    assert "This is the base model `tiny-chat` with a LoRA adapter merged into its weights" in card
    assert yaml.safe_load(card.split("---")[1])["library_name"] == "transformers"
    assert api.post(f"/v1/runs/{run_id}/merged", json={}).json()["id"] == task["id"]
    listed = api.get("/v1/tasks", params={"run": run_id}).json()
    assert [t["id"] for t in listed] == [task["id"]]


# The catalog decides here, not the database: one database is enough.
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_merge_is_refused_where_the_cluster_cannot_read_the_base_model(
    in_process_factory: Callable[..., InProcessTrainer], dev_models: Path
) -> None:
    entry = next(e for e in read_catalog(dev_models) if e["id"] == "tiny-chat")
    entry["path"] = "/nonexistent/tiny-chat"
    trainer = in_process_factory({"trainer": {"projects": [{"name": "maths"}], "catalog": [entry]}})
    api = trainer.client()
    register(api, "maths/train", chat_rows(12))
    run_id = completed_run(api, trainer)

    assert answer(api.post(f"/v1/runs/{run_id}/merged", json={})) == (
        409,
        error(
            "conflict",
            "The base model tiny-chat's weights are not available to the training cluster "
            "(this host has no model at /nonexistent/tiny-chat), so the adapter cannot be "
            "merged into it there. Download the adapter instead (`akka training runs download "
            f"{run_id}`) and merge it where the base model is, or make the model's directory "
            "readable on the cluster's nodes.",
        ),
    )
    # The adapter itself still downloads.
    assert api.get(f"/v1/runs/{run_id}/adapter").status_code == 200


def test_a_cancelled_or_failed_merge_reads_back_and_can_be_asked_again(
    api: httpx.Client, trainer: InProcessTrainer, dataset: Any
) -> None:
    run_id = completed_run(api, trainer)
    first = api.post(f"/v1/runs/{run_id}/merged", json={"snapshot": "step-2"}).json()
    cancelled = api.post(f"/v1/tasks/{first['id']}/cancel").json()
    assert cancelled["state"] == "CANCELLED"
    assert answer(api.post(f"/v1/tasks/{first['id']}/cancel")) == (
        409,
        error("conflict", f"Task {first['id']} is already CANCELLED."),
    )
    assert prepare_task_launch(trainer.ctx, first["id"]) is None

    second = api.post(f"/v1/runs/{run_id}/merged", json={"snapshot": "step-2"}).json()
    assert second["id"] != first["id"]
    launch = prepare_task_launch(trainer.ctx, second["id"])
    assert launch is not None
    assert launch.job_spec["params"]["weights"] == f"runs/{run_id}/snapshots/step-2/weights/"
    job = trainer.job_client(launch)
    failed = job.post(
        f"/v1/tasks/{second['id']}/reports/failed",
        json={"message": "the merge ran out of host memory", "detail": "MemoryError"},
    )
    assert failed.status_code == 200
    record = api.get(f"/v1/tasks/{second['id']}").json()
    assert (record["state"], record["failure"], record["failureDetail"]) == (
        "FAILED",
        "the merge ran out of host memory",
        "MemoryError",
    )
    assert answer(api.get(f"/v1/runs/{run_id}/merged", params={"snapshot": "step-2"})) == (
        404,
        error(
            "not-found",
            f"Run {run_id} has no merged model of snapshot step-2 yet; make one with "
            f"`akka training runs export {run_id} --merged --snapshot step-2`.",
        ),
    )
