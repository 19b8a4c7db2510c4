"""The run plan and the pipeline plan as typed models.

Keys are camelCase in YAML and JSON; unknown keys are refused by name. Every default lives here,
as a field default, except the few that depend on the method or the catalog, which
`akka_training.core.defaults` fills in.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator
from pydantic.alias_generators import to_camel

from akka_training.core import limits
from akka_training.core.bounds import (
    Description,
    Int,
    ModelName,
    Name,
    Number,
    Reference,
    Url,
)

Method = Literal["sft", "dpo", "grpo", "gspo"]
METHODS: tuple[str, ...] = ("sft", "dpo", "grpo", "gspo")
RL_METHODS: frozenset[str] = frozenset({"grpo", "gspo"})
# Methods that train on a fixed dataset through config.hyperparams, with a training loss.
LOSS_METHODS: frozenset[str] = frozenset({"sft", "dpo"})
# The DPO loss types a dpo run may use: TRL's, each tested here (docs/preference-fine-tuning.md).
LossType = Literal["sigmoid", "ipo", "hinge", "robust"]
LOSS_TYPES: tuple[str, ...] = LossType.__args__  # type: ignore[attr-defined]
Precision = Literal["BF16", "FP16", "FP32"]


class PlanModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_assignment=False,
        # Validators are built when a plan is first read: the CLI and the client import these
        # models for their types, and most commands read no plan.
        defer_build=True,
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# --- adapters and optimisation ------------------------------------------------------------------


class Lora(PlanModel):
    rank: Int = Field(8, ge=1, le=1024)
    alpha: Number = Field(16, gt=0, le=1_000_000)
    dropout: Number = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"

    @field_validator("target_modules")
    @classmethod
    def _bounded_modules(cls, value: str | list[str]) -> str | list[str]:
        names = [value] if isinstance(value, str) else value
        if len(names) > limits.MAX_TARGET_MODULES:
            raise ValueError(
                f"{len(names)} module names are more than the {limits.MAX_TARGET_MODULES} a "
                "plan may list; use a pattern such as all-linear"
            )
        if any(len(n) > limits.PATTERN_CHARS for n in names):
            raise ValueError(
                f"a module name or pattern holds at most {limits.PATTERN_CHARS} characters"
            )
        return value


class SftOptimizer(PlanModel):
    learning_rate: Number = Field(1.0e-4, gt=0, le=limits.MAX_LEARNING_RATE)
    weight_decay: Number = Field(0.0, ge=0, le=limits.MAX_WEIGHT_DECAY)
    warmup_ratio: Number = Field(0.0, ge=0, le=1)


class SftTraining(PlanModel):
    epochs: Number = Field(1, gt=0, le=limits.MAX_EPOCHS)
    max_steps: Int | None = Field(None, ge=1, le=limits.INT32_MAX)
    batch_size: Int = Field(8, ge=1, le=limits.INT32_MAX)
    gradient_accumulation: Int = Field(1, ge=1, le=limits.INT32_MAX)
    validation_frequency_steps: Int = Field(50, ge=1, le=limits.INT32_MAX)
    # None: PyTorch's own kernels. liger: Liger's fused Triton kernels (a GPU with liger-kernel).
    kernels: Literal["liger"] | None = None


class Preference(PlanModel):
    """How a dpo run weighs its pairs (TRL's DPOConfig)."""

    # How far the policy may move from the reference policy: a higher beta keeps it closer.
    beta: Number = Field(0.1, gt=0, le=limits.MAX_KL_BETA)
    loss_type: LossType = "sigmoid"
    # The share of pairs taken as mislabelled (sigmoid: conservative DPO; robust: robust DPO).
    label_smoothing: Number = Field(0.0, ge=0, lt=0.5)
    # Tokens of a prompt a pair keeps (the end of it, next to the answers); None: half of
    # config.maxSeqLength, filled by defaults. The answers take the rest of maxSeqLength.
    max_prompt_length: Int | None = Field(None, ge=1, le=limits.INT32_MAX)


class SftHyperparams(PlanModel):
    """The settings of a run that trains on a fixed dataset: sft, and dpo (with `preference`)."""

    lora: Lora = Field(default_factory=Lora)
    optimizer: SftOptimizer = Field(default_factory=SftOptimizer)
    training: SftTraining = Field(default_factory=SftTraining)
    # Only for dpo; None for sft.
    preference: Preference | None = None


class Clip(PlanModel):
    low: Number = Field(0.2, ge=0, le=limits.MAX_CLIP_LOW)
    high: Number = Field(0.28, ge=0, le=limits.MAX_CLIP_HIGH)


class RlOptimizer(PlanModel):
    learning_rate: Number = Field(1.0e-5, gt=0, le=limits.MAX_LEARNING_RATE)
    weight_decay: Number = Field(0.0, ge=0, le=limits.MAX_WEIGHT_DECAY)
    warmup_ratio: Number = Field(0.0, ge=0, le=1)


class RlTraining(PlanModel):
    epochs: Number = Field(1, gt=0, le=limits.MAX_EPOCHS)
    max_steps: Int | None = Field(None, ge=1, le=limits.INT32_MAX)


class RlHyperparams(PlanModel):
    prompts_per_step: Int = Field(8, ge=1, le=limits.INT32_MAX)
    generations_per_prompt: Int = Field(8, ge=1, le=limits.INT32_MAX)
    max_completion_tokens: Int = Field(512, ge=1, le=limits.INT32_MAX)
    temperature: Number = Field(1.0, gt=0, le=limits.MAX_TEMPERATURE)
    kl_beta: Number = Field(0.0, ge=0, le=limits.MAX_KL_BETA)
    # None: the method's clip range (GRPO 0.2/0.28, GSPO 3e-4/4e-4), filled by defaults.
    clip: Clip | None = None
    lora: Lora = Field(default_factory=Lora)
    optimizer: RlOptimizer = Field(default_factory=RlOptimizer)
    training: RlTraining = Field(default_factory=RlTraining)


# --- rewards ------------------------------------------------------------------------------------


class _Term(PlanModel):
    name: Name = Field(min_length=1)
    weight: Number = Field(1.0, ge=-1_000_000, le=1_000_000)


class MatchTerm(_Term):
    """Compares the completion with the row's expected answer."""

    kind: Literal["match"]
    mode: Literal["exact", "contains", "final-number", "json-label-match", "math"] = "exact"


class RegexTerm(_Term):
    """1 when `pattern` matches the completion (Python `re.search`, multiline)."""

    kind: Literal["regex"]
    pattern: str = Field(max_length=limits.PATTERN_CHARS)


class LengthTerm(_Term):
    """1 when the completion's token count lies in [minTokens, maxTokens], falling linearly to 0
    over `slackTokens` outside that range. With a negative weight it is a penalty on length
    outside the range: 0 inside, rising to 1 over `slackTokens` outside."""

    kind: Literal["length"]
    min_tokens: Int = Field(0, ge=0, le=limits.INT32_MAX)
    max_tokens: Int | None = Field(None, ge=1, le=limits.INT32_MAX)
    slack_tokens: Int = Field(32, ge=1, le=limits.INT32_MAX)


class RuleTerm(_Term):
    """A Python function from a registered scoring bundle, run inside the training job."""

    kind: Literal["rule"]
    bundle: Reference
    function: Reference = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class JudgeTerm(_Term):
    """A model behind an OpenAI-compatible endpoint that returns a score in [0, 1]."""

    kind: Literal["judge"]
    endpoint: Url
    model: Reference
    instructions: str = Field(max_length=limits.TEXT_CHARS)
    timeout_seconds: Number = Field(30.0, gt=0, le=600)
    max_tokens: Int = Field(256, ge=1, le=limits.INT32_MAX)
    # Name of an environment variable of the job that holds the endpoint's API key.
    api_key_env: Reference | None = None


class HttpTerm(_Term):
    """An evaluator that receives {input, output, expected} and returns score (or ok)."""

    kind: Literal["http"]
    url: Url
    timeout_seconds: Number = Field(30.0, gt=0, le=600)
    headers: dict[Reference, Annotated[str, Field(max_length=limits.URL_CHARS)]] = Field(
        default_factory=dict, max_length=limits.MAX_HEADERS
    )


RewardTerm = Annotated[
    MatchTerm | RegexTerm | LengthTerm | RuleTerm | JudgeTerm | HttpTerm,
    Field(discriminator="kind"),
]


class Reward(PlanModel):
    terms: list[RewardTerm] = Field(default_factory=list, max_length=limits.MAX_REWARD_TERMS)
    # How many terms score at once in one job.
    max_concurrency: Int = Field(16, ge=1, le=256)


class Tool(PlanModel):
    """A tool the policy may call during a rollout: a function from a registered bundle."""

    name: Name = Field(pattern=r"^[A-Za-z_]\w*$")
    bundle: Reference
    function: Reference = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    timeout_seconds: Number = Field(10.0, gt=0, le=600)


# --- health monitors ----------------------------------------------------------------------------

MonitorName = Literal[
    "answer-collapse",
    "zero-spread",
    "length-drift",
    "length-clipped",
    "entropy-collapse",
    "judge-failures",
    "judge-latency",
    "reward-hacking",
    "non-finite-loss",
]
MONITOR_NAMES: tuple[str, ...] = MonitorName.__args__  # type: ignore[attr-defined]


class MonitorThresholds(PlanModel):
    """Where each health monitor trips (docs/health-monitors.md defines every figure)."""

    # health/distinct_answers/step at or below this: the step's completions end in few answers.
    answer_collapse: Number = Field(0.2, ge=0, le=1)
    # groups/frac_zero_std at or above this: most groups carry no learning signal.
    zero_spread: Number = Field(0.9, ge=0, le=1)
    # health/length_drift (mean length over the baseline's) at or above this, or at or below
    # its inverse.
    length_drift: Number = Field(2.0, gt=1, le=1e6)
    # completions/clipped_ratio at or above this: completions run into maxCompletionTokens.
    length_clipped: Number = Field(0.5, ge=0, le=1)
    # entropy (nats per token, where the engine reports it) at or below this.
    entropy_collapse: Number = Field(0.05, ge=0, le=1e6)
    # health/judge_failures (the worst judge or http term's failure share) at or above this.
    judge_failures: Number = Field(0.2, ge=0, le=1)
    # health/judge_latency_p95 (seconds, the slowest judge or http term) at or above this.
    judge_latency: Number = Field(20.0, gt=0, le=1e6)
    # health/hacking_gap (reward rise minus the correctness term's rise) at or above this.
    reward_hacking: Number = Field(0.2, gt=0, le=1e6)


class Monitors(PlanModel):
    """Health monitors of a reinforcement run. Every monitor is computed and published each
    step; the ones named in `pause_on` pause the run (a snapshot, then PAUSED) once they stay
    past their threshold for `consecutive_steps` steps in a row."""

    pause_on: list[MonitorName] = Field(default_factory=list, max_length=len(MONITOR_NAMES))
    thresholds: MonitorThresholds = Field(default_factory=MonitorThresholds)
    consecutive_steps: Int = Field(3, ge=1, le=limits.INT32_MAX)
    # Steps whose mean length and reward are the baseline of length drift and reward hacking.
    baseline_steps: Int = Field(3, ge=1, le=limits.INT32_MAX)
    # The term reward hacking watches; None: the plan's first match term.
    correctness_term: Name | None = None


# --- the run --------------------------------------------------------------------------------------


class ModelSettings(PlanModel):
    # None: the precision of the catalog envelope the run is admitted under.
    precision: Precision | None = None


class RunConfig(PlanModel):
    dataset: Reference
    eval_dataset: Reference | None = None
    method: Method
    # None: the smaller of 2048 and the base model's context length.
    max_seq_length: Int | None = Field(None, ge=16, le=limits.INT32_MAX)
    model: ModelSettings = Field(default_factory=ModelSettings)
    hyperparams: SftHyperparams | None = None
    rl_hyperparams: RlHyperparams | None = None
    reward: Reward | None = None
    tools: list[Tool] = Field(default_factory=list, max_length=limits.MAX_TOOLS)
    # Health monitors (grpo and gspo); None: every monitor published, none pauses.
    monitors: Monitors | None = None
    seed: Int = Field(42, ge=0, le=limits.SEED_MAX)


class Execution(PlanModel):
    gpus: Int = Field(1, ge=1, le=64)
    # None: the deployment's default pool.
    pool: Name | None = None
    save_every: Int = Field(20, ge=1, le=limits.INT32_MAX)
    keep_adapters: Int = Field(4, ge=1, le=limits.INT32_MAX)
    rollout_gpus: Int = Field(0, ge=0, le=limits.INT32_MAX)
    staleness_threshold: Int = Field(0, ge=0, le=limits.INT32_MAX)


class Source(PlanModel):
    """Where a run starts from. Without `snapshot`: a warm start from the run's final adapter.
    With `snapshot`: a branch from its weights, or with ``restore: trainingState`` a
    continuation of its full training state."""

    run: Reference
    snapshot: Name | None = None
    restore: Literal["weights", "trainingState"] = "weights"


class RunPlan(PlanModel):
    kind: Literal["run"] = "run"
    project: Name
    base_model: ModelName
    model_name: ModelName | None = None
    description: Description | None = None
    submission_id: ModelName | None = None
    source: Source | None = None
    config: RunConfig
    execution: Execution = Field(default_factory=Execution)


# --- pipelines ------------------------------------------------------------------------------------


class TrainStage(PlanModel):
    name: Name
    type: Literal["train"] = "train"
    base_model: ModelName
    model_name: ModelName | None = None
    description: Description | None = None
    source: Source | None = None
    config: RunConfig
    execution: Execution = Field(default_factory=Execution)

    def as_run_plan(self, project: str) -> RunPlan:
        return RunPlan(
            project=project,
            base_model=self.base_model,
            model_name=self.model_name,
            description=self.description,
            source=self.source,
            config=self.config,
            execution=self.execution,
        )


class StageGate(PlanModel):
    """The stages after an evaluate stage start only when its `metric`'s mean is at least
    `min`."""

    metric: Name
    min: Number = Field(ge=-1_000_000, le=1_000_000)  # as a term's weight


class EvaluateStage(PlanModel):
    """An evaluation (`core.evaluations`) of an earlier train stage's final adapter
    (`source: "@STAGE"`), on the base model of that stage. `generation` and `metrics` are an
    evaluation plan's, checked as such."""

    name: Name
    type: Literal["evaluate"]
    source: Reference
    dataset: Reference
    generation: dict[str, Any] = Field(default_factory=dict)
    metrics: list[dict[str, Any]] = Field(min_length=1, max_length=limits.MAX_REWARD_TERMS)
    gate: StageGate | None = None
    execution: dict[str, Any] = Field(default_factory=dict)

    def evaluation_document(self, project: str, base_model: str) -> dict[str, Any]:
        """The evaluation plan of this stage, without its source (the stage's run is pinned
        once it completes)."""
        return {
            "kind": "evaluation",
            "project": project,
            "name": self.name,
            "baseModel": base_model,
            "dataset": self.dataset,
            "generation": self.generation,
            "metrics": self.metrics,
            "execution": self.execution,
        }


def stage_tag(value: Any) -> str | None:
    """A stage's tag; None (pydantic's "no tag found") for what is no stage at all, such as a
    stage written as a list."""
    if isinstance(value, dict):
        return f"[{value.get('type', 'train')}]"
    if isinstance(value, TrainStage | EvaluateStage):
        return f"[{value.type}]"
    return None


# The tags are in brackets so that error paths leave them out (`core.parsing`).
Stage = Annotated[
    Annotated[TrainStage, Tag("[train]")] | Annotated[EvaluateStage, Tag("[evaluate]")],
    Discriminator(stage_tag),
]


class PipelinePlan(PlanModel):
    kind: Literal["pipeline"]
    project: Name
    name: ModelName | None = None
    description: Description | None = None
    submission_id: ModelName | None = None
    stages: list[Stage] = Field(min_length=1, max_length=limits.MAX_STAGES)
