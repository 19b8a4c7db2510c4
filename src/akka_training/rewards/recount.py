"""A step's figures counted again from its step file, for `runs verify`.

This is a second implementation of the definitions `rewards.figures` and `rewards.health`
publish by (their docstrings and docs/rollouts.md and docs/health-monitors.md state them),
written apart from them on purpose: it reads the file's columns with Arrow's compute functions
where the engines work over `Rollout` records in Python, so a mistake in one is not repeated by
the other. It shares with them only `final_answer`, the definition of an answer.

Not recounted: ``tools/*`` (the engines count the calls their tools served, which a completion's
messages under-count), the judge and http terms' latencies (timings are not kept) and the
step's timings, loss and learning rate (not rollout figures).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from akka_training.rewards.terms.answers import final_answer

# Two scores closer than this are equal (as `rewards.figures.EQUAL_TOLERANCE`, by definition).
TOLERANCE = 1e-9
_WEIGHTS_KEY = b"akka.term_weights"


@dataclass
class StepFile:
    """A step file's columns, as Arrow reads them, and the weights of its terms."""

    table: pa.Table
    weights: dict[str, float]

    @classmethod
    def read(cls, data: bytes) -> StepFile:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        raw = (parquet.schema_arrow.metadata or {}).get(_WEIGHTS_KEY)
        weights = {str(k): float(v) for k, v in json.loads(raw).items()} if raw else {}
        return cls(parquet.read(), weights)

    def column(self, name: str) -> pa.ChunkedArray:
        return self.table.column(name)

    def share(self, term: str) -> pa.ChunkedArray:
        """Each rollout's share of `term`; 0 where its record names no such share."""
        return pc.fill_null(pc.map_lookup(self.column("shares"), term, "first"), 0.0)

    def terms(self) -> list[str]:
        """The weights' terms in their order, then any other term a share names."""
        names = list(self.weights)
        shares = self.column("shares").combine_chunks()
        for name in pc.unique(shares.keys).to_pylist():
            if name not in names:
                names.append(name)
        return names


def recount(
    step: StepFile, max_completion_tokens: int, remote_terms: Sequence[str] = ()
) -> dict[str, float]:
    """The step's rollout and health figures (the history monitors aside: `History`)."""
    rows = step.table.num_rows
    if rows == 0:
        return {}
    scores = step.column("score")
    tokens = pc.cast(step.column("completion_tokens"), pa.float64())
    out: dict[str, float] = {
        "reward/mean": _mean(scores),
        "reward/std": _pstd(scores),
        "reward/min": pc.min(scores).as_py(),
        "reward/max": pc.max(scores).as_py(),
        "completions/min_length": pc.min(tokens).as_py(),
        "completions/max_length": pc.max(tokens).as_py(),
        "completions/mean_length": _mean(tokens),
    }
    for term in step.terms():
        shares = step.share(term)
        out[f"terms/{term}/share_mean"] = _mean(shares)
        out[f"terms/{term}/share_std"] = _pstd(shares)
    stopped = pc.equal(step.column("finish_reason"), "stop")
    if pc.any(stopped).as_py():
        out["completions/mean_terminated_length"] = _mean(pc.filter(tokens, stopped))
    clipped = pc.or_(
        pc.equal(step.column("finish_reason"), "length"),
        pc.greater_equal(tokens, max_completion_tokens),
    )
    out["completions/clipped_ratio"] = _fraction(clipped, rows)
    spread = step.table.group_by("group").aggregate([("score", "min"), ("score", "max")])
    flat = pc.less_equal(pc.subtract(spread["score_max"], spread["score_min"]), TOLERANCE)
    out["groups/frac_zero_std"] = _fraction(flat, spread.num_rows)
    out["rollouts/frac_zero"] = _fraction(pc.less_equal(pc.abs(scores), TOLERANCE), rows)
    full = math.fsum(w for w in step.weights.values() if w > 0)
    reach = pc.less_equal(pc.abs(pc.subtract(scores, full)), TOLERANCE)
    out["rollouts/frac_full"] = _fraction(reach, rows)
    out |= _distinct(step)
    failures = []
    for term in remote_terms:
        failed = pc.is_valid(pc.map_lookup(step.column("failures"), term, "first"))
        share = _fraction(failed, rows)
        out[f"health/term_failures/{term}"] = share
        failures.append(share)
    if failures:
        out["health/judge_failures"] = max(failures)
    return out


def prompt_tokens(step: StepFile, count: Callable[[object], int]) -> float:
    """The ``tokens`` figure of a step: every rollout's prompt tokens (`count` of its prompt)
    and completion tokens. A prompt's rollouts share it: each is counted once and used for
    all of them."""
    seen: dict[str, int] = {}
    total = 0
    for text in step.column("prompt").to_pylist():
        if text not in seen:
            seen[text] = count(json.loads(text))
        total += seen[text]
    return float(total) + float(pc.sum(step.column("completion_tokens")).as_py() or 0)


@dataclass
class History:
    """The history monitors of one attempt (the steps one job trained, in order): the
    baseline is its first `baseline_steps` steps."""

    baseline_steps: int
    correctness: str | None
    lengths: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)

    def add(self, figures: Mapping[str, float]) -> dict[str, float]:
        """The history figures of the next step of the attempt, from its recounted figures."""
        base = self.baseline_steps
        out: dict[str, float] = {}
        self.lengths.append(figures["completions/mean_length"])
        self.rewards.append(figures["reward/mean"])
        share = figures.get(f"terms/{self.correctness}/share_mean") if self.correctness else None
        if share is not None:
            self.shares.append(share)
        if len(self.lengths) > base:
            first = math.fsum(self.lengths[:base]) / base
            if first > 0:
                out["health/length_drift"] = self.lengths[-1] / first
        if len(self.rewards) > base:
            rise = _window_rise(self.rewards, base)
            out["health/reward_rise"] = rise
            if share is not None and len(self.shares) == len(self.rewards):
                term = _window_rise(self.shares, base)
                out["health/term_rise"] = term
                out["health/hacking_gap"] = rise - term
        return out


def _window_rise(values: list[float], window: int) -> float:
    return math.fsum(values[-window:]) / window - math.fsum(values[:window]) / window


def _distinct(step: StepFile) -> dict[str, float]:
    completions = step.column("completion").to_pylist()
    answers = [final_answer(c) for c in completions]
    groups = step.column("group").to_pylist()
    return {
        "health/distinct_completions/group": _per_group(completions, groups),
        "health/distinct_completions/step": len(set(completions)) / len(completions),
        "health/distinct_answers/group": _per_group(answers, groups),
        "health/distinct_answers/step": len(set(answers)) / len(answers),
    }


def _per_group(items: list[str], groups: list[int]) -> float:
    members: dict[int, list[str]] = {}
    for group, item in zip(groups, items, strict=True):
        members.setdefault(group, []).append(item)
    return math.fsum(len(set(m)) / len(m) for m in members.values()) / len(members)


def _mean(values: pa.ChunkedArray) -> float:
    return float(pc.mean(values).as_py())


def _pstd(values: pa.ChunkedArray) -> float:
    return float(pc.stddev(values, ddof=0).as_py())


def _fraction(flags: pa.ChunkedArray | pa.Array, total: int) -> float:
    return float(pc.sum(pc.cast(flags, pa.int64())).as_py() or 0) / total if total else 0.0


def remote(terms: Iterable[tuple[str, str]]) -> list[str]:
    """The judge and http terms of (name, kind) pairs."""
    return [name for name, kind in terms if kind in ("judge", "http")]
