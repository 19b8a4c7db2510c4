"""The run plan and the pipeline plan as typed models.

Keys are camelCase in YAML and JSON; unknown keys are refused by name. Every default lives here,
as a field default, except the few that depend on the method or the catalog, which
`akka_training.core.defaults` fills in.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

Method = Literal["sft", "grpo", "gspo"]
RL_METHODS: frozenset[str] = frozenset({"grpo", "gspo"})
Precision = Literal["BF16", "FP16", "FP32"]


class PlanModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_assignment=False,
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# --- adapters and optimisation ------------------------------------------------------------------


class Lora(PlanModel):
    rank: int = Field(8, ge=1, le=1024)
    alpha: float = Field(16, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"


class SftOptimizer(PlanModel):
    learning_rate: float = Field(1.0e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    warmup_ratio: float = Field(0.0, ge=0, le=1)


class SftTraining(PlanModel):
    epochs: float = Field(1, gt=0)
    max_steps: int | None = Field(None, ge=1)
    batch_size: int = Field(8, ge=1)
    gradient_accumulation: int = Field(1, ge=1)
    validation_frequency_steps: int = Field(50, ge=1)


class SftHyperparams(PlanModel):
    lora: Lora = Field(default_factory=Lora)
    optimizer: SftOptimizer = Field(default_factory=SftOptimizer)
    training: SftTraining = Field(default_factory=SftTraining)


class Clip(PlanModel):
    low: float = Field(0.2, ge=0)
    high: float = Field(0.28, ge=0)


class RlOptimizer(PlanModel):
    learning_rate: float = Field(1.0e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    warmup_ratio: float = Field(0.0, ge=0, le=1)


class RlTraining(PlanModel):
    epochs: float = Field(1, gt=0)
    max_steps: int | None = Field(None, ge=1)


class RlHyperparams(PlanModel):
    prompts_per_step: int = Field(8, ge=1)
    generations_per_prompt: int = Field(8, ge=1)
    max_completion_tokens: int = Field(512, ge=1)
    temperature: float = Field(1.0, gt=0)
    kl_beta: float = Field(0.0, ge=0)
    # None: the method's clip range (GRPO 0.2/0.28, GSPO 3e-4/4e-4), filled by defaults.
    clip: Clip | None = None
    lora: Lora = Field(default_factory=Lora)
    optimizer: RlOptimizer = Field(default_factory=RlOptimizer)
    training: RlTraining = Field(default_factory=RlTraining)


# --- rewards ------------------------------------------------------------------------------------


class _Term(PlanModel):
    name: str = Field(min_length=1, max_length=64)
    weight: float = 1.0


class MatchTerm(_Term):
    """Compares the completion with the row's expected answer."""

    kind: Literal["match"]
    mode: Literal["exact", "contains", "final-number", "json-label-match", "math"] = "exact"


class RegexTerm(_Term):
    """1 when `pattern` matches the completion (Python `re.search`, multiline)."""

    kind: Literal["regex"]
    pattern: str


class LengthTerm(_Term):
    """1 when the completion's token count lies in [minTokens, maxTokens], falling linearly to 0
    over `slackTokens` outside that range. With a negative weight it is a penalty on length
    outside the range: 0 inside, rising to 1 over `slackTokens` outside."""

    kind: Literal["length"]
    min_tokens: int = Field(0, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    slack_tokens: int = Field(32, ge=1)


class RuleTerm(_Term):
    """A Python function from a registered scoring bundle, run inside the training job."""

    kind: Literal["rule"]
    bundle: str
    function: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class JudgeTerm(_Term):
    """A model behind an OpenAI-compatible endpoint that returns a score in [0, 1]."""

    kind: Literal["judge"]
    endpoint: str
    model: str
    instructions: str
    timeout_seconds: float = Field(30.0, gt=0, le=600)
    max_tokens: int = Field(256, ge=1)
    # Name of an environment variable of the job that holds the endpoint's API key.
    api_key_env: str | None = None


class HttpTerm(_Term):
    """An evaluator that receives {input, output, expected} and returns score (or ok)."""

    kind: Literal["http"]
    url: str
    timeout_seconds: float = Field(30.0, gt=0, le=600)
    headers: dict[str, str] = Field(default_factory=dict)


RewardTerm = Annotated[
    MatchTerm | RegexTerm | LengthTerm | RuleTerm | JudgeTerm | HttpTerm,
    Field(discriminator="kind"),
]


class Reward(PlanModel):
    terms: list[RewardTerm] = Field(default_factory=list)
    # How many terms score at once in one job.
    max_concurrency: int = Field(16, ge=1, le=256)


class Tool(PlanModel):
    """A tool the policy may call during a rollout: a function from a registered bundle."""

    name: str = Field(pattern=r"^[A-Za-z_]\w*$")
    bundle: str
    function: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    timeout_seconds: float = Field(10.0, gt=0, le=600)


# --- the run --------------------------------------------------------------------------------------


class ModelSettings(PlanModel):
    # None: the precision of the catalog envelope the run is admitted under.
    precision: Precision | None = None


class RunConfig(PlanModel):
    dataset: str
    eval_dataset: str | None = None
    method: Method
    # None: the smaller of 2048 and the base model's context length.
    max_seq_length: int | None = Field(None, ge=16)
    model: ModelSettings = Field(default_factory=ModelSettings)
    hyperparams: SftHyperparams | None = None
    rl_hyperparams: RlHyperparams | None = None
    reward: Reward | None = None
    tools: list[Tool] = Field(default_factory=list)
    seed: int = 42


class Execution(PlanModel):
    gpus: int = Field(1, ge=1, le=64)
    # None: the deployment's default pool.
    pool: str | None = None
    save_every: int = Field(20, ge=1)
    keep_adapters: int = Field(4, ge=1)
    rollout_gpus: int = Field(0, ge=0)
    staleness_threshold: int = Field(0, ge=0)


class Source(PlanModel):
    """Where a run starts from. Without `snapshot`: a warm start from the run's final adapter.
    With `snapshot`: a branch from its weights, or with ``restore: trainingState`` a
    continuation of its full training state."""

    run: str
    snapshot: str | None = None
    restore: Literal["weights", "trainingState"] = "weights"


class RunPlan(PlanModel):
    kind: Literal["run"] = "run"
    project: str
    base_model: str
    model_name: str | None = None
    description: str | None = None
    submission_id: str | None = Field(None, max_length=128)
    source: Source | None = None
    config: RunConfig
    execution: Execution = Field(default_factory=Execution)


# --- pipelines ------------------------------------------------------------------------------------


class TrainStage(PlanModel):
    name: str
    type: Literal["train"] = "train"
    base_model: str
    model_name: str | None = None
    description: str | None = None
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


class PipelinePlan(PlanModel):
    kind: Literal["pipeline"]
    project: str
    name: str | None = None
    description: str | None = None
    submission_id: str | None = Field(None, max_length=128)
    stages: list[TrainStage] = Field(min_length=1)
