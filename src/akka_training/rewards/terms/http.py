"""The ``http`` term: an evaluator service grades the completion.

Each rollout is one ``POST url`` of ``{"input": prompt, "output": completion, "expected":
expected}`` (the prompt as the row holds it: a list of chat messages or a string) with the
term's ``headers``. The answer is a JSON object with ``score`` (a number in [0, 1]) or ``ok``
(a bool: 1 or 0), and optionally ``explanation``. Anything else fails with cause
``no-verdict``.
"""

from __future__ import annotations

import httpx

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.plans import HttpTerm
from akka_training.rewards.inputs import FailureCause, RolloutInput, TermFailed, TermOutcome
from akka_training.rewards.terms.base import AsyncGrader
from akka_training.rewards.terms.remote import post_json, unit_score


class HttpGrader(AsyncGrader):
    kind = "http"

    def __init__(self, spec: HttpTerm, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(spec.name, spec.weight, clock=clock)
        self.url = spec.url
        self.headers = dict(spec.headers)
        self.timeout_seconds = spec.timeout_seconds

    async def evaluate(self, rollout: RolloutInput, client: httpx.AsyncClient) -> TermOutcome:
        payload = {
            "input": rollout.prompt,
            "output": rollout.completion,
            "expected": rollout.expected,
        }
        answer = await post_json(
            client,
            self.url,
            payload,
            headers=self.headers,
            timeout_seconds=self.timeout_seconds,
            clock=self.clock,
        )
        reply, retries = answer.body, answer.retries
        if not isinstance(reply, dict):
            raise TermFailed(
                FailureCause.NO_VERDICT, f"{self.url} answered {reply!r:.200}", retries=retries
            )
        explanation = reply.get("explanation")
        explanation = None if explanation is None else str(explanation)
        if "score" in reply:
            score = unit_score(reply["score"])
        elif isinstance(reply.get("ok"), bool):
            score = 1.0 if reply["ok"] else 0.0
        else:
            score = None
        if score is None:
            raise TermFailed(
                FailureCause.NO_VERDICT,
                f"{self.url} answered no 'score' in [0, 1] and no boolean 'ok': {reply!r:.200}",
                retries=retries,
            )
        return TermOutcome(score, explanation, retries=retries)
