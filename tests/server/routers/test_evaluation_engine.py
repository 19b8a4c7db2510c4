"""An evaluation generates through the engine endpoints serve with: the deployment's
`trainer.endpoints.engine` and `vllm-python` go into its job's parameters (the dry run shows
them), and once it succeeded `get` (and the CLI's `get`) says which engine
generated."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from akka_training.api.evaluations import EvaluationRecord
from akka_training.cli.training.evaluations import _print_evaluation
from akka_training.core.evaluations import EvaluationResult, MetricValue
from akka_training.core.states import TaskState
from akka_training.storage.models import Task
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import chat_rows, register

SETTINGS = {
    "trainer": {
        "projects": [{"name": "maths"}],
        "endpoints": {"engine": "vllm", "vllm-python": "/opt/akka/.venv-vllm/bin/python"},
    }
}
PLAN = {
    "kind": "evaluation",
    "project": "maths",
    "baseModel": "tiny-chat",
    "dataset": "maths/train",
    "metrics": [{"name": "correct", "kind": "match"}],
}


def test_an_evaluation_carries_the_deployments_engine_and_says_which_generated(
    in_process_factory: Callable[..., InProcessTrainer], capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = in_process_factory(SETTINGS)
    api = trainer.client()
    register(api, "maths/train", chat_rows(8))
    dry = api.post("/v1/evaluations", params={"dry_run": "true"}, json=PLAN)
    assert dry.status_code == 200, dry.text
    resolved = dry.json()["resolved"]
    assert (resolved["engine"], resolved["vllmPython"]) == (
        "vllm",
        "/opt/akka/.venv-vllm/bin/python",
    )

    started = api.post("/v1/evaluations", json=PLAN)
    assert started.status_code == 200, started.text
    evaluation_id = started.json()["id"]
    assert started.json()["engine"] is None  # nothing generated yet
    value = MetricValue(name="correct", kind="match", mean=1, low=0.6, high=1, stderr=0, count=8)
    result = EvaluationResult(
        metrics=[value], samples="s.jsonl", sample_count=8, prompts=8, engine="vllm"
    )
    with trainer.ctx.db.session() as session:
        task = session.get(Task, evaluation_id)
        assert task is not None
        assert (task.params["engine"], task.params["vllmPython"]) == (
            "vllm",
            "/opt/akka/.venv-vllm/bin/python",
        )
        task.state = TaskState.SUCCEEDED
        task.result = result.to_json()
    record = api.get(f"/v1/evaluations/{evaluation_id}").json()
    assert record["engine"] == "vllm"
    _print_evaluation(EvaluationRecord.model_validate(record))
    assert ["Generated", "by", "vllm"] in [
        line.split() for line in capsys.readouterr().out.splitlines()
    ]
