"""The one TRL reward function of a reinforcement run.

TRL calls a reward function with the whole generation batch of a step (every prompt's
``generationsPerPrompt`` completions, prompt by prompt). `StepRewards` scores the batch with the
project's reward terms (`akka_training.rewards`), never with anything of TRL's, computes the
step's reward figures, and holds the step's rollouts and the scorer's accounting until the
step ends: the job's step pipeline then publishes the accounting and hands the rollouts to the
step file writer (``runs/{run}/rollouts/step-{N}.parquet``, stored and reported off the step's
critical path), as it does for every engine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from akka_training.engines.data import RlRow
from akka_training.engines.failures import RewardError, out_of_memory
from akka_training.engines.trl.tools import ToolCounters
from akka_training.rewards.figures import step_figures
from akka_training.rewards.health import rollout_health
from akka_training.rewards.inputs import RolloutInput, content_text
from akka_training.rewards.rollouts import Rollout, rollouts_from_scores
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.scoring import ScoreStats

# What a failed tool call looks like in a tool message: TRL turns the exception into this dict.
TOOL_ERROR_PREFIX = "{'error'"


class StepRewards:
    """A TRL reward function (it has a ``__name__``, as TRL requires) over whole batches."""

    __name__ = "akka_reward"

    def __init__(
        self,
        scorer: RewardScorer,
        rows: Sequence[RlRow],
        source_rows: Sequence[dict[str, Any]],
        *,
        generations_per_prompt: int,
        max_completion_tokens: int,
        stop_ids: set[int],
        tool_counters: ToolCounters | None = None,
        remote_terms: Sequence[str] = (),
    ) -> None:
        self.scorer = scorer
        self.rows = {row.index: row for row in rows}
        self.source_rows = source_rows
        self.generations = generations_per_prompt
        self.max_completion_tokens = max_completion_tokens
        self.stop_ids = stop_ids
        self.tool_counters = tool_counters
        self.remote_terms = list(remote_terms)  # judge and http terms, for the health figures
        self._tools_seen = (0, 0)
        # Per step: the reward figures and the seconds scoring took.
        self.figures: dict[int, dict[str, float]] = {}
        self.seconds: dict[int, float] = {}
        # Per step: when scoring began and ended (time.time()), for the step's reward span.
        self.wall: dict[int, tuple[float, float]] = {}
        # Per step: its rollouts and what scoring them cost, until the step ends.
        self.rollouts: dict[int, list[Rollout]] = {}
        self.scoring: dict[int, ScoreStats] = {}

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]],
        trainer_state: Any = None,
        row_index: list[int] | None = None,
        **_columns: Any,
    ) -> list[float | None]:
        started = time.perf_counter()
        wall_started = time.time()
        step = (trainer_state.global_step if trainer_state is not None else 0) + 1
        try:
            batch = [
                self._rollout(i, prompt, completion, ids, (row_index or [])[i])
                for i, (prompt, completion, ids) in enumerate(
                    zip(prompts, completions, completion_ids, strict=True)
                )
            ]
            scored = self.scorer.score(batch)
            rollouts = rollouts_from_scores(step, batch, scored, self.scorer.weights)
        except Exception as exc:
            if out_of_memory(exc):
                raise  # reported as the memory that ran out, not as the reward's fault
            raise RewardError(f"the reward of step {step} could not be computed: {exc}") from exc
        self.rollouts[step] = rollouts
        self.scoring[step] = scored.stats
        self.figures[step] = step_figures(rollouts, self.generations, self.max_completion_tokens)
        self.figures[step] |= self._tool_figures(len(batch))
        self.figures[step] |= rollout_health(rollouts, self.remote_terms, scored.stats.seconds)
        self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - started
        self.wall[step] = (self.wall.get(step, (wall_started, 0.0))[0], time.time())
        return list[float | None](scored.scores)

    def _rollout(
        self, position: int, prompt: Any, completion: Any, ids: list[int], index: int
    ) -> RolloutInput:
        row = self.rows[index]
        calls, failures = tool_use(completion)
        return RolloutInput(
            prompt=prompt,
            completion=completion_text(completion),
            expected=row.expected,
            completion_tokens=len(ids),
            row=self.source_rows[index],
            group=position // self.generations,
            finish_reason="stop" if ids and ids[-1] in self.stop_ids else "length",
            tool_calls=calls,
            tool_failures=failures,
        )

    def _tool_figures(self, completions: int) -> dict[str, float]:
        """The step's tool figures from the calls the tools really served since the last
        batch. The completions' messages under-count: TRL drops a tool result (and its error)
        that would push a completion past maxCompletionTokens, but the call was made."""
        if self.tool_counters is None:
            return {}
        calls = sum(self.tool_counters.calls.values())
        failures = sum(self.tool_counters.failures.values())
        seen_calls, seen_failures = self._tools_seen
        self._tools_seen = (calls, failures)
        new_calls, new_failures = calls - seen_calls, failures - seen_failures
        if new_calls <= 0:
            return {}
        return {
            "tools/calls_per_completion": new_calls / max(1, completions),
            "tools/failure_share": new_failures / new_calls,
        }


def completion_text(completion: Any) -> str:
    """What the reward terms score: the text of a plain completion, or of a chat completion's
    last assistant message (after any tool calls)."""
    if isinstance(completion, str):
        return completion
    answers = [m for m in completion if m.get("role") == "assistant"]
    return content_text(answers[-1].get("content")) if answers else ""


def tool_use(completion: Any) -> tuple[int, int]:
    """Tool calls a chat completion made, and how many of them failed."""
    if isinstance(completion, str):
        return 0, 0
    calls = sum(len(m.get("tool_calls") or []) for m in completion if m.get("role") == "assistant")
    failures = sum(
        1
        for m in completion
        if m.get("role") == "tool" and str(m.get("content", "")).startswith(TOOL_ERROR_PREFIX)
    )
    return calls, failures
