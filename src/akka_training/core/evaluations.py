"""Evaluations: an adapter (or a base model alone) scored on a held-out dataset.

An evaluation plan (`kind: evaluation`) names a base model, an optional source (a run's final
adapter or one of its snapshots), a dataset of chat or prompt rows with expected answers, how
to generate (`generation`) and what to measure (`metrics`): the reward terms of reinforcement
learning (match, regex, length, judge, http, rule), `loss` (the mean token loss of the
expected answers) and `pass@k` over a term when more than one sample is drawn per prompt; or,
over a dataset of preference pairs, `preference` (the share of pairs the model prefers the
chosen answer of).

It runs as a task of kind `evaluate` (`core.tasks`); its job keeps every scored sample in the
blob store and reports each metric with a 95% confidence interval (`interval`). Comparing two
evaluations (`compare`) says whether a difference is beyond that noise.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from akka_training.core import limits
from akka_training.core.bounds import Int, ModelName, Name, Number, Reference
from akka_training.core.errors import PlanRefused, Problem
from akka_training.core.parsing import problems_of, salvage
from akka_training.core.plans import (
    HttpTerm,
    JudgeTerm,
    LengthTerm,
    MatchTerm,
    PlanModel,
    RegexTerm,
    RuleTerm,
)
from akka_training.core.resolved import BaseModelPin, BundlePin, ReferencePin
from akka_training.core.serving import ServingEngine

EVALUATE = "evaluate"
REWARD_KINDS = ("match", "regex", "length", "judge", "http", "rule")
METRIC_KINDS = (*REWARD_KINDS, "loss", "pass@k", "preference")
# The z of a two-sided 95% interval.
Z95 = 1.96


class LossMetric(PlanModel):
    """The mean token loss (cross-entropy, nats) of each row's expected answer given its
    prompt, under the evaluated model."""

    kind: Literal["loss"]
    name: Name = Field("loss", min_length=1)


class PreferenceMetric(PlanModel):
    """Over a preference dataset: the share of pairs whose chosen answer the evaluated model
    prefers by its log-probability margin against a reference, DPO's implicit reward margin:
    [log p(chosen) - log p_ref(chosen)] - [log p(rejected) - log p_ref(rejected)]. A pair
    counts 1 above 0, 1/2 at exactly 0 (so the reference itself scores 0.5) and 0 below.

    `reference: run` (the default) measures a model against the evaluated run's own reference:
    for a dpo run the policy it started from (the SFT adapter of a warm start, a branch's
    snapshot, the base model for a fresh adapter; a continuation keeps its source run's), for
    any other run and for the base model the base model. `reference: base-model` measures every
    model against the base model, which puts base, SFT and DPO on one scale."""

    kind: Literal["preference"]
    name: Name = Field("preference", min_length=1)
    reference: Literal["run", "base-model"] = "run"


class PassAtKMetric(PlanModel):
    """The chance that at least one of `k` samples of a prompt passes `term` (its value at
    least `threshold`), estimated without bias from `samplesPerPrompt` samples."""

    kind: Literal["pass@k"]
    name: Name = Field("pass@k", min_length=1)
    term: Name
    k: Int | None = Field(None, ge=1, le=64)  # samplesPerPrompt when unset
    threshold: Number = Field(1.0, ge=-1_000_000, le=1_000_000)  # as a term's weight


Metric = Annotated[
    MatchTerm
    | RegexTerm
    | LengthTerm
    | RuleTerm
    | JudgeTerm
    | HttpTerm
    | LossMetric
    | PassAtKMetric
    | PreferenceMetric,
    Field(discriminator="kind"),
]


class EvaluationSource(PlanModel):
    """The run whose adapter is evaluated: its final adapter, or one snapshot's weights."""

    run: Reference
    snapshot: Name | None = None


class Generation(PlanModel):
    max_completion_tokens: Int = Field(64, ge=1, le=32768)
    # 0 decodes greedily.
    temperature: Number = Field(0.0, ge=0, le=10)
    samples_per_prompt: Int = Field(1, ge=1, le=64)


class EvaluationExecution(PlanModel):
    """Where the evaluation's job runs: `gpus` devices of `pool`, claimed like a run's (the
    evaluation waits QUEUED while the pool has too few free)."""

    pool: Name | None = None
    gpus: Int = Field(1, ge=1, le=64)


class EvaluationPlan(PlanModel):
    kind: Literal["evaluation"] = "evaluation"
    project: Name
    name: ModelName | None = None
    base_model: ModelName
    source: EvaluationSource | None = None
    dataset: Reference
    generation: Generation = Field(default_factory=Generation)
    metrics: list[Metric] = Field(min_length=1, max_length=limits.MAX_REWARD_TERMS)
    execution: EvaluationExecution = Field(default_factory=EvaluationExecution)
    seed: Int = Field(42, ge=0, le=limits.SEED_MAX)


class EvaluateParams(PlanModel):
    """What an evaluation's job receives (`TaskSpec.params`), and what the service shows of
    its plan."""

    name: str | None = None
    source: EvaluationSource | None = None
    dataset_ref: str  # PROJECT/NAME:vN, as resolved
    base_model: BaseModelPin
    adapter: str | None  # blob key of the PEFT adapter directory; None evaluates the base model
    tokenizer: str | None  # blob prefix of the source run's tokenizer files, if any
    dataset: str  # blob key of the dataset's JSONL
    generation: Generation
    metrics: list[Metric]
    bundles: dict[str, BundlePin] = Field(default_factory=dict)
    samples: str  # blob key the scored samples are written to (JSONL)
    seed: int = 42
    gpus: int = 1  # the devices its claim holds
    # A preference metric's reference (`PreferenceMetric.reference` resolved); None for other
    # metrics.
    reference: ReferencePin | None = None
    # What generates its completions, as for endpoints (`trainer.endpoints.engine`), and the
    # interpreter of vLLM's environment (`trainer.endpoints.vllm-python`).
    engine: ServingEngine = "auto"
    vllm_python: str | None = None


class MetricValue(PlanModel):
    """One metric over the evaluated set: its mean, the 95% interval around it and the
    standard error the interval came from, over `count` values (samples, or prompts for loss
    and pass@k)."""

    name: str
    kind: str
    mean: float
    low: float
    high: float
    stderr: float
    count: int
    # A preference metric's reference, in words (`ReferencePin.describe`).
    reference: str | None = None


class EvaluationResult(PlanModel):
    metrics: list[MetricValue]
    samples: str
    sample_count: int
    prompts: int
    # What generated the completions: `vllm` or `transformers`; None: nothing generated (a
    # preference evaluation), or a result from before engines were named.
    engine: str | None = None


def parse_evaluation(data: dict[str, Any]) -> EvaluationPlan:
    """The plan, or `PlanRefused` with every problem; an unknown metric is named as such."""
    read = read_evaluation(data)
    if read.plan is None or read.problems:
        raise PlanRefused(read.problems)
    return read.plan


@dataclass
class ReadEvaluation:
    """What `read_evaluation` made of a document: the plan as far as it parses (None when a
    required field is missing), every problem of the document itself, and the fields left out
    of the plan because they failed (they took their defaults)."""

    plan: EvaluationPlan | None
    problems: list[Problem]
    removed: list[str] = field(default_factory=list)


def read_evaluation(data: dict[str, Any]) -> ReadEvaluation:
    """Every problem of the document at once: unknown metrics, the schema's problems and the
    rules between metrics and generation, these over what still parses. A metric that fails
    is read as a placeholder in its place, so that the others keep their positions."""
    problems: list[Problem] = []
    document = copy.deepcopy(data)
    metrics = document.get("metrics")
    failed: set[int] = set()
    if isinstance(metrics, list):
        for i, metric in enumerate(metrics):
            kind = metric.get("kind") if isinstance(metric, dict) else None
            if kind not in METRIC_KINDS:
                failed.add(i)
                problems.append(
                    Problem(
                        f"metrics[{i}].kind",
                        f"metrics[{i}]: there is no metric {kind!r}; set kind to one of: "
                        f"{', '.join(METRIC_KINDS)}.",
                    )
                )
    _placeholders(document, failed)
    try:
        plan: EvaluationPlan | None = EvaluationPlan.model_validate(document)
        removed: list[str] = []
    except ValidationError as exc:
        problems += problems_of(exc, EvaluationPlan)
        broken = {i for i in (_metric_at(err["loc"]) for err in exc.errors()) if i is not None}
        failed |= broken
        _placeholders(document, broken)
        plan, removed = salvage(EvaluationPlan, document)
    if plan is None:
        return ReadEvaluation(None, problems, removed)
    defaulted = any(f == "generation" or f.startswith("generation.") for f in removed)
    problems += [
        p
        for p in metric_problems(plan)
        if not (defaulted and "generation." in p.message) and not _placeholder_field(p, failed)
    ]
    return ReadEvaluation(plan, problems, removed)


# What stands in for a metric that failed: a loss metric (no rule reads it) of its own name.
_PLACEHOLDER = "metrics[{}] as written"


def _placeholders(document: dict[str, Any], positions: set[int]) -> None:
    metrics = document.get("metrics")
    if not isinstance(metrics, list):
        return
    for i in positions:
        if i < len(metrics):
            metrics[i] = {"kind": "loss", "name": _PLACEHOLDER.format(i)}


def _metric_at(loc: tuple[Any, ...]) -> int | None:
    if len(loc) >= 2 and loc[0] == "metrics" and isinstance(loc[1], int):
        return loc[1]
    return None


def _placeholder_field(problem: Problem, failed: set[int]) -> bool:
    return any(problem.field.startswith(f"metrics[{i}]") for i in failed)


def metric_problems(plan: EvaluationPlan) -> list[Problem]:
    """The rules between metrics and generation."""
    problems: list[Problem] = []
    names = [m.name for m in plan.metrics]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(
                Problem(f"metrics[{i}].name", f"Two metrics are named {name!r}; rename one.")
            )
    kinds = {m.kind for m in plan.metrics}
    if "preference" in kinds and kinds != {"preference"}:
        problems.append(
            Problem(
                "metrics",
                "A preference metric scores the pairs of a preference dataset, which the other "
                "metrics cannot read; evaluate them in a separate evaluation.",
            )
        )
    terms = {m.name for m in plan.metrics if m.kind in REWARD_KINDS}
    samples = plan.generation.samples_per_prompt
    for i, m in enumerate(plan.metrics):
        if not isinstance(m, PassAtKMetric):
            continue
        if samples < 2:
            problems.append(
                Problem(
                    f"metrics[{i}]",
                    f"pass@k needs more than one sample of each prompt; set "
                    f"generation.samplesPerPrompt above 1 (it is {samples}).",
                )
            )
        if m.term not in terms:
            known = ", ".join(sorted(terms)) or "none"
            problems.append(
                Problem(
                    f"metrics[{i}].term",
                    f"metrics[{i}].term {m.term!r} names no reward term of this evaluation "
                    f"(its terms: {known}).",
                )
            )
        if m.k is not None and m.k > samples:
            problems.append(
                Problem(
                    f"metrics[{i}].k",
                    f"metrics[{i}].k is {m.k}, more than generation.samplesPerPrompt "
                    f"({samples}); lower k or draw more samples.",
                )
            )
    return problems


# --- statistics ---------------------------------------------------------------------------------


def interval(values: Sequence[float]) -> tuple[float, float, float, float]:
    """(mean, low, high, stderr) of a 95% interval around the mean of `values`. Values that are
    all 0 or 1 take Wilson's interval (it stays inside [0, 1] and is not empty at 0 or 1 of
    few); others Student's t interval from the sample standard deviation (n - 1 degrees of
    freedom: wider than the normal one on few samples, the same on many)."""
    n = len(values)
    if n == 0:
        return (0.0, 0.0, 0.0, 0.0)
    mean = sum(values) / n
    if all(v in (0.0, 1.0) for v in values):
        stderr = math.sqrt(mean * (1 - mean) / n)
        centre = (mean + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
        half = Z95 * math.sqrt(mean * (1 - mean) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
        return (mean, max(0.0, centre - half), min(1.0, centre + half), stderr)
    if n == 1:
        return (mean, mean, mean, 0.0)
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    stderr = math.sqrt(variance / n)
    half = t95(n - 1) * stderr
    return (mean, mean - half, mean + half, stderr)


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (12.706 at 1,
    2.306 at 8, 2.042 at 30, towards 1.96): the t at which P(|T| <= t) = 0.95."""
    if df < 1:
        raise ValueError(f"Student's t needs at least 1 degree of freedom, not {df}")
    if df > 1000:
        # The expansion around the normal quantile (Cornish-Fisher), within 1e-6 from here on.
        z = 1.959963984540054  # the normal's 97.5% quantile
        return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    low, high = 0.0, 1000.0
    for _ in range(100):
        middle = (low + high) / 2
        if _t_within(middle, df) < 0.95:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _t_within(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with an integer `df`, in closed form (Abramowitz and Stegun
    26.7.3 and 26.7.4)."""
    theta = math.atan(t / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        total = term = 1.0
        for j in range(2, df - 1, 2):
            term *= (j - 1) / j * cos2
            total += term
        return sin * total
    total = term = math.cos(theta) if df > 1 else 0.0
    for j in range(3, df - 1, 2):
        term *= (j - 1) / j * cos2
        total += term
    return 2 / math.pi * (theta + sin * total)


def pass_at_k(samples: int, passed: int, k: int) -> float:
    """The unbiased estimate of pass@k from `samples` draws of which `passed` passed:
    1 - C(n - c, k) / C(n, k)."""
    if samples - passed < k:
        return 1.0
    return 1.0 - math.comb(samples - passed, k) / math.comb(samples, k)


def beyond_noise(mean_a: float, stderr_a: float, mean_b: float, stderr_b: float) -> bool:
    """Whether b - a lies outside the 95% interval of a difference of two independent means.
    A difference with no spread on either side (every value the same) is beyond noise when it
    is not zero."""
    spread = math.sqrt(stderr_a**2 + stderr_b**2)
    difference = mean_b - mean_a
    if spread == 0:
        return difference != 0
    return abs(difference) > Z95 * spread
