"""Runs: start (or check) a plan, read and steer runs, and what they made."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from akka_training import api
from akka_training.client.base import BaseClient, plan_document, read_as

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.grafana
    import akka_training.api.rollouts
    import akka_training.api.runs
    import akka_training.api.tasks  # noqa: F401

# Lines of a kind this client does not know (from a newer service) are skipped.
_RUN_LINES = ("event", "progress", "run")


class RunsApi(BaseClient):
    @overload
    def start_run(
        self, plan: api.runs.RunPlan | Mapping[str, Any], dry_run: Literal[False] = False
    ) -> api.runs.RunRecord: ...

    @overload
    def start_run(
        self, plan: api.runs.RunPlan | Mapping[str, Any], dry_run: Literal[True]
    ) -> api.runs.DryRun: ...

    @overload
    def start_run(
        self, plan: api.runs.RunPlan | Mapping[str, Any], dry_run: bool
    ) -> api.runs.RunRecord | api.runs.DryRun: ...

    def start_run(
        self, plan: api.runs.RunPlan | Mapping[str, Any], dry_run: bool = False
    ) -> api.runs.RunRecord | api.runs.DryRun:
        """Submit a run plan (a mapping as in a plan file, or a `RunPlan`): the new run's
        record (``.existing`` when its ``submissionId`` was submitted before; a plan with one is
        sent again if the connection drops before the answer). With `dry_run`
        nothing starts: the settings it would train under. A plan that cannot run raises
        `PlanRefused` with every problem."""
        params = {"dry_run": True if dry_run else None}
        body = plan_document(plan)
        if dry_run:
            return self.call(
                api.runs.DryRun, "POST", "/v1/runs", json=body, params=params, idempotent=True
            )
        # A plan with a submissionId starts once however often it is sent: safe to send again.
        again = bool(body.get("submissionId"))
        return self.call(
            api.runs.RunRecord, "POST", "/v1/runs", json=body, params=params, idempotent=again
        )

    def runs(
        self, project: str | None = None, phase: str | None = None, limit: int = 100
    ) -> list[api.runs.RunSummary]:
        """Runs, newest first; `phase` is ``open`` or a phase such as ``TRAINING``."""
        params = {"project": project, "phase": phase, "limit": limit}
        return self.call(list[api.runs.RunSummary], "GET", "/v1/runs", params=params)

    def run(self, run_ref: str) -> api.runs.RunRecord:
        """A run by id or unambiguous id prefix."""
        return self.call(api.runs.RunRecord, "GET", f"/v1/runs/{run_ref}")

    def cancel_run(self, run_ref: str) -> api.runs.RunRecord:
        return self.call(api.runs.RunRecord, "POST", f"/v1/runs/{run_ref}/cancel")

    def pause_run(self, run_ref: str, checkpoint: str = "save") -> api.runs.RunRecord:
        """``save``: snapshot at the next step, then release the devices; ``latest``: stop at
        the last committed snapshot."""
        body = api.runs.PauseRequest(checkpoint=checkpoint).to_json()
        return self.call(api.runs.RunRecord, "POST", f"/v1/runs/{run_ref}/pause", json=body)

    def resume_run(self, run_ref: str) -> api.runs.RunRecord:
        return self.call(api.runs.RunRecord, "POST", f"/v1/runs/{run_ref}/resume")

    @overload
    def branch_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int | None = None,
        overrides: Mapping[str, Any] | None = None,
        dry_run: Literal[False] = False,
    ) -> api.runs.RunRecord: ...

    @overload
    def branch_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        dry_run: Literal[True],
    ) -> api.runs.DryRun: ...

    @overload
    def branch_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        dry_run: bool,
    ) -> api.runs.RunRecord | api.runs.DryRun: ...

    def branch_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int | None = None,
        overrides: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> api.runs.RunRecord | api.runs.DryRun:
        """A new run from a snapshot's weights (optimizer, schedule and data position reset),
        with the source run's plan changed by `overrides`; `steps` to train."""
        return self._derive("branch", run_ref, snapshot, steps, overrides, dry_run)

    @overload
    def continue_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int,
        overrides: Mapping[str, Any] | None = None,
        dry_run: Literal[False] = False,
    ) -> api.runs.RunRecord: ...

    @overload
    def continue_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int,
        overrides: Mapping[str, Any] | None = None,
        *,
        dry_run: Literal[True],
    ) -> api.runs.DryRun: ...

    @overload
    def continue_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int,
        overrides: Mapping[str, Any] | None = None,
        *,
        dry_run: bool,
    ) -> api.runs.RunRecord | api.runs.DryRun: ...

    def continue_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int,
        overrides: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> api.runs.RunRecord | api.runs.DryRun:
        """A new run from a snapshot's full training state, for `steps` more steps."""
        return self._derive("continue", run_ref, snapshot, steps, overrides, dry_run)

    def snapshots(self, run_ref: str) -> list[api.runs.Snapshot]:
        return self.call(list[api.runs.Snapshot], "GET", f"/v1/runs/{run_ref}/snapshots")

    def metrics(self, run_ref: str, fields: list[str] | None = None) -> api.runs.Metrics:
        """Per-step figures; `fields` keeps only these names or prefixes (``memory/``)."""
        params = {"fields": ",".join(fields) if fields else None}
        return self.call(api.runs.Metrics, "GET", f"/v1/runs/{run_ref}/metrics", params=params)

    def tree(self, run_ref: str) -> api.runs.RunTree:
        return self.call(api.runs.RunTree, "GET", f"/v1/runs/{run_ref}/tree")

    def logs(self, run_ref: str, offset: int = 0, attempt: int | None = None) -> api.runs.JobLogs:
        """The job's output from `offset`; read on from the answer's ``.offset``."""
        params = {"offset": offset, "attempt": attempt}
        return self.call(api.runs.JobLogs, "GET", f"/v1/runs/{run_ref}/logs", params=params)

    def rollouts(
        self,
        run_ref: str,
        step: int | None = None,
        order: Literal["worst", "best"] | None = None,
        limit: int | None = None,
    ) -> api.rollouts.StepRollouts:
        """One step's rollouts (the latest kept step unless `step`), at most 200; `order`
        sorts them by score, lowest or highest first."""
        params = {"step": step, "order": order, "limit": limit}
        return self.call(
            api.rollouts.StepRollouts, "GET", f"/v1/runs/{run_ref}/rollouts", params=params
        )

    def verify(self, run_ref: str) -> api.tasks.TaskRecord:
        """Check the run's published figures against its kept rollouts, counted again, and
        those against its reward, scored again, as a task on the trainer's cluster; the task
        (its result: `core.tasks.VerifyResult`)."""
        return self.call(api.tasks.TaskRecord, "POST", f"/v1/runs/{run_ref}/verifications")

    def grafana_link(self, run_ref: str, project: str | None = None) -> api.grafana.GrafanaLink:
        params = {"project": project}
        return self.call(
            api.grafana.GrafanaLink, "GET", f"/v1/runs/{run_ref}/grafana", params=params
        )

    def wait_run(
        self, run_ref: str, timeout: float | None = None, until: Literal["end", "rest"] = "end"
    ) -> Iterator[api.runs.RunEventLine | api.runs.RunProgressLine | api.runs.RunEndLine]:
        """The run's events and progress as they happen; the last line is a `RunEndLine`
        with the full record, once the run ends (or pauses, with ``until="rest"``) or at
        `timeout` seconds."""
        params = {"timeout": timeout, "until": until}
        for item in self.stream_lines(f"/v1/runs/{run_ref}/wait", params, timeout=None):
            if item.get("type") in _RUN_LINES:
                yield read_as(api.runs.RunWaitLine, item)

    def _derive(
        self,
        how: str,
        run_ref: str,
        snapshot: str,
        steps: int | None,
        overrides: Mapping[str, Any] | None,
        dry_run: bool,
    ) -> api.runs.RunRecord | api.runs.DryRun:
        changes = dict(overrides) if overrides is not None else None
        body = api.runs.DeriveRequest(
            snapshot=snapshot, steps=steps, overrides=changes, dry_run=dry_run
        )
        path = f"/v1/runs/{run_ref}/{how}"
        if dry_run:
            return self.call(api.runs.DryRun, "POST", path, json=body.to_json())
        return self.call(api.runs.RunRecord, "POST", path, json=body.to_json())
