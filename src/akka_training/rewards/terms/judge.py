"""The ``judge`` term: a model behind an OpenAI-compatible endpoint grades the completion.

Each rollout is one ``POST {endpoint}/chat/completions`` with the term's ``model``, a system
message holding ``instructions``, a user message holding the prompt, the completion and the
expected answer, ``max_tokens`` and temperature 0. The verdict is read from the reply's text:
a JSON object ``{"score": x}`` (its ``explanation`` or ``reason`` kept), else the last
``SCORE: x``, else the whole reply as a bare number. A verdict outside [0, 1] or none at all
fails with cause ``no-verdict``; the tokens of ``usage`` count either way.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.plans import JudgeTerm
from akka_training.rewards.inputs import (
    FailureCause,
    RewardSetupError,
    RolloutInput,
    TermFailed,
    TermOutcome,
    prompt_text,
)
from akka_training.rewards.terms import answers
from akka_training.rewards.terms.base import AsyncGrader
from akka_training.rewards.terms.remote import post_json, score_in_text, unit_score

_EXPLANATION_CHARS = 500
VERDICT_REQUEST = (
    'Answer with a score between 0 and 1 as a JSON object: {"score": <number>, '
    '"explanation": "<one sentence>"}.'
)


class JudgeGrader(AsyncGrader):
    kind = "judge"

    def __init__(self, spec: JudgeTerm, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(spec.name, spec.weight, clock=clock)
        self.url = spec.endpoint.rstrip("/") + "/chat/completions"
        self.model = spec.model
        self.instructions = spec.instructions
        self.max_tokens = spec.max_tokens
        self.timeout_seconds = spec.timeout_seconds
        self.headers: dict[str, str] = {}
        if spec.api_key_env:
            key = os.environ.get(spec.api_key_env)
            if not key:
                raise RewardSetupError(
                    f"reward term {spec.name!r}: the environment variable "
                    f"{spec.api_key_env!r} named by apiKeyEnv is not set in the training job; "
                    "set it there or remove apiKeyEnv"
                )
            self.headers["Authorization"] = f"Bearer {key}"

    async def evaluate(self, rollout: RolloutInput, client: httpx.AsyncClient) -> TermOutcome:
        payload = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": self.instructions},
                {"role": "user", "content": judge_message(rollout)},
            ],
            "max_tokens": self.max_tokens,
            "temperature": 0,
        }
        answer = await post_json(
            client,
            self.url,
            payload,
            headers=self.headers,
            timeout_seconds=self.timeout_seconds,
            clock=self.clock,
        )
        reply = answer.body
        prompt_tokens, completion_tokens = _usage(reply)
        text = _reply_text(reply)
        score, explanation = read_verdict(text) if text is not None else (None, None)
        if score is None:
            shown = "no message" if text is None else repr(text[:200])
            raise TermFailed(
                FailureCause.NO_VERDICT,
                f"the judge's reply held no score in [0, 1]: {shown}",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                retries=answer.retries,
            )
        return TermOutcome(score, explanation, prompt_tokens, completion_tokens, answer.retries)


def judge_message(rollout: RolloutInput) -> str:
    """The user message a judge reads: the prompt, the completion, the expected answer."""
    expected = rollout.expected if rollout.expected is not None else "(none given)"
    return (
        f"## Prompt\n{prompt_text(rollout.prompt)}\n\n"
        f"## Completion\n{rollout.completion}\n\n"
        f"## Expected answer\n{expected}\n\n"
        f"{VERDICT_REQUEST}"
    )


def read_verdict(text: str) -> tuple[float | None, str | None]:
    """The score in [0, 1] and the explanation a judge's reply gives, (None, None) without
    one."""
    obj = answers.json_object(text)
    if obj is not None and "score" in obj:
        explanation = obj.get("explanation", obj.get("reason"))
        score = unit_score(obj["score"])
        return score, (str(explanation) if explanation is not None else None)
    found = score_in_text(text)
    score = unit_score(found) if found is not None else None
    return score, (text.strip()[:_EXPLANATION_CHARS] if score is not None else None)


def _reply_text(reply: Any) -> str | None:
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def _usage(reply: Any) -> tuple[int, int]:
    usage = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
