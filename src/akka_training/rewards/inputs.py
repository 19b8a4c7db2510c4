"""What a reward term scores and what it answers.

A grader receives one `RolloutInput` and either returns a `TermOutcome` or raises `TermFailed`
with a `FailureCause`. A failure scores 0 for that term and is counted with its cause; it never
stops the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

# A chat prompt (``[{"role": ..., "content": ...}, ...]``) or a plain string prompt.
Prompt = list[dict[str, Any]] | str
FinishReason = Literal["stop", "length"]


class FailureCause(StrEnum):
    """Why a term could not score a rollout. The values are interface facts: they label the
    failure counter and appear in step files and in `runs rollouts`."""

    TIMEOUT = "timeout"  # no answer within the term's time limit (or the batch's)
    CONNECT = "connect"  # the endpoint refused the connection or could not be reached
    NO_VERDICT = "no-verdict"  # the answer held no score in [0, 1]
    HTTP_STATUS = "http-status"  # the endpoint answered with a status other than 2xx
    ERROR = "error"  # anything else: a rule raised, the row lacks an expected answer, ...


@dataclass(frozen=True)
class RolloutInput:
    """One rollout to score: a prompt with one sampled completion.

    `row` carries the dataset columns of the prompt's row (passed to rule functions). `group`
    is the index of the prompt within the step (the rollouts of one prompt form a group).
    `finish_reason`, `tool_calls` and `tool_failures` are not scored; they travel to the
    rollout record (`rollouts.rollout_record`).
    """

    prompt: Prompt
    completion: str
    expected: str | None
    completion_tokens: int
    row: Mapping[str, Any] = field(default_factory=dict)
    group: int = 0
    finish_reason: FinishReason = "stop"
    tool_calls: int = 0
    tool_failures: int = 0


@dataclass(frozen=True)
class TermOutcome:
    """A term's raw value for one rollout (usually in [0, 1]; the weight carries the sign).

    `prompt_tokens` and `completion_tokens` are the tokens a judge model used to produce the
    verdict (0 for other terms). `retries`: the tries a remote term made again before this
    answer, after the endpoint answered 429 or 5xx."""

    value: float
    explanation: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0


class TermFailed(Exception):
    """Raised by a grader that could not score a rollout. `detail` says what happened, for a
    person reading the rollout; tokens a judge spent before failing still count, and so do
    the `retries` of a remote term (tries made again after a 429 or 5xx)."""

    def __init__(
        self,
        cause: FailureCause,
        detail: str,
        *,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        retries: int = 0,
    ) -> None:
        super().__init__(f"{cause.value}: {detail}")
        self.cause = cause
        self.detail = detail
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.retries = retries


class RewardSetupError(Exception):
    """A reward configuration that cannot be turned into graders: a regex that does not
    compile, a rule function that cannot be imported, a missing API-key variable. Raised when
    the scorer is built, before any rollout is scored; the message says what to change."""


def prompt_text(prompt: Prompt) -> str:
    """The prompt as plain text: a string as is, a chat as ``role: content`` lines (list
    contents keep their text parts)."""
    if isinstance(prompt, str):
        return prompt
    lines = []
    for message in prompt:
        lines.append(f"{message.get('role', 'user')}: {content_text(message.get('content'))}")
    return "\n".join(lines)


def content_text(content: Any) -> str:
    """The text of a chat message's content, which may be a string or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)
