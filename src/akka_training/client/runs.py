"""Runs and pipelines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from akka_training.client.base import BaseClient


class RunsApi(BaseClient):
    def start_run(self, plan: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        return self.post("/v1/runs", plan, dry_run=dry_run or None)

    def runs(
        self, project: str | None = None, phase: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        return self.get("/v1/runs", project=project, phase=phase, limit=limit)

    def run(self, run_ref: str) -> dict[str, Any]:
        return self.get(f"/v1/runs/{run_ref}")

    def cancel_run(self, run_ref: str) -> dict[str, Any]:
        return self.post(f"/v1/runs/{run_ref}/cancel")

    def pause_run(self, run_ref: str, checkpoint: str = "save") -> dict[str, Any]:
        return self.post(f"/v1/runs/{run_ref}/pause", {"checkpoint": checkpoint})

    def resume_run(self, run_ref: str) -> dict[str, Any]:
        return self.post(f"/v1/runs/{run_ref}/resume")

    def branch_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int | None = None,
        overrides: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        body = {"snapshot": snapshot, "steps": steps, "overrides": overrides, "dryRun": dry_run}
        return self.post(f"/v1/runs/{run_ref}/branch", body)

    def continue_run(
        self,
        run_ref: str,
        snapshot: str,
        steps: int,
        overrides: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        body = {"snapshot": snapshot, "steps": steps, "overrides": overrides, "dryRun": dry_run}
        return self.post(f"/v1/runs/{run_ref}/continue", body)

    def snapshots(self, run_ref: str) -> list[dict[str, Any]]:
        return self.get(f"/v1/runs/{run_ref}/snapshots")

    def metrics(self, run_ref: str, fields: list[str] | None = None) -> dict[str, Any]:
        return self.get(f"/v1/runs/{run_ref}/metrics", fields=",".join(fields) if fields else None)

    def tree(self, run_ref: str) -> dict[str, Any]:
        return self.get(f"/v1/runs/{run_ref}/tree")

    def logs(self, run_ref: str, offset: int = 0, attempt: int | None = None) -> dict[str, Any]:
        return self.get(f"/v1/runs/{run_ref}/logs", offset=offset, attempt=attempt)

    def rollouts(
        self,
        run_ref: str,
        step: int | None = None,
        order: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        return self.get(f"/v1/runs/{run_ref}/rollouts", step=step, order=order, limit=limit)

    def grafana_link(self, run_ref: str, project: str | None = None) -> dict[str, Any]:
        return self.get(f"/v1/runs/{run_ref}/grafana", project=project)

    def wait_run(
        self, run_ref: str, timeout: float | None = None, until: str = "end"
    ) -> Iterator[dict[str, Any]]:
        """The run's events as they happen; the last item is ``{"type": "run", "run": ...}``."""
        params = {"timeout": timeout, "until": until}
        for line in self.stream_lines(f"/v1/runs/{run_ref}/wait", params, timeout=None):
            if line.strip():
                yield json.loads(line)

    # --- pipelines -------------------------------------------------------------------------------

    def start_pipeline(self, plan: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        return self.post("/v1/pipelines", plan, dry_run=dry_run or None)

    def pipelines(self, project: str | None = None) -> list[dict[str, Any]]:
        return self.get("/v1/pipelines", project=project)

    def pipeline(self, ref: str) -> dict[str, Any]:
        return self.get(f"/v1/pipelines/{ref}")

    def cancel_pipeline(self, ref: str) -> dict[str, Any]:
        return self.post(f"/v1/pipelines/{ref}/cancel")

    def resume_pipeline(self, ref: str) -> dict[str, Any]:
        return self.post(f"/v1/pipelines/{ref}/resume")

    def wait_pipeline(self, ref: str, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        for line in self.stream_lines(
            f"/v1/pipelines/{ref}/wait", {"timeout": timeout}, timeout=None
        ):
            if line.strip():
                yield json.loads(line)
