"""Pipelines: ordered train stages, each a run linked to the pipeline."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from akka_training import api
from akka_training.client.base import BaseClient, plan_document, read_as

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.pipelines  # noqa: F401

_PIPELINE_LINES = ("progress", "pipeline")


class PipelinesApi(BaseClient):
    @overload
    def start_pipeline(
        self, plan: api.pipelines.PipelinePlan | Mapping[str, Any], dry_run: Literal[False] = False
    ) -> api.pipelines.Pipeline: ...

    @overload
    def start_pipeline(
        self, plan: api.pipelines.PipelinePlan | Mapping[str, Any], dry_run: Literal[True]
    ) -> api.pipelines.PipelineDryRun: ...

    @overload
    def start_pipeline(
        self, plan: api.pipelines.PipelinePlan | Mapping[str, Any], dry_run: bool
    ) -> api.pipelines.Pipeline | api.pipelines.PipelineDryRun: ...

    def start_pipeline(
        self, plan: api.pipelines.PipelinePlan | Mapping[str, Any], dry_run: bool = False
    ) -> api.pipelines.Pipeline | api.pipelines.PipelineDryRun:
        """Submit a pipeline plan; with `dry_run` every stage is checked and nothing starts."""
        params = {"dry_run": True if dry_run else None}
        body = plan_document(plan)
        if dry_run:
            return self.call(
                api.pipelines.PipelineDryRun,
                "POST",
                "/v1/pipelines",
                json=body,
                params=params,
                idempotent=True,
            )
        # A plan with a submissionId starts once however often it is sent: safe to send again.
        again = bool(body.get("submissionId"))
        return self.call(
            api.pipelines.Pipeline,
            "POST",
            "/v1/pipelines",
            json=body,
            params=params,
            idempotent=again,
        )

    def pipelines(self, project: str | None = None) -> list[api.pipelines.Pipeline]:
        return self.call(
            list[api.pipelines.Pipeline], "GET", "/v1/pipelines", params={"project": project}
        )

    def pipeline(self, ref: str) -> api.pipelines.Pipeline:
        return self.call(api.pipelines.Pipeline, "GET", f"/v1/pipelines/{ref}")

    def cancel_pipeline(self, ref: str) -> api.pipelines.Pipeline:
        return self.call(api.pipelines.Pipeline, "POST", f"/v1/pipelines/{ref}/cancel")

    def resume_pipeline(self, ref: str) -> api.pipelines.Pipeline:
        """Run a failed or cancelled pipeline again from the stage that did not complete."""
        return self.call(api.pipelines.Pipeline, "POST", f"/v1/pipelines/{ref}/resume")

    def wait_pipeline(
        self, ref: str, timeout: float | None = None
    ) -> Iterator[api.pipelines.PipelineProgressLine | api.pipelines.PipelineEndLine]:
        """The pipeline each time a stage changes; the last line is a `PipelineEndLine`."""
        params = {"timeout": timeout}
        for item in self.stream_lines(f"/v1/pipelines/{ref}/wait", params, timeout=None):
            if item.get("type") in _PIPELINE_LINES:
                yield read_as(api.pipelines.PipelineWaitLine, item)
