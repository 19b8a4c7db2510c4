from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from akka_training.core.phases import Phase
from akka_training.core.reports import Gpu
from akka_training.telemetry import catalog as c
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import job_resource
from akka_training.testing.otlp_receiver import OtlpReceiver

P = c.PREFIX

RL_STEP = {
    "reward/mean": 0.625,
    "reward/std": 0.25,
    "terms/correct/share_mean": 0.5,
    "terms/format/share_mean": 0.125,
    "terms/format/share_std": 0.05,
    "completions/min_length": 12,
    "completions/max_length": 64,
    "timing/generation": 2.0,
    "timing/reward": 0.3,
    "timing/update": 1.2,
    "tokens": 4096,
    "tokens_per_second": 1170.0,
    "mfu": 0.31,
    "memory/weights": 2.0e9,
    "memory/generation": 1.5e9,
    "kl": 0.01,
    "policy_loss": -0.02,
    "groups/frac_zero_std": 0.25,
    "frac_reward_zero_std": 0.25,  # not routed: kept in the files only
}


def test_job_metrics_carry_run_attempt_and_project_as_resource_attributes(
    job: JobTelemetry, receiver: OtlpReceiver
) -> None:
    job.training("rl")
    job.step("rl", 1, RL_STEP)
    assert job.flush()

    count = receiver.wait_for_metric(P + "rl.step.count")
    assert (count.kind, count.monotonic, count.unit) == ("sum", True, "{step}")
    assert count.points[0].value == 1
    assert count.points[0].attributes == {}
    for record in receiver.metrics():
        assert record.resource[c.RUN_ID] == "run-1"
        assert record.resource[c.RUN_ATTEMPT] == 2
        assert record.resource[c.PROJECT] == "maths"
        assert record.resource[c.POD] == "p-0"
        assert record.resource["service.name"] == "akka-training-job"
        for point in record.points:
            assert not {c.RUN_ID, c.RUN_ATTEMPT, c.PROJECT} & set(point.attributes)


def test_step_figures_become_catalog_instruments(job: JobTelemetry, receiver: OtlpReceiver) -> None:
    job.training("rl")
    job.step("rl", 1, RL_STEP)
    job.step("rl", 2, {**RL_STEP, "reward/mean": 0.75, "timing/generation": 3.0})
    assert job.flush()

    assert receiver.wait_for_metric(P + "rl.step.count").points[0].value == 2
    assert receiver.wait_for_metric(P + "step.latest").points[0].value == 2
    mean = receiver.wait_for_metric(P + "rl.reward.mean")
    assert (mean.kind, mean.unit, mean.points[0].value) == ("gauge", "{reward}", 0.75)
    shares = receiver.wait_for_metric(P + "rl.term.share.mean")
    assert shares.require_point({c.REWARD_TERM: "format"}).value == 0.125
    assert shares.require_point({c.REWARD_TERM: "correct"}).value == 0.5
    memory = receiver.wait_for_metric(P + "memory.peak")
    assert memory.unit == "By"
    assert memory.require_point({c.MEMORY_PART: "generation"}).value == 1.5e9
    assert receiver.wait_for_metric(P + "step.mfu.ratio").points[0].value == 0.31
    assert receiver.wait_for_metric(P + "rl.policy.loss").points[0].value == -0.02
    assert receiver.wait_for_metric(P + "rl.reward.zero_std.ratio").points[0].value == 0.25

    timing = receiver.wait_for_metric(P + "rl.step.timing")
    assert (timing.kind, timing.unit) == ("histogram", "s")
    generation = timing.require_point({c.STEP_PHASE: "generation"})
    assert (generation.count, generation.sum) == (2, 5.0)
    assert generation.explicit_bounds == c.STEP_TIMING_BOUNDARIES
    assert {p.attributes[c.STEP_PHASE] for p in timing.points} == {"generation", "reward", "update"}
    assert receiver.latest(P + "sft.step.count") is None


def test_a_job_that_starts_training_publishes_its_step_counter_at_zero(
    job: JobTelemetry, receiver: OtlpReceiver
) -> None:
    assert job.flush()
    phases = receiver.wait_for_metric(P + "job.phase")
    assert phases.require_point({c.RUN_PHASE: "PREPARING"}).value == 1
    assert receiver.latest(P + "sft.step.count") is None

    job.training("sft")
    assert job.flush()
    assert receiver.wait_for_metric(P + "sft.step.count").points[0].value == 0
    phases = receiver.wait_for_metric(
        P + "job.phase", lambda r: r.require_point({c.RUN_PHASE: "TRAINING"}).value == 1
    )
    assert phases.require_point({c.RUN_PHASE: "PREPARING"}).value == 0
    heartbeat = receiver.wait_for_metric(P + "job.heartbeat.timestamp").points[0].value
    assert heartbeat is not None and heartbeat > 1.7e9


def test_rollout_histograms_carry_their_explicit_boundaries(
    job: JobTelemetry, receiver: OtlpReceiver
) -> None:
    job.histograms(
        {
            "reward": [0.0, 0.0, 1.0, 1.2, 0.55, -0.3],
            "reward/correct": [0.0, 1.0],
            "completion_length": [3, 40, 500, 4000, float("nan")],
        }
    )
    with pytest.raises(ValueError, match="no histogram for 'rewards'"):
        job.histograms({"rewards": [1.0]})
    assert job.flush()

    reward = receiver.wait_for_metric(P + "rl.rollout.reward")
    point = reward.points[0]
    assert point.explicit_bounds == c.REWARD_BOUNDARIES
    assert point.count == 6
    assert len(point.bucket_counts) == len(c.REWARD_BOUNDARIES) + 1
    # A penalty lands in its own bucket below 0; the two zeros in the bucket that ends at 0.
    assert point.bucket_counts[c.REWARD_BOUNDARIES.index(-0.25)] == 1
    assert point.bucket_counts[c.REWARD_BOUNDARIES.index(0.0)] == 2
    length = receiver.wait_for_metric(P + "rl.rollout.completion.length").points[0]
    assert length.explicit_bounds == c.COMPLETION_LENGTH_BOUNDARIES
    assert length.count == 4  # the NaN is not recorded
    assert length.bucket_counts[c.COMPLETION_LENGTH_BOUNDARIES.index(4.0)] == 1
    share = receiver.wait_for_metric(P + "rl.rollout.term.share")
    assert share.require_point({c.REWARD_TERM: "correct"}).count == 2


def test_reward_stats_time_count_failures_by_cause_and_judge_tokens(
    job: JobTelemetry, receiver: OtlpReceiver
) -> None:
    job.reward_stats(
        timings={"judge": [0.8, 1.2], "format": [0.0001]},
        failures={("judge", "timeout"): 2, ("judge", "no-verdict"): 1, ("format", "error"): 0},
        judge_prompt_tokens={"judge": 900, "format": 0},
        judge_completion_tokens={"judge": 40},
        retries={"judge": 3, "format": 0},
    )
    with pytest.raises(ValueError, match="cause 'slow'"):
        job.reward_stats(failures={("judge", "slow"): 1})
    assert job.flush()

    timing = receiver.wait_for_metric(P + "reward.term.timing")
    assert timing.require_point({c.REWARD_TERM: "judge"}).count == 2
    assert (
        timing.require_point({c.REWARD_TERM: "judge"}).explicit_bounds == c.TERM_TIMING_BOUNDARIES
    )
    failures = receiver.wait_for_metric(P + "reward.term.failures")
    assert failures.monotonic is True
    assert (
        failures.require_point({c.REWARD_TERM: "judge", c.REWARD_FAILURE_CAUSE: "timeout"}).value
        == 2
    )
    assert failures.require_point({c.REWARD_FAILURE_CAUSE: "no-verdict"}).value == 1
    assert failures.point({c.REWARD_TERM: "format"}) is None
    tokens = receiver.wait_for_metric(P + "reward.judge.tokens")
    assert tokens.require_point({"gen_ai.token.type": "input"}).value == 900
    assert tokens.require_point({"gen_ai.token.type": "output"}).value == 40
    assert tokens.point({c.REWARD_TERM: "format"}) is None
    retries = receiver.wait_for_metric(P + "reward.term.retries")
    assert retries.monotonic is True
    assert retries.require_point({c.REWARD_TERM: "judge"}).value == 3
    assert retries.point({c.REWARD_TERM: "format"}) is None


def test_data_fit_and_placement(job: JobTelemetry, receiver: OtlpReceiver) -> None:
    job.data_fit(rows_truncated=18, answers_truncated=3, rows_dropped=1, padding_share=0.2)
    job.placement(
        "p-0", "n-1", [Gpu(index=0, uuid="GPU-aaaa"), Gpu(index=3, uuid="GPU-bbbb"), Gpu(index=5)]
    )
    assert job.flush()
    assert receiver.wait_for_metric(P + "data.rows.truncated").points[0].value == 18
    assert receiver.wait_for_metric(P + "data.padding.ratio").points[0].value == 0.2
    placement = receiver.wait_for_metric(P + "gpu.placement")
    assert sorted(
        (p.attributes[c.GPU_UUID], p.attributes[c.GPU_INDEX], p.value) for p in placement.points
    ) == [("GPU-aaaa", 0, 1.0), ("GPU-bbbb", 3, 1.0)]  # a GPU without UUID cannot be joined
    assert placement.points[0].attributes[c.POD] == "p-0"
    assert placement.points[0].attributes[c.NODE] == "n-1"


def test_metrics_jsonl_gets_one_line_per_step_and_tensorboard_the_scalars(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    job = JobTelemetry(job_resource("run-9", 1, "maths"), None, artifacts)
    try:
        for step in (1, 2, 3):
            job.step("sft", step, {"loss": 2.0 / step, "learning_rate": 1e-4, "custom": step})
        job.step("sft", 4, {"loss": math.nan})
    finally:
        job.shutdown()

    lines = (artifacts / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[1]["kind"] == "sft"
    assert records[1]["figures"] == {"loss": 1.0, "learning_rate": 1e-4, "custom": 2}
    assert records[3]["figures"] == {"loss": None}

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(artifacts / "tensorboard"))
    events.Reload()
    losses = events.Tensors("sft/loss")
    assert [e.step for e in losses] == [1, 2, 3, 4]
    assert [e.tensor_proto.float_val[0] for e in losses[:3]] == [2.0, 1.0, pytest.approx(2 / 3)]
    assert math.isnan(losses[3].tensor_proto.float_val[0])
    assert [e.step for e in events.Tensors("sft/custom")] == [1, 2, 3]
    # Read as TensorBoard's scalars, as its own writer's `add_scalar` writes them.
    assert events.SummaryMetadata("sft/learning_rate").plugin_data.plugin_name == "scalars"
    assert receiver.metrics() == []  # no collector endpoint: nothing exported


def test_step_counters_show_as_total_in_prometheus(tmp_path: Path) -> None:
    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(registry=registry)
    job = JobTelemetry(
        job_resource("run-1", 1, "maths"),
        None,
        tmp_path,
        metric_readers=[reader],
        tensorboard=False,
    )
    try:
        job.training("rl")
        job.step("rl", 1, {"timing/generation": 1.5})
        job.training("sft")
        job.step("sft", 1, {"timing/step": 0.4})
        text = generate_latest(registry).decode()
    finally:
        job.shutdown()
    assert re.search(r"^akka_optimize_training_rl_step_count_total\{.*\} 1\.0$", text, re.M)
    assert re.search(r"^akka_optimize_training_sft_step_count_total\{.*\} 1\.0$", text, re.M)
    assert re.search(
        r'^akka_optimize_training_rl_step_timing_seconds_bucket\{.*le="2\.5".*\} 1\.0$', text, re.M
    )


def test_a_job_resource_without_run_attempt_or_project_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"missing \['akka.optimize.training.run.attempt'\]"):
        JobTelemetry({c.RUN_ID: "r", c.PROJECT: "maths"}, None, tmp_path)
    with pytest.raises(ValueError, match="unknown"):
        JobTelemetry({**job_resource("r", 1, "maths"), "run": "r"}, None, tmp_path)


def test_the_phase_follows_a_pause_and_every_phase_is_0_in_the_last_export(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    telemetry = JobTelemetry(
        job_resource("run-9", 1, "maths"), receiver.endpoint, tmp_path, export_interval_s=3600
    )
    telemetry.training("rl")
    telemetry.directive("continue")
    assert telemetry.current_phase is Phase.TRAINING
    telemetry.directive("save-and-stop")
    assert telemetry.flush()
    phases = receiver.wait_for_metric(
        P + "job.phase", lambda r: r.require_point({c.RUN_PHASE: "PAUSING"}).value == 1
    )
    assert phases.require_point({c.RUN_PHASE: "TRAINING"}).value == 0
    with pytest.raises(ValueError, match="a job is never in COMPLETED"):
        telemetry.phase("COMPLETED")

    telemetry.shutdown()  # the job exits: its last export
    last = receiver.wait_for_metric(P + "job.phase", lambda r: all(p.value == 0 for p in r.points))
    assert {p.attributes[c.RUN_PHASE] for p in last.points} == {
        "PREPARING",
        "TRAINING",
        "PAUSING",
    }


def test_reward_counters_start_at_0_for_every_term_and_cause(
    job: JobTelemetry, receiver: OtlpReceiver
) -> None:
    job.reward_terms({"correct": "match", "judge": "judge", "grader": "http"})
    assert job.flush()
    failures = receiver.wait_for_metric(P + "reward.term.failures")
    seeded = {
        (p.attributes[c.REWARD_TERM], p.attributes[c.REWARD_FAILURE_CAUSE]) for p in failures.points
    }
    # A local term fails only with an error in its code; a remote one by every cause.
    assert seeded == {("correct", "error")} | {
        (term, cause) for term in ("judge", "grader") for cause in c.REWARD_FAILURE_CAUSES
    }
    assert all(p.value == 0 for p in failures.points)
    retries = receiver.wait_for_metric(P + "reward.term.retries")
    assert sorted((p.attributes[c.REWARD_TERM], p.value) for p in retries.points) == [
        ("grader", 0),
        ("judge", 0),
    ]
    tokens = receiver.wait_for_metric(P + "reward.judge.tokens")
    assert sorted(
        (p.attributes[c.REWARD_TERM], p.attributes[c.TOKEN_TYPE]) for p in tokens.points
    ) == [
        ("judge", "input"),
        ("judge", "output"),
    ]


def test_a_job_in_kubernetes_carries_the_opentelemetry_k8s_attributes(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    from akka_training.telemetry.placement import namespace_name

    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("training\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert namespace_name(env, namespace_file) == "training"
    assert namespace_name({"POD_NAMESPACE": "ml"}, namespace_file) == "ml"
    assert namespace_name({}, namespace_file) is None  # outside Kubernetes
    telemetry = JobTelemetry(
        job_resource("run-3", 1, "maths", pod="ray-worker-x", node="gpu-7", namespace="training"),
        receiver.endpoint,
        tmp_path / "a",
        export_interval_s=3600,
    )
    try:
        assert telemetry.flush()
    finally:
        telemetry.shutdown()
    resource = receiver.wait_for_metric(P + "job.phase").resource
    assert resource["k8s.pod.name"] == resource[c.POD] == "ray-worker-x"
    assert resource["k8s.node.name"] == resource[c.NODE] == "gpu-7"
    assert resource["k8s.namespace.name"] == "training"


def test_the_step_counter_s_zero_is_exported_when_training_begins(
    job: JobTelemetry, receiver: OtlpReceiver
) -> None:
    # Not with the first periodic export (an hour here), which comes after the first steps:
    # Prometheus' increase() needs the 0 before them.
    job.training("sft")
    count = receiver.wait_for_metric(P + "sft.step.count")
    assert count.points[0].value == 0
    phase = receiver.wait_for_metric(P + "job.phase")
    assert phase.require_point({c.RUN_PHASE: "TRAINING"}).value == 1
