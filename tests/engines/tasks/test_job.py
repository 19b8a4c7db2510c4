"""A task's job speaks the task protocol: started, progress, then one end report; a merge
whose base model the node cannot read fails with the sentence that says so, and a cancelled
task stops quietly. (The merge itself, on real runs, is in tests/integration/test_adapters.py.)"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.serving import ServeParams
from akka_training.core.tasks import MergeParams, TaskSpec
from akka_training.engines.tasks import TASKS
from akka_training.engines.tasks.job import run_task
from akka_training.engines.tasks.reporter import TaskReporter
from tests.engines.conftest import ReportServer


def spec(store: LocalBlobStore, url: str, base: dict[str, Any], kind: str = "merge") -> TaskSpec:
    params = MergeParams.model_validate(
        {
            "baseModel": base,
            "weights": "runs/r1/adapter/",
            "tokenizer": "runs/r1/tokenizer/",
            "output": "runs/r1/merged/final/",
        }
    )
    return TaskSpec(
        task_id="tk1",
        kind=kind,
        project="maths",
        run_id="r1",
        trainer_url=url,
        storage_url=store.url,
        params=params.to_json(),
    )


def pin(entry: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    return {
        "id": entry["id"],
        "path": path or entry["path"],
        "revision": entry["revision"],
        "modality": entry["modality"],
        "contextLength": entry["contextLength"],
    }


def run(task: TaskSpec, server: ReportServer, tmp_path: Path) -> int:
    reporter = TaskReporter(server.url, task.task_id, "secret", patience=5)
    try:
        return run_task(task, reporter, tmp_path)
    finally:
        reporter.close()


@pytest.mark.slow  # importing the tasks imports the training stack
def test_every_task_kind_names_a_function() -> None:
    assert TASKS == {
        "merge": "akka_training.engines.tasks.merge:merge",
        "regrade": "akka_training.engines.tasks.regrade:regrade",
        "preview": "akka_training.engines.tasks.preview:preview",
        "evaluate": "akka_training.engines.tasks.evaluate:evaluate",
        "verify": "akka_training.engines.tasks.verify:verify",
        "serve": "akka_training.engines.tasks.serve:serve",
    }
    for path in TASKS.values():
        module, name = path.split(":")
        assert callable(getattr(importlib.import_module(module), name))


@pytest.mark.slow  # the merge imports the training stack
def test_a_merge_fails_saying_the_node_cannot_read_the_base_model(
    store: LocalBlobStore,
    report_server: ReportServer,
    catalog: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    task = spec(store, report_server.url, pin(catalog["tiny-chat"], "/models/gone"))

    assert run(task, report_server, tmp_path) == 1

    assert report_server.kinds() == ["started", "failed"]
    failed = report_server.of("failed")[0]
    assert failed["message"].startswith(
        "The base model tiny-chat's weights are not available to the training cluster (node "
    )
    assert failed["message"].endswith(
        " has no model at /models/gone), so the adapter cannot be merged into it there. "
        "Download the adapter instead (`akka training runs download r1`) and merge it where "
        "the base model is, or make the model's directory readable on the cluster's nodes."
    )
    assert {r.token for r in report_server.reports} == {"secret"}


@pytest.mark.slow  # the merge imports the training stack
def test_a_merge_without_its_adapter_fails_saying_so(
    store: LocalBlobStore,
    report_server: ReportServer,
    catalog: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    task = spec(store, report_server.url, pin(catalog["tiny-chat"]))

    assert run(task, report_server, tmp_path) == 1

    assert report_server.kinds() == ["started", "progress", "failed"]
    assert report_server.of("progress")[0]["message"] == "fetching the adapter"
    assert report_server.of("failed")[0]["message"] == (
        "the adapter to merge could not be read: no adapter is stored at runs/r1/adapter/"
    )


@pytest.mark.slow  # the merge imports the training stack
def test_a_cancelled_task_stops_at_its_next_report_without_an_end_report(
    store: LocalBlobStore,
    report_server: ReportServer,
    catalog: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    report_server.script = lambda kind, body, reports: "stop" if kind == "progress" else "continue"
    task = spec(store, report_server.url, pin(catalog["tiny-chat"]))

    assert run(task, report_server, tmp_path) == 0

    assert report_server.kinds() == ["started", "progress"]


def test_an_unknown_kind_fails_naming_the_kinds_this_job_runs(
    store: LocalBlobStore,
    report_server: ReportServer,
    catalog: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    task = spec(store, report_server.url, pin(catalog["tiny-chat"]), kind="distill")

    assert run(task, report_server, tmp_path) == 1

    assert report_server.of("failed")[0]["message"] == (
        "this job knows no task 'distill' (it runs evaluate, merge, preview, regrade, serve, "
        "verify): the cluster's akka-training is "
        "older than the service's"
    )


@pytest.mark.slow  # the serve task imports the training stack
def test_an_endpoint_on_vllm_that_cannot_work_fails_saying_what_to_change(
    store: LocalBlobStore,
    report_server: ReportServer,
    catalog: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    params = ServeParams.model_validate(
        {"endpoint": "chat", "baseModel": pin(catalog["tiny-chat"]), "engine": "vllm"}
    )
    task = TaskSpec(
        task_id="tk1",
        kind="serve",
        project="maths",
        trainer_url=report_server.url,
        storage_url=store.url,
        params=params.to_json(),
    )

    assert run(task, report_server, tmp_path) == 1

    assert report_server.kinds() == ["started", "failed"]
    assert report_server.of("failed")[0]["message"] == (
        "trainer.endpoints.engine is vllm, but vLLM's CPU attention does not take the head "
        "size of tiny-chat (16); it takes 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512. "
        "Set trainer.endpoints.engine to auto or transformers to serve it with transformers."
    )
