"""Every metric, span and attribute the trainer and its training jobs publish.

This module is the only place a telemetry name is spelled. The service, the jobs, the dashboard
generator and the generated reference (``docs/observability.md``) all read it, so a name that is
not here cannot be published (`metric()` raises `KeyError`).

Rules the entries follow:
- Every metric and span name starts with ``akka.optimize.training.``, and so does every
  attribute of ours, except the front door's metrics (`GENAI_METRICS`): they keep the names
  OpenTelemetry's GenAI semantic conventions give them. Attributes the OpenTelemetry semantic conventions already name
  (``k8s.pod.name``, ``gen_ai.token.type``, ...) keep the convention's name
  (`ECOSYSTEM_ATTRIBUTES`), so dashboards and collectors built for the ecosystem read them.
- Units are UCUM (``s``, ``By``, ``W``, ``Cel``, ``Hz``, ``1`` for a ratio or a plain number,
  ``{token}`` for a count of tokens). A ratio is a fraction from 0 to 1, never a percentage; a
  point in time is a gauge named ``.timestamp`` in seconds since the Unix epoch (Prometheus
  ``_timestamp_seconds``).
- Service metrics carry the project on their data points and never the run. Job metrics carry
  the run, the attempt and the project (and pipeline, stage, pod, node, namespace) as resource
  attributes, listed in `JOB_RESOURCE_ATTRIBUTES`; their data point attributes are listed per
  metric.
- A counter is published at 0 for each attribute set known in advance (a job's reward terms
  and causes, a GPU's XID codes of note, the service's projects and failure reasons), so that
  Prometheus's ``increase()`` sees its first increment: a series that appears with its first
  value has no earlier sample to increase from.
- A histogram always has explicit bucket boundaries: the SDK's defaults are shaped for
  milliseconds.
- A gauge has the unit ``1`` only when it is a ratio whose name ends in ``.ratio``. Python's
  Prometheus exporter adds nothing for ``1``, while the collector's translator (and Prometheus's
  own OTLP receiver) appends ``_ratio`` to such a gauge; with the name already ending in
  ``ratio`` both give the same Prometheus name. Other plain numbers carry an annotation unit
  (``{loss}``, ``{reward}``, ``{state}``), which both translators leave out of the name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from akka_training.core.failures import FailureReason
from akka_training.core.phases import Phase
from akka_training.core.states import TaskState

PREFIX = "akka.optimize.training."


class Instrument(StrEnum):
    COUNTER = "counter"
    UP_DOWN = "up-down"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Publisher(StrEnum):
    SERVICE = "service"
    JOB = "job"
    # An evaluation's job (a task, not a run's attempt: its resource names the evaluation).
    EVALUATION = "evaluation"


AttributeType = Literal["string", "int", "double", "bool"]


@dataclass(frozen=True)
class AttributeSpec:
    name: str
    type: AttributeType
    description: str
    # The closed set of values, where there is one (empty: any value of the type).
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class MetricSpec:
    name: str
    instrument: Instrument
    unit: str
    description: str
    publisher: Publisher
    # Data point attribute names (resource attributes are not repeated here).
    attributes: tuple[str, ...] = ()
    # Explicit bucket boundaries; set for every histogram and only for histograms.
    boundaries: tuple[float, ...] = ()


@dataclass(frozen=True)
class SpanSpec:
    name: str
    publisher: Publisher
    description: str
    attributes: tuple[str, ...] = ()


def metric(name: str) -> MetricSpec:
    """The catalog entry of a metric; `KeyError` for a name the catalog does not hold."""
    return _METRICS_BY_NAME[name]


def attribute(name: str) -> AttributeSpec:
    return _ATTRIBUTES_BY_NAME[name]


def span(name: str) -> SpanSpec:
    return _SPANS_BY_NAME[name]


def metrics_of(publisher: Publisher) -> tuple[MetricSpec, ...]:
    return tuple(m for m in METRICS if m.publisher is publisher)


def prometheus_name(spec: MetricSpec) -> str:
    """The metric family name Prometheus shows for `spec`, as OpenTelemetry's Prometheus
    exporter (0.66b2, with prometheus_client) writes it.

    Dots become underscores; the unit is mapped (``s`` -> ``seconds``, ``By`` -> ``bytes``,
    ``W`` -> ``watts``, ``Cel`` -> ``celsius``, ``%`` -> ``percent``; annotations such as
    ``{token}`` and the unit ``1`` add nothing; ``X/s`` -> ``X_per_second``) and appended unless
    the name already ends with it; counters end in ``_total``. An up-down counter is a gauge
    there, so it gets no ``_total``. A histogram's series add ``_bucket``, ``_sum`` and
    ``_count`` to this name (see `prometheus_series`).
    """
    name = _SANITIZE.sub("_", spec.name)
    counter = spec.instrument is Instrument.COUNTER
    if counter and name.endswith("_total"):
        name = name[: -len("_total")]
    unit = _prometheus_unit(spec.unit)
    if unit and not name.endswith("_" + unit):
        name = f"{name}_{unit}"
    return f"{name}_total" if counter else name


def prometheus_series(spec: MetricSpec) -> tuple[str, ...]:
    """Every series name the metric shows in Prometheus."""
    base = prometheus_name(spec)
    if spec.instrument is Instrument.HISTOGRAM:
        return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
    return (base,)


def prometheus_label(attribute_name: str) -> str:
    """The Prometheus label an attribute becomes (dots and dashes -> underscores)."""
    return _SANITIZE_LABEL.sub("_", attribute_name)


# --- attributes ----------------------------------------------------------------------------------

_P = PREFIX
PROJECT = _P + "project"
RUN_ID = _P + "run.id"
RUN_ATTEMPT = _P + "run.attempt"
RUN_METHOD = _P + "run.method"
RUN_ENGINE = _P + "run.engine"
RUN_PHASE = _P + "run.phase"
PIPELINE_ID = _P + "pipeline.id"
PIPELINE_STAGE = _P + "pipeline.stage"
POD = _P + "pod"
NODE = _P + "node"
POOL_NAME = _P + "pool.name"
POOL_ACCELERATOR = _P + "pool.accelerator"
CLAIM_STATE = _P + "claim.state"
FAILURE_REASON = _P + "failure.reason"
STEP_PHASE = _P + "step.phase"
STEP = _P + "step.number"
SNAPSHOT = _P + "snapshot"
DATASET = _P + "dataset"
EVALUATION_ID = _P + "evaluation.id"
EVALUATION_STATE = _P + "evaluation.state"
EVALUATION_METRIC = _P + "evaluation.metric"
EVALUATION_PHASE = _P + "evaluation.phase"
REWARD_TERM = _P + "reward.term"
REWARD_FAILURE_CAUSE = _P + "reward.failure.cause"
# OpenTelemetry semantic-convention names (see `ECOSYSTEM_ATTRIBUTES`).
K8S_POD = "k8s.pod.name"
K8S_NODE = "k8s.node.name"
K8S_NAMESPACE = "k8s.namespace.name"
TOKEN_TYPE = "gen_ai.token.type"
GENAI_OPERATION = "gen_ai.operation.name"
GENAI_PROVIDER = "gen_ai.provider.name"
GENAI_REQUEST_MODEL = "gen_ai.request.model"
GENAI_RESPONSE_MODEL = "gen_ai.response.model"
ERROR_TYPE = "error.type"
ENDPOINT = _P + "endpoint"
MEMORY_PART = _P + "memory.part"
CLIP_BOUND = _P + "policy.clip.bound"
GPU_UUID = _P + "gpu.uuid"
GPU_INDEX = _P + "gpu.index"
GPU_THROTTLE_REASON = _P + "gpu.throttle.reason"
GPU_ECC_TYPE = _P + "gpu.ecc.type"
GPU_XID = _P + "gpu.xid"

SFT_PHASES = ("step", "evaluation", "save")
EVALUATION_PHASES = ("load", "generate", "score", "save")
RL_PHASES = ("generation", "reward", "update")
MEMORY_PARTS = (
    "weights",
    "adapter",
    "gradients",
    "optimizer",
    "activations",
    "allocator",
    "driver",
    "generation",
)
REWARD_FAILURE_CAUSES = ("timeout", "connect", "no-verdict", "http-status", "error")
TOKEN_TYPES = ("input", "output")
# The OpenAI API's operations as OpenTelemetry's GenAI conventions name them: chat/completions
# and (legacy) completions.
GENAI_OPERATIONS = ("chat", "text_completion")
# The `gen_ai.provider.name` of everything the trainer's front door serves (the conventions'
# list names hosted providers; a self-hosted server names itself).
GENAI_PROVIDER_NAME = "akka.training"
# XID codes a GPU's counter is published at 0 for (NVIDIA's list of XIDs that need attention:
# application faults, ECC and row remapping, NVLink, the GPU falling off the bus); any other
# code is counted as it arrives.
XIDS_OF_NOTE = (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120)
# Names of NVML's clock-event (throttle) reasons; `telemetry.gpu` maps each to NVML's bit.
THROTTLE_REASONS = (
    "gpu-idle",
    "applications-clocks-setting",
    "sw-power-cap",
    "hw-slowdown",
    "sync-boost",
    "sw-thermal-slowdown",
    "hw-thermal-slowdown",
    "hw-power-brake-slowdown",
    "display-clock-setting",
)

ATTRIBUTES: tuple[AttributeSpec, ...] = (
    AttributeSpec(PROJECT, "string", "The project the run, claim or quota belongs to."),
    AttributeSpec(RUN_ID, "string", "The run's id."),
    AttributeSpec(RUN_ATTEMPT, "int", "The attempt number: resume and retry start new ones."),
    AttributeSpec(
        RUN_METHOD, "string", "The run's training method.", ("sft", "dpo", "grpo", "gspo")
    ),
    AttributeSpec(RUN_ENGINE, "string", "The engine that trains the run.", ("trl", "verl")),
    AttributeSpec(RUN_PHASE, "string", "A run's phase.", tuple(p.value for p in Phase)),
    AttributeSpec(PIPELINE_ID, "string", "The pipeline a run belongs to, when it is a stage."),
    AttributeSpec(PIPELINE_STAGE, "string", "The pipeline stage the run trains."),
    AttributeSpec(POD, "string", "The Kubernetes pod of the job's process (POD_NAME/HOSTNAME)."),
    AttributeSpec(NODE, "string", "The Kubernetes node of the job's process (NODE_NAME)."),
    AttributeSpec(K8S_POD, "string", "OpenTelemetry's name for the job's pod (as `pod`)."),
    AttributeSpec(K8S_NODE, "string", "OpenTelemetry's name for the job's node (as `node`)."),
    AttributeSpec(
        K8S_NAMESPACE,
        "string",
        "The Kubernetes namespace of the job's pod (POD_NAMESPACE, else the service account's "
        "namespace file).",
    ),
    AttributeSpec(POOL_NAME, "string", "A device pool of the deployment."),
    AttributeSpec(POOL_ACCELERATOR, "string", "The accelerator a pool holds, as declared."),
    AttributeSpec(
        CLAIM_STATE,
        "string",
        "A claim's state as `training capacity` shows it in its Claims section.",
    ),
    AttributeSpec(
        FAILURE_REASON,
        "string",
        "Why a run failed (the run's `failureCode`).",
        tuple(r.value for r in FailureReason),
    ),
    AttributeSpec(
        STEP_PHASE,
        "string",
        "A phase of a training step: generation, reward, update (reinforcement); step, "
        "evaluation, save (supervised; save is the checkpoint save).",
        RL_PHASES + SFT_PHASES,
    ),
    AttributeSpec(STEP, "int", "A training step (optimizer update) number."),
    AttributeSpec(SNAPSHOT, "string", "A snapshot's name."),
    AttributeSpec(DATASET, "string", "A dataset reference, `PROJECT/NAME:vN`."),
    AttributeSpec(EVALUATION_ID, "string", "An evaluation's id."),
    AttributeSpec(
        EVALUATION_STATE, "string", "An evaluation's state.", tuple(s.value for s in TaskState)
    ),
    AttributeSpec(
        EVALUATION_METRIC, "string", "A metric of an evaluation's plan, by the name it declares."
    ),
    AttributeSpec(
        EVALUATION_PHASE,
        "string",
        "A part of an evaluation's job: load (the base model and the adapter), generate (every "
        "sample, and the expected answers' loss), score (the reward terms), save (the scored "
        "samples).",
        EVALUATION_PHASES,
    ),
    AttributeSpec(REWARD_TERM, "string", "A reward term's name, as the plan declares it."),
    AttributeSpec(
        REWARD_FAILURE_CAUSE,
        "string",
        "Why a reward term could not score a rollout: timeout, connect (refused or unreachable), "
        "no-verdict (a reply without a score), http-status (an error status), error (anything "
        "else, such as an exception in rule code).",
        REWARD_FAILURE_CAUSES,
    ),
    AttributeSpec(
        TOKEN_TYPE,
        "string",
        "Which side of a judge call tokens count: input (the prompt) or output (the reply), "
        "as OpenTelemetry's GenAI conventions name them.",
        TOKEN_TYPES,
    ),
    AttributeSpec(
        GENAI_OPERATION,
        "string",
        "The OpenAI API operation a front-door request made: chat (`chat/completions`) or "
        "text_completion (`completions`), as OpenTelemetry's GenAI conventions name them.",
        GENAI_OPERATIONS,
    ),
    AttributeSpec(
        GENAI_PROVIDER,
        "string",
        f"Who serves the model: always `{GENAI_PROVIDER_NAME}` (OpenTelemetry's GenAI "
        "conventions require it).",
        (GENAI_PROVIDER_NAME,),
    ),
    AttributeSpec(
        GENAI_REQUEST_MODEL,
        "string",
        "The `model` a front-door request named: a base model, a run, a run's modelName or "
        "RUN:step-N.",
    ),
    AttributeSpec(
        GENAI_RESPONSE_MODEL,
        "string",
        "The `model` the endpoint's answer named (absent when no answer came).",
    ),
    AttributeSpec(
        ERROR_TYPE,
        "string",
        "Why a front-door request failed, only on failed ones: the HTTP status the caller got "
        "(`503` while the endpoint starts or does not answer, `400`, `404` from the endpoint), "
        "or `cancelled` when the caller went away mid-answer, or the error's class name.",
    ),
    AttributeSpec(ENDPOINT, "string", "An endpoint's name (`endpoints list`), in its project."),
    AttributeSpec(MEMORY_PART, "string", "A part of a step's device-memory peak.", MEMORY_PARTS),
    AttributeSpec(CLIP_BOUND, "string", "A policy-ratio clipping bound.", ("low", "high")),
    AttributeSpec(GPU_UUID, "string", "The GPU's UUID as NVML and DCGM (label UUID) report it."),
    AttributeSpec(GPU_INDEX, "int", "The GPU's NVML index on its node (DCGM's label gpu)."),
    AttributeSpec(
        GPU_THROTTLE_REASON,
        "string",
        "An NVML clock-event (throttle) reason; see 'Reading throttle reasons'.",
        THROTTLE_REASONS,
    ),
    AttributeSpec(
        GPU_ECC_TYPE, "string", "Whether ECC corrected the error.", ("corrected", "uncorrected")
    ),
    AttributeSpec(GPU_XID, "int", "The XID code the driver reported."),
)

# Resource attributes of every job process, in the order the reference lists them.
JOB_RESOURCE_ATTRIBUTES: tuple[str, ...] = (
    RUN_ID,
    RUN_ATTEMPT,
    PROJECT,
    RUN_METHOD,
    RUN_ENGINE,
    PIPELINE_ID,
    PIPELINE_STAGE,
    POD,
    NODE,
    K8S_POD,
    K8S_NODE,
    K8S_NAMESPACE,
)
# Resource attributes of an evaluation's job: the evaluation and its project always, the run
# whose adapter it scores (none for a base model) and where it runs where known.
EVALUATION_RESOURCE_ATTRIBUTES: tuple[str, ...] = (
    EVALUATION_ID,
    PROJECT,
    RUN_ID,
    POD,
    NODE,
    K8S_POD,
    K8S_NODE,
    K8S_NAMESPACE,
)
EVALUATION_REQUIRED_RESOURCE_ATTRIBUTES: tuple[str, ...] = (EVALUATION_ID, PROJECT)
# Names outside the prefix: the OpenTelemetry semantic conventions' own.
ECOSYSTEM_ATTRIBUTES: tuple[str, ...] = (
    K8S_POD,
    K8S_NODE,
    K8S_NAMESPACE,
    TOKEN_TYPE,
    GENAI_OPERATION,
    GENAI_PROVIDER,
    GENAI_REQUEST_MODEL,
    GENAI_RESPONSE_MODEL,
    ERROR_TYPE,
)
# The ones a job cannot publish without.
JOB_REQUIRED_RESOURCE_ATTRIBUTES: tuple[str, ...] = (RUN_ID, RUN_ATTEMPT, PROJECT)

# --- histogram boundaries -------------------------------------------------------------------------

# A step phase lasts from a tenth of a second (a tiny model) to many minutes (generation on a
# large one).
STEP_TIMING_BOUNDARIES = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0,
)  # fmt: skip
# A rule or regex scores in microseconds, a judge in seconds; its timeout bounds the tail.
TERM_TIMING_BOUNDARIES = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# Rewards and term shares mostly lie in [0, 1] (0 and 1 exactly are common: a bucket ends at
# each); weights push them above, and a penalty term (a negative weight, a length penalty)
# below 0, down to a few times its weight.
REWARD_BOUNDARIES = (
    -5.0, -3.0, -2.0, -1.5, -1.0, -0.75, -0.5, -0.25, -0.1, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6,
    0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0,
)  # fmt: skip
# A completion can end after a token or two (an early end-of-sequence, a bare label).
COMPLETION_LENGTH_BOUNDARIES = (
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1536.0,
    2048.0, 3072.0, 4096.0, 6144.0, 8192.0, 12288.0, 16384.0, 32768.0,
)  # fmt: skip

# OpenTelemetry's GenAI conventions recommend these boundaries for their histograms.
GENAI_DURATION_BOUNDARIES = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TTFT_BOUNDARIES = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
GENAI_TPOT_BOUNDARIES = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip
GENAI_TOKEN_BOUNDARIES = (
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
    4194304.0, 16777216.0, 67108864.0,
)  # fmt: skip

# --- metrics --------------------------------------------------------------------------------------

_C, _U, _G, _H = Instrument.COUNTER, Instrument.UP_DOWN, Instrument.GAUGE, Instrument.HISTOGRAM
_SVC, _JOB, _EVAL = Publisher.SERVICE, Publisher.JOB, Publisher.EVALUATION
_POOL = (POOL_NAME, POOL_ACCELERATOR)
_GPU = (GPU_UUID, GPU_INDEX)


def _m(
    short: str,
    instrument: Instrument,
    unit: str,
    publisher: Publisher,
    description: str,
    attributes: tuple[str, ...] = (),
    boundaries: tuple[float, ...] = (),
) -> MetricSpec:
    return MetricSpec(_P + short, instrument, unit, description, publisher, attributes, boundaries)


_SERVICE_METRICS = (
    _m("pool.devices.declared", _G, "{device}", _SVC, "Devices the pool declares.", _POOL),
    _m(
        "pool.devices.observed",
        _G,
        "{device}",
        _SVC,
        "Devices of the pool the cluster backend observes.",
        _POOL,
    ),
    _m("pool.devices.claimed", _G, "{device}", _SVC, "Devices granted to claims.", _POOL),
    _m(
        "pool.claims",
        _G,
        "{claim}",
        _SVC,
        "Claims on the pool by state (a queued claim waits for devices).",
        (*_POOL, CLAIM_STATE),
    ),
    _m("project.devices.claimed", _G, "{device}", _SVC, "Devices the project holds.", (PROJECT,)),
    _m(
        "project.devices.quota",
        _G,
        "{device}",
        _SVC,
        "Devices the project may hold (absent for a project without a quota).",
        (PROJECT,),
    ),
    _m("runs", _G, "{run}", _SVC, "Runs by project and phase.", (PROJECT, RUN_PHASE)),
    _m(
        "evaluations",
        _G,
        "{evaluation}",
        _SVC,
        "Evaluations by project and state.",
        (PROJECT, EVALUATION_STATE),
    ),
    _m(
        "run.failures",
        _C,
        "{run}",
        _SVC,
        "Runs that failed, by reason.",
        (PROJECT, FAILURE_REASON),
    ),
)

_STEP_METRICS = (
    _m("sft.step.count", _C, "{step}", _JOB, "Completed supervised steps: +1 per step."),
    _m("rl.step.count", _C, "{step}", _JOB, "Completed reinforcement steps: +1 per step."),
    _m(
        "step.latest",
        _G,
        "{step}",
        _JOB,
        "The latest completed step. Like every step gauge it keeps its value when steps stop.",
    ),
    _m(
        "sft.step.timing",
        _H,
        "s",
        _JOB,
        "Duration of a supervised step's phases: the step, an evaluation, a checkpoint save.",
        (STEP_PHASE,),
        STEP_TIMING_BOUNDARIES,
    ),
    _m(
        "rl.step.timing",
        _H,
        "s",
        _JOB,
        "Duration of a reinforcement step's phases: generation, reward scoring, policy update.",
        (STEP_PHASE,),
        STEP_TIMING_BOUNDARIES,
    ),
    _m("sft.loss", _G, "{loss}", _JOB, "Training loss of the latest step."),
    _m(
        "sft.eval.loss",
        _G,
        "{loss}",
        _JOB,
        "Loss on the evaluation dataset at the latest evaluation.",
    ),
    _m("sft.learning_rate", _G, "{lr}", _JOB, "Learning rate of the latest step."),
    _m("sft.grad_norm", _G, "{norm}", _JOB, "Gradient norm of the latest step (before clipping)."),
    _m(
        "dpo.rewards.chosen",
        _G,
        "{reward}",
        _JOB,
        "dpo: mean implicit reward of the chosen answers at the latest step (beta x the "
        "policy's log-probability ratio over the reference's; 0 at the first step).",
    ),
    _m(
        "dpo.rewards.rejected",
        _G,
        "{reward}",
        _JOB,
        "dpo: mean implicit reward of the rejected answers at the latest step.",
    ),
    _m(
        "dpo.rewards.margin",
        _G,
        "{reward}",
        _JOB,
        "dpo: mean margin of the chosen answer's reward over the rejected one's.",
    ),
    _m(
        "dpo.rewards.accuracy.ratio",
        _G,
        "1",
        _JOB,
        "dpo: share of the latest step's pairs whose chosen answer has the higher reward.",
    ),
    _m(
        "dpo.logps.chosen",
        _G,
        "{logprob}",
        _JOB,
        "dpo: the policy's mean summed log-probability of the chosen answers.",
    ),
    _m(
        "dpo.logps.rejected",
        _G,
        "{logprob}",
        _JOB,
        "dpo: the policy's mean summed log-probability of the rejected answers.",
    ),
    _m("step.tokens", _G, "{token}", _JOB, "Tokens processed by the latest step."),
    _m("step.throughput", _G, "{token}/s", _JOB, "Tokens per second of the latest step."),
    _m(
        "step.mfu.ratio",
        _G,
        "1",
        _JOB,
        "Model FLOPs utilisation of the latest step (of the policy update, for reinforcement).",
    ),
)

_MEMORY_AND_DATA_METRICS = (
    _m(
        "memory.peak",
        _G,
        "By",
        _JOB,
        "The latest step's device-memory peak, split into parts (generation only on TRL "
        "reinforcement runs). Published only by a job that uses one device.",
        (MEMORY_PART,),
    ),
    _m(
        "memory.allocated.peak",
        _G,
        "By",
        _JOB,
        "Device memory allocated at the latest step's peak (the sum of the parts up to "
        "activations).",
    ),
    _m("memory.reserved", _G, "By", _JOB, "Device memory the allocator reserved at the peak."),
    _m("memory.host.peak", _G, "By", _JOB, "Host memory peak of the latest step (VmHWM)."),
    _m("data.rows.truncated", _G, "{row}", _JOB, "Rows truncated at maxSeqLength."),
    _m("data.answers.truncated", _G, "{row}", _JOB, "Rows whose answer maxSeqLength cut."),
    _m("data.rows.dropped", _G, "{row}", _JOB, "Rows dropped before training."),
    _m("data.padding.ratio", _G, "1", _JOB, "Share of padding tokens in the latest batch."),
)

_RL_STEP_METRICS = (
    _m("rl.reward.mean", _G, "{reward}", _JOB, "Mean reward of the latest step's rollouts."),
    _m("rl.reward.std", _G, "{reward}", _JOB, "Standard deviation of the latest step's rewards."),
    _m("rl.reward.min", _G, "{reward}", _JOB, "Lowest reward of the latest step's rollouts."),
    _m("rl.reward.max", _G, "{reward}", _JOB, "Highest reward of the latest step's rollouts."),
    _m(
        "rl.reward.zero_std.ratio",
        _G,
        "1",
        _JOB,
        "Share of the latest step's prompt groups whose rollouts all scored the same: GRPO "
        "learns nothing from them.",
    ),
    _m("rl.reward.zero.ratio", _G, "1", _JOB, "Share of the latest step's rollouts scoring 0."),
    _m(
        "rl.reward.full.ratio",
        _G,
        "1",
        _JOB,
        "Share of the latest step's rollouts scoring the full positive weight of the terms.",
    ),
    _m(
        "rl.term.share.mean",
        _G,
        "{reward}",
        _JOB,
        "Mean weighted share of a reward term in the latest step's rewards.",
        (REWARD_TERM,),
    ),
    _m(
        "rl.term.share.std",
        _G,
        "{reward}",
        _JOB,
        "Spread (standard deviation) of a reward term's share across the step's completions.",
        (REWARD_TERM,),
    ),
    _m("rl.completion.length.min", _G, "{token}", _JOB, "Shortest completion of the step."),
    _m("rl.completion.length.max", _G, "{token}", _JOB, "Longest completion of the step."),
    _m("rl.completion.length.mean", _G, "{token}", _JOB, "Mean completion length of the step."),
    _m(
        "rl.completion.terminated.length.mean",
        _G,
        "{token}",
        _JOB,
        "Mean length of the completions that ended before maxCompletionTokens.",
    ),
    _m(
        "rl.completion.truncated.ratio",
        _G,
        "1",
        _JOB,
        "Share of the step's completions cut at maxCompletionTokens.",
    ),
    _m(
        "rl.policy.clipped.ratio",
        _G,
        "1",
        _JOB,
        "Share of tokens whose policy ratio was clipped at the low or the high bound.",
        (CLIP_BOUND,),
    ),
    _m("rl.tool.calls", _G, "{call}", _JOB, "Tool calls per completion (runs with tools)."),
    _m("rl.tool.failure.ratio", _G, "1", _JOB, "Share of tool calls that failed."),
    _m("rl.kl", _G, "{nat}", _JOB, "KL divergence from the reference policy (klBeta above 0)."),
    _m(
        "rl.entropy",
        _G,
        "{nat}",
        _JOB,
        "Mean token entropy of the policy on the step's completions.",
    ),
    _m(
        "rl.health.completions.distinct.group.ratio",
        _G,
        "1",
        _JOB,
        "Mean share of distinct completions within a prompt group of the step (health).",
    ),
    _m(
        "rl.health.completions.distinct.step.ratio",
        _G,
        "1",
        _JOB,
        "Share of distinct completions among the step's rollouts (health).",
    ),
    _m(
        "rl.health.answers.distinct.group.ratio",
        _G,
        "1",
        _JOB,
        "Mean share of distinct final answers within a prompt group of the step (health).",
    ),
    _m(
        "rl.health.answers.distinct.step.ratio",
        _G,
        "1",
        _JOB,
        "Share of distinct final answers among the step's rollouts: the answer-collapse monitor.",
    ),
    _m(
        "rl.health.length.drift.ratio",
        _G,
        "1",
        _JOB,
        "Mean completion length over that of the job's first steps: the length-drift monitor.",
    ),
    _m(
        "rl.health.term.failure.ratio",
        _G,
        "1",
        _JOB,
        "Share of the step's rollouts a judge or http term could not score.",
        (REWARD_TERM,),
    ),
    _m(
        "rl.health.term.latency.p95",
        _G,
        "s",
        _JOB,
        "95th percentile of the seconds a judge or http term took per rollout in the step.",
        (REWARD_TERM,),
    ),
    _m(
        "rl.health.judge.failure.ratio",
        _G,
        "1",
        _JOB,
        "The largest failure share of the judge and http terms: the judge-failures monitor.",
    ),
    _m(
        "rl.health.judge.latency.p95",
        _G,
        "s",
        _JOB,
        "The slowest judge or http term's 95th percentile latency: the judge-latency monitor.",
    ),
    _m(
        "rl.health.reward.rise",
        _G,
        "{reward}",
        _JOB,
        "Mean reward of the latest steps minus that of the job's first steps.",
    ),
    _m(
        "rl.health.term.rise",
        _G,
        "{reward}",
        _JOB,
        "The same rise for the correctness term's share (reward hacking).",
    ),
    _m(
        "rl.health.hacking.gap",
        _G,
        "{reward}",
        _JOB,
        "Reward rise minus the correctness term's rise: the reward-hacking monitor.",
    ),
    _m("rl.policy.loss", _G, "{loss}", _JOB, "Policy-gradient loss of the latest update (verl)."),
    _m("rl.learning_rate", _G, "{lr}", _JOB, "Learning rate of the latest step."),
    _m("rl.grad_norm", _G, "{norm}", _JOB, "Gradient norm of the latest update."),
)

_REWARD_METRICS = (
    _m(
        "reward.term.timing",
        _H,
        "s",
        _JOB,
        "Time a reward term took to score one rollout.",
        (REWARD_TERM,),
        TERM_TIMING_BOUNDARIES,
    ),
    _m(
        "reward.term.failures",
        _C,
        "{failure}",
        _JOB,
        "Rollouts a reward term could not score (they score 0 for the term), by cause.",
        (REWARD_TERM, REWARD_FAILURE_CAUSE),
    ),
    _m(
        "reward.term.retries",
        _C,
        "{retry}",
        _JOB,
        "Tries a remote reward term (judge, http) made again after its endpoint answered 429 "
        "or 5xx, within the term's timeoutSeconds (a rollout still scores 0 for the term, "
        "cause http-status, once that budget is spent).",
        (REWARD_TERM,),
    ),
    _m(
        "reward.judge.tokens",
        _C,
        "{token}",
        _JOB,
        "Tokens a judge term's model used, input (prompt) and output (reply).",
        (REWARD_TERM, TOKEN_TYPE),
    ),
    _m(
        "rl.rollout.reward",
        _H,
        "{reward}",
        _JOB,
        "Reward of each rollout.",
        (),
        REWARD_BOUNDARIES,
    ),
    _m(
        "rl.rollout.term.share",
        _H,
        "{reward}",
        _JOB,
        "Each reward term's weighted share of each rollout's reward.",
        (REWARD_TERM,),
        REWARD_BOUNDARIES,
    ),
    _m(
        "rl.rollout.completion.length",
        _H,
        "{token}",
        _JOB,
        "Length of each completion.",
        (),
        COMPLETION_LENGTH_BOUNDARIES,
    ),
)

_GPU_METRICS = (
    _m(
        "gpu.placement",
        _G,
        "{gpu}",
        _JOB,
        "1 for each GPU the job's process uses: joins cluster GPU metrics (DCGM) to the run.",
        (*_GPU, POD, NODE),
    ),
    _m("gpu.power", _G, "W", _JOB, "Power draw.", _GPU),
    _m("gpu.temperature", _G, "Cel", _JOB, "GPU core temperature.", _GPU),
    _m(
        "gpu.utilization.ratio",
        _G,
        "1",
        _JOB,
        "Share of the sample period a kernel ran, 0 to 1 (NVML utilisation).",
        _GPU,
    ),
    _m("gpu.memory.used", _G, "By", _JOB, "Device memory in use (all processes).", _GPU),
    _m("gpu.clock.sm", _G, "Hz", _JOB, "SM clock frequency.", _GPU),
    _m("gpu.clock.memory", _G, "Hz", _JOB, "Memory clock frequency.", _GPU),
    _m(
        "gpu.throttle",
        _G,
        "{state}",
        _JOB,
        "1 while the clock-event (throttle) reason is active, 0 otherwise.",
        (*_GPU, GPU_THROTTLE_REASON),
    ),
    _m(
        "gpu.ecc.errors",
        _C,
        "{error}",
        _JOB,
        "ECC memory errors since the driver loaded (NVML's volatile count).",
        (*_GPU, GPU_ECC_TYPE),
    ),
    _m(
        "gpu.xid.errors",
        _C,
        "{error}",
        _JOB,
        "XID errors the driver reported for the GPU while the job ran, by XID code (published "
        "at 0 for the XIDs of note from the job's start).",
        (*_GPU, GPU_XID),
    ),
)

_JOB_STATE_METRICS = (
    _m(
        "job.heartbeat.timestamp",
        _G,
        "s",
        _JOB,
        "Unix time (seconds) of the job's latest export: it advances while the process lives, "
        "even when steps stop.",
    ),
    _m(
        "job.phase",
        _G,
        "{state}",
        _JOB,
        "1 for the phase the job is in (PREPARING, TRAINING, PAUSING once a pause asked it to "
        "save and stop), 0 for the others; every phase is 0 in the job's last export.",
        (RUN_PHASE,),
    ),
    _m(
        "job.stalled",
        _G,
        "{state}",
        _JOB,
        "1 when the job's watchdog saw no step complete within its stall limit, else 0.",
    ),
)

# The front door's requests (`/openai/v1`), under OpenTelemetry's GenAI semantic conventions'
# own names: dashboards and collectors built for the ecosystem read them as they are.
_GENAI = (GENAI_OPERATION, GENAI_PROVIDER, GENAI_REQUEST_MODEL, GENAI_RESPONSE_MODEL)
_SERVED = (PROJECT, ENDPOINT)
GENAI_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "gen_ai.server.request.duration",
        _H,
        "s",
        "Time a front-door request took, from its arrival to the last byte of the answer; "
        "failed ones carry error.type.",
        _SVC,
        (*_GENAI, ERROR_TYPE, *_SERVED),
        GENAI_DURATION_BOUNDARIES,
    ),
    MetricSpec(
        "gen_ai.server.time_to_first_token",
        _H,
        "s",
        "Time from a streamed request's arrival to the first chunk carrying generated text "
        "(successful streams).",
        _SVC,
        (*_GENAI, *_SERVED),
        GENAI_TTFT_BOUNDARIES,
    ),
    MetricSpec(
        "gen_ai.server.time_per_output_token",
        _H,
        "s",
        "Time per output token after the first, of a successful stream: (end - first token) "
        "/ (output tokens - 1), for streams of two tokens or more.",
        _SVC,
        (*_GENAI, *_SERVED),
        GENAI_TPOT_BOUNDARIES,
    ),
    MetricSpec(
        "gen_ai.client.token.usage",
        _H,
        "{token}",
        "Tokens of each answered request, input (the prompt) and output (the completions), "
        "as the answer's usage counts them. The conventions define token usage for a client "
        "only: the front door is its endpoint's client.",
        _SVC,
        (*_GENAI, TOKEN_TYPE, *_SERVED),
        GENAI_TOKEN_BOUNDARIES,
    ),
)
GENAI_METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in GENAI_METRICS)

_EVALUATION_METRICS = (
    _m(
        "evaluation.metric.mean",
        _G,
        "{score}",
        _EVAL,
        "A metric's mean over the evaluated set (samples; prompts for loss and pass@k), set "
        "when the evaluation's job has scored every sample.",
        (EVALUATION_METRIC,),
    ),
    _m(
        "evaluation.metric.low",
        _G,
        "{score}",
        _EVAL,
        "The lower bound of the metric's 95% interval (as `evaluations results` shows it).",
        (EVALUATION_METRIC,),
    ),
    _m(
        "evaluation.metric.high",
        _G,
        "{score}",
        _EVAL,
        "The upper bound of the metric's 95% interval.",
        (EVALUATION_METRIC,),
    ),
    _m(
        "evaluation.samples",
        _C,
        "{sample}",
        _EVAL,
        "Samples generated, counted as the job goes (published at 0 when it starts).",
    ),
    _m(
        "evaluation.samples.scored",
        _C,
        "{sample}",
        _EVAL,
        "Samples scored by the reward terms, counted as the job goes (published at 0).",
    ),
    _m(
        "evaluation.phase.duration",
        _H,
        "s",
        _EVAL,
        "Duration of a part of the evaluation's job: load, generate, score, save.",
        (EVALUATION_PHASE,),
        STEP_TIMING_BOUNDARIES,
    ),
    _m(
        "evaluation.completion.length",
        _H,
        "{token}",
        _EVAL,
        "Completion lengths of the generated samples, in tokens.",
        (),
        COMPLETION_LENGTH_BOUNDARIES,
    ),
)

METRICS: tuple[MetricSpec, ...] = (
    _SERVICE_METRICS
    + GENAI_METRICS
    + _STEP_METRICS
    + _MEMORY_AND_DATA_METRICS
    + _RL_STEP_METRICS
    + _REWARD_METRICS
    + _GPU_METRICS
    + _JOB_STATE_METRICS
    + _EVALUATION_METRICS
)

# --- spans ----------------------------------------------------------------------------------------

_RUN = (PROJECT, RUN_ID)
SPANS: tuple[SpanSpec, ...] = (
    SpanSpec(_P + "run.submit", _SVC, "The service validates, resolves and stores a run.", _RUN),
    SpanSpec(
        _P + "run.admit",
        _SVC,
        "The service grants a queued run its devices in a pool.",
        (*_RUN, RUN_ATTEMPT, POOL_NAME),
    ),
    SpanSpec(
        _P + "job.launch",
        _SVC,
        "The service starts an attempt's job on the cluster backend. Its context travels to the "
        "job as `traceparent`, so the job's spans join this trace.",
        (*_RUN, RUN_ATTEMPT),
    ),
    SpanSpec(
        _P + "dataset.register",
        _SVC,
        "The service streams and registers a dataset (its own trace: no run yet).",
        (PROJECT, DATASET),
    ),
    SpanSpec(
        _P + "evaluation.submit",
        _SVC,
        "The service checks, resolves and stores an evaluation (its own trace).",
        (PROJECT, EVALUATION_ID, DATASET),
    ),
    SpanSpec(_P + "job", _JOB, "A job process, from start to exit.", (*_RUN, RUN_ATTEMPT)),
    SpanSpec(_P + "job.prepare", _JOB, "The job loads the model and tokenises the data."),
    SpanSpec(_P + "job.step", _JOB, "One training step.", (STEP,)),
    SpanSpec(
        _P + "job.evaluation",
        _JOB,
        "One evaluation on the evaluation dataset (supervised), a child of its step.",
        (STEP,),
    ),
    SpanSpec(_P + "job.snapshot.save", _JOB, "The job saves a snapshot.", (STEP, SNAPSHOT)),
    SpanSpec(
        _P + "rl.generation",
        _JOB,
        "A reinforcement step generates rollouts (a child of its step).",
        (STEP,),
    ),
    SpanSpec(
        _P + "rl.reward",
        _JOB,
        "A reinforcement step scores its rollouts (a child of its step).",
        (STEP,),
    ),
    SpanSpec(
        _P + "rl.update",
        _JOB,
        "A reinforcement step updates the policy (a child of its step).",
        (STEP,),
    ),
    SpanSpec(
        _P + "evaluation",
        _EVAL,
        "An evaluation's job, from reading its dataset to its result: a child of the "
        "evaluation's `evaluation.submit`, so that the submission and the job share a trace.",
        (PROJECT, EVALUATION_ID),
    ),
    SpanSpec(
        _P + "evaluation.load",
        _EVAL,
        "The evaluation's job loads the base model and the adapter (a child of `evaluation`).",
    ),
    SpanSpec(
        _P + "evaluation.generate",
        _EVAL,
        "The model generates every sample and, for a loss metric, measures the expected "
        "answers (a child of `evaluation`).",
    ),
    SpanSpec(
        _P + "evaluation.score",
        _EVAL,
        "The plan's reward terms score every sample (a child of `evaluation`).",
    ),
    SpanSpec(
        _P + "evaluation.save",
        _EVAL,
        "The job writes the scored samples to the blob store (a child of `evaluation`).",
    ),
)

# --- internals ------------------------------------------------------------------------------------

_SANITIZE = re.compile(r"[^a-zA-Z0-9:]+")
_SANITIZE_LABEL = re.compile(r"[^a-zA-Z0-9]+")
_ANNOTATION = re.compile(r"{.*}")
_UNITS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "By": "bytes",
    "W": "watts",
    "J": "joules",
    "Cel": "celsius",
    "Hz": "hertz",
    "%": "percent",
    "1": "",
}
_PER_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}


def _prometheus_unit(unit: str) -> str:
    unit = _ANNOTATION.sub("", unit)
    if unit in _UNITS:
        return _UNITS[unit]
    top, slash, bottom = unit.partition("/")
    if slash and bottom:
        top = _UNITS.get(top, _SANITIZE.sub("_", top))
        bottom = _PER_UNITS.get(bottom, _SANITIZE.sub("_", bottom))
        return f"{top}_per_{bottom}" if top else f"per_{bottom}"
    return _SANITIZE.sub("_", unit).strip("_")


_METRICS_BY_NAME = {m.name: m for m in METRICS}
_ATTRIBUTES_BY_NAME = {a.name: a for a in ATTRIBUTES}
_SPANS_BY_NAME = {s.name: s for s in SPANS}
