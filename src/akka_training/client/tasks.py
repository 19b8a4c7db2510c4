"""Tasks: jobs the trainer runs on its cluster that are not training runs (a merge, a
regrade)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from akka_training import api
from akka_training.client.base import BaseClient

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.regrades
    import akka_training.api.tasks  # noqa: F401

# A task in one of these states has ended.
TASK_ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


class TasksApi(BaseClient):
    def task(self, task_id: str) -> api.tasks.TaskRecord:
        return self.call(api.tasks.TaskRecord, "GET", f"/v1/tasks/{task_id}")

    def tasks(
        self, project: str | None = None, run: str | None = None, limit: int = 100
    ) -> list[api.tasks.TaskRecord]:
        """Tasks, newest first; `run` keeps the tasks of one run."""
        params = {"project": project, "run": run, "limit": limit}
        return self.call(list[api.tasks.TaskRecord], "GET", "/v1/tasks", params=params)

    def cancel_task(self, task_id: str) -> api.tasks.TaskRecord:
        return self.call(api.tasks.TaskRecord, "POST", f"/v1/tasks/{task_id}/cancel")

    def wait_task(
        self, task_id: str, timeout: float | None = None, interval: float = 0.5
    ) -> Iterator[api.tasks.TaskRecord]:
        """The task each time its state or progress changes, until it ends (the last one
        yielded) or `timeout` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = None
        while True:
            task = self.call(api.tasks.TaskRecord, "GET", f"/v1/tasks/{task_id}")
            now = (task.state, task.progress.to_json() if task.progress else None)
            if now != seen:
                seen = now
                yield task
            if task.state in TASK_ENDED:
                return
            if deadline is not None and time.monotonic() > deadline:
                return
            time.sleep(interval)

    def regrade_run(
        self,
        run_ref: str,
        reward: dict[str, Any],
        from_step: int | None = None,
        to_step: int | None = None,
    ) -> api.tasks.TaskRecord:
        """Score the run's kept rollouts again with `reward` (a plan's ``config.reward``), as a
        task on the trainer's cluster; the task (its result: `core.tasks.RegradeResult`)."""
        body = api.regrades.RegradeRequest(
            reward=reward, from_step=from_step, to_step=to_step
        ).to_json()
        return self.call(api.tasks.TaskRecord, "POST", f"/v1/runs/{run_ref}/regrades", json=body)

    def preview_reward(self, plan: dict[str, Any], rows: int = 8) -> api.tasks.TaskRecord:
        """Check `plan` as a dry run and score `rows` of its dataset's rows with its reward
        terms, as a task on the trainer's cluster; the task (its result:
        `core.tasks.PreviewResult`)."""
        body = api.regrades.PreviewRequest(plan=plan, rows=rows).to_json()
        return self.call(api.tasks.TaskRecord, "POST", "/v1/previews", json=body)

    def preview_pipeline_reward(
        self, plan: dict[str, Any], rows: int = 8
    ) -> api.regrades.PipelinePreview:
        """Check the pipeline `plan` as a dry run and score `rows` rows of each grpo or gspo
        stage's dataset with that stage's reward terms, one task per stage; the stages with
        their tasks (or why a stage has none)."""
        body = api.regrades.PreviewRequest(plan=plan, rows=rows).to_json()
        return self.call(api.regrades.PipelinePreview, "POST", "/v1/previews/pipelines", json=body)
