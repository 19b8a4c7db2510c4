"""The reward function verl calls, scoring with the project's own reward terms.

verl 0.9.1 loads it from ``reward.custom_reward_function.path`` (``pkg://`` + this module) and
calls it once per rollout from its reward workers (``NaiveRewardManager.run_single``, in
``verl/experimental/reward_loop/reward_manager/naive.py``)::

    await compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...,
                        akka_reward_config=...)

``solution_str`` is the decoded completion, ``ground_truth`` the row's
``reward_model.ground_truth`` and ``extra_info`` the row's ``extra_info`` (see `data.py`) plus
what verl adds (``num_turns``, ``rollout_reward_scores``, the rollout's extra fields); the last
keyword comes from ``reward_kwargs``. verl 0.9.1 has no batched form for custom functions: its
reward loop calls the function per rollout, concurrently, and awaits a coroutine function on
its event loop, which is why this one is ``async``.

It answers ``{"score": total, "term/<name>": value, ...}`` (verl keeps the extra keys as
reward extra info) and appends a `RewardRecord` to this process's record file, so each
rollout's term shares, timings and failures are kept exactly as under TRL.

This module runs inside verl's environment: it needs verl's interpreter to have our package on
its path (the job arranges that) and imports no part of verl.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from akka_training.core.plans import Reward
from akka_training.engines.verl.records import RecordWriter, RewardRecord, write_setup_error
from akka_training.engines.verl.reward_config import CONFIG_ENV, CONFIG_KWARG, RewardConfig
from akka_training.rewards.inputs import RolloutInput
from akka_training.rewards.scorer import RewardScorer

TERM_PREFIX = "term/"


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | None,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one rollout with the plan's reward terms (verl's custom reward function)."""
    scoring = _scoring(kwargs.get(CONFIG_KWARG) or os.environ.get(CONFIG_ENV))
    info = extra_info or {}
    rollout = scoring.rollout_input(solution_str, ground_truth, info)
    async with scoring.gate():
        started, clock = time.time(), time.perf_counter()
        batch = await scoring.scorer.score_async([rollout])
        seconds = time.perf_counter() - clock
    scored = batch.rollouts[0]
    scoring.writer.write(
        RewardRecord(
            started=started,
            seconds=seconds,
            split=str(info.get("split", "train")),
            index=int(info.get("index", -1)),
            prompt=rollout.prompt,
            completion=solution_str,
            expected=ground_truth,
            completion_tokens=rollout.completion_tokens,
            finish_reason=rollout.finish_reason,
            score=scored.score,
            shares=dict(scored.shares),
            values=dict(scored.values),
            term_seconds=dict(scored.seconds),
            failures=dict(scored.failures),
            explanations=dict(scored.explanations),
            judge_prompt_tokens=dict(batch.stats.judge_prompt_tokens),
            judge_completion_tokens=dict(batch.stats.judge_completion_tokens),
            retries=dict(scored.retries),
        )
    )
    return {"score": float(scored.score)} | {
        f"{TERM_PREFIX}{name}": float(value) for name, value in scored.values.items()
    }


class _Scoring:
    """What one worker process keeps between calls: the scorer, the tokenizer and the record
    file, built on the first call."""

    def __init__(self, config: RewardConfig) -> None:
        self.config = config
        records = Path(config.records)
        try:
            reward = Reward.model_validate(
                {"terms": config.terms, "maxConcurrency": config.max_concurrency}
            )
            self.scorer = RewardScorer.from_reward(reward, bundle_resolver=self._bundle)
        except Exception as exc:
            write_setup_error(records, f"{type(exc).__name__}: {exc}")
            raise
        self.tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
        self.writer = RecordWriter(records)
        self._gates: dict[int, asyncio.Semaphore] = {}

    def gate(self) -> asyncio.Semaphore:
        """At most maxConcurrency rollouts scoring at once in this process (per event loop)."""
        loop = id(asyncio.get_running_loop())
        if loop not in self._gates:
            self._gates[loop] = asyncio.Semaphore(self.config.max_concurrency)
        return self._gates[loop]

    def rollout_input(
        self, completion: str, expected: str | None, info: dict[str, Any]
    ) -> RolloutInput:
        tokens = len(self.tokenizer(completion, add_special_tokens=False)["input_ids"])
        return RolloutInput(
            prompt=_json_field(info, "prompt", default=""),
            completion=completion,
            expected=expected,
            completion_tokens=tokens,
            row=_json_field(info, "row", default={}),
            group=int(info.get("index", 0)),
            # verl does not hand the stop reason over; a completion that filled the response
            # budget was cut off.
            finish_reason="length" if tokens >= self.config.max_response_length else "stop",
        )

    def _bundle(self, ref: str) -> Path:
        if ref not in self.config.bundles:
            raise KeyError(f"bundle {ref!r} was not prepared for this job")
        return Path(self.config.bundles[ref])


_LOCK = threading.Lock()
_BY_PATH: dict[str, _Scoring] = {}


def _scoring(config_path: str | None) -> _Scoring:
    if not config_path:
        raise RuntimeError(
            f"the reward function needs its configuration: pass {CONFIG_KWARG} in "
            f"reward.custom_reward_function.reward_kwargs or set {CONFIG_ENV}"
        )
    with _LOCK:
        if config_path not in _BY_PATH:
            _BY_PATH[config_path] = _Scoring(RewardConfig.read(config_path))
        return _BY_PATH[config_path]


def _json_field(info: dict[str, Any], key: str, *, default: Any) -> Any:
    value = info.get(key)
    if value is None:
        return default
    return json.loads(value) if isinstance(value, str) else value
