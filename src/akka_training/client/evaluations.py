"""Evaluations: an adapter (or a base model) scored on a held-out dataset."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from akka_training import api
from akka_training.client.base import BaseClient, plan_document

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.evaluations  # noqa: F401

EVALUATION_ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


class EvaluationsApi(BaseClient):
    def start_evaluation(
        self, plan: api.evaluations.EvaluationPlan | Mapping[str, Any]
    ) -> api.evaluations.EvaluationRecord:
        """Submit an evaluation plan (a mapping as in a plan file, or an `EvaluationPlan`).
        A plan that cannot run raises `PlanRefused` with every problem."""
        return self.call(
            api.evaluations.EvaluationRecord, "POST", "/v1/evaluations", json=plan_document(plan)
        )

    def check_evaluation(
        self, plan: api.evaluations.EvaluationPlan | Mapping[str, Any]
    ) -> api.evaluations.EvaluationDryRun:
        """Check an evaluation plan and answer its resolved parameters; nothing starts."""
        return self.call(
            api.evaluations.EvaluationDryRun,
            "POST",
            "/v1/evaluations",
            json=plan_document(plan),
            params={"dry_run": True},
            idempotent=True,
        )

    def evaluation(self, evaluation_id: str) -> api.evaluations.EvaluationRecord:
        return self.call(
            api.evaluations.EvaluationRecord, "GET", f"/v1/evaluations/{evaluation_id}"
        )

    def evaluations(
        self, project: str | None = None, limit: int = 100
    ) -> list[api.evaluations.EvaluationRecord]:
        """Evaluations, newest first."""
        params = {"project": project, "limit": limit}
        return self.call(
            list[api.evaluations.EvaluationRecord], "GET", "/v1/evaluations", params=params
        )

    def cancel_evaluation(self, evaluation_id: str) -> api.evaluations.EvaluationRecord:
        return self.call(
            api.evaluations.EvaluationRecord, "POST", f"/v1/evaluations/{evaluation_id}/cancel"
        )

    def evaluation_samples(
        self,
        evaluation_id: str,
        order: Literal["worst", "best"] = "worst",
        metric: str | None = None,
        limit: int = 20,
    ) -> api.evaluations.EvaluationSamples:
        """The evaluation's scored samples, worst (or best) first by score or by `metric`."""
        params = {"order": order, "metric": metric, "limit": limit}
        return self.call(
            api.evaluations.EvaluationSamples,
            "GET",
            f"/v1/evaluations/{evaluation_id}/samples",
            params=params,
        )

    def wait_evaluation(
        self, evaluation_id: str, timeout: float | None = None, interval: float = 0.5
    ) -> Iterator[api.evaluations.EvaluationRecord]:
        """The evaluation each time its state or progress changes, until it ends (the last
        one yielded) or `timeout` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = None
        while True:
            evaluation = self.evaluation(evaluation_id)
            progress = evaluation.progress
            now = (evaluation.state, progress.message if progress else None)
            if now != seen:
                seen = now
                yield evaluation
            if evaluation.state in EVALUATION_ENDED:
                return
            if deadline is not None and time.monotonic() > deadline:
                return
            time.sleep(interval)

    def compare_evaluations(self, a: str, b: str) -> api.evaluations.EvaluationComparison:
        """The metrics of two evaluations side by side: b's mean minus a's, and whether that
        difference is beyond noise (outside the 95% interval of the difference)."""
        first, second = self.evaluation(a), self.evaluation(b)
        left = {m.name: m for m in first.metrics or []}
        right = {m.name: m for m in second.metrics or []}
        # core.evaluations (and the plans it reads) is imported by the one call that needs it.
        from akka_training.core.evaluations import beyond_noise

        names = list(left) + [n for n in right if n not in left]
        rows = []
        for name in names:
            x, y = left.get(name), right.get(name)
            kind = (x or y).kind  # type: ignore[union-attr]
            if x is None or y is None:
                rows.append(api.evaluations.MetricComparison(name=name, kind=kind, a=x, b=y))
                continue
            rows.append(
                api.evaluations.MetricComparison(
                    name=name,
                    kind=kind,
                    a=x,
                    b=y,
                    difference=y.mean - x.mean,
                    beyond_noise=beyond_noise(x.mean, x.stderr, y.mean, y.stderr),
                )
            )
        return api.evaluations.EvaluationComparison(a=first.id, b=second.id, metrics=rows)
