"""The one TRL reward function of a reinforcement run.

TRL calls a reward function with the whole generation batch of a step (every prompt's
``generationsPerPrompt`` completions, prompt by prompt). `StepRewards` scores the batch with the
project's reward terms (`akka_training.rewards`), never with anything of TRL's, keeps every
rollout of the step in a Parquet step file (``runs/{run}/rollouts/step-{N}.parquet``), reports
it, computes the step's reward figures and publishes the scorer's accounting to telemetry.

The step file is built in memory, stored and reported off the step's critical path, by the
`StepFileWriter` in `writer`; `KeepRollouts` waits for it before each snapshot and at the end
of training.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback

from akka_training.core.reports import RolloutsReport
from akka_training.engines.context import JobContext
from akka_training.engines.data import RlRow
from akka_training.engines.failures import RewardError, out_of_memory
from akka_training.engines.step_files import StepFileWriter
from akka_training.engines.trl.tools import ToolCounters
from akka_training.rewards.figures import histogram_values, step_figures
from akka_training.rewards.health import rollout_health
from akka_training.rewards.inputs import RolloutInput, content_text
from akka_training.rewards.rollouts import (
    Rollout,
    rollouts_from_scores,
    step_file_bytes,
    step_summary,
)
from akka_training.rewards.scorer import RewardScorer

# What a failed tool call looks like in a tool message: TRL turns the exception into this dict.
TOOL_ERROR_PREFIX = "{'error'"


class StepRewards:
    """A TRL reward function (it has a ``__name__``, as TRL requires) over whole batches."""

    __name__ = "akka_reward"

    def __init__(
        self,
        job: JobContext,
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
        self.job = job
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
        self.writer = StepFileWriter[list[Rollout]](self._keep)

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
        self.writer.submit(step, rollouts)  # kept in the background; raises an earlier failure
        self.figures[step] = step_figures(rollouts, self.generations, self.max_completion_tokens)
        self.figures[step] |= self._tool_figures(len(batch))
        self.figures[step] |= rollout_health(rollouts, self.remote_terms, scored.stats.seconds)
        telemetry = self.job.telemetry
        if telemetry is not None:
            stats = scored.stats
            telemetry.reward_stats(
                timings=stats.seconds,
                failures=stats.failures,
                judge_prompt_tokens=stats.judge_prompt_tokens,
                judge_completion_tokens=stats.judge_completion_tokens,
                retries=stats.retries,
            )
            telemetry.histograms(histogram_values(rollouts))
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

    def _keep(self, step: int, rollouts: list[Rollout]) -> None:
        """Store the step file, then report it (on the writer's thread). The file is built in
        memory and stored with one write: no copy of it on the job's disk first."""
        key = self.job.rollouts_key(step)
        self.job.store.put_bytes(key, step_file_bytes(rollouts))
        summary = step_summary(rollouts)
        self.job.reporter.rollouts(
            RolloutsReport(
                step=step,
                blob=key,
                count=summary.count,
                best_score=summary.best,
                worst_score=summary.worst,
            )
        )


class KeepRollouts(TrainerCallback):
    """Waits for the step files being written before a snapshot is taken (add it before the
    callback that uploads snapshots) and when training ends, so every rollout is kept."""

    def __init__(self, rewards: StepRewards) -> None:
        self.rewards = rewards

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rewards.writer.wait()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rewards.writer.wait()


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
