from __future__ import annotations

import re

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from akka_training.telemetry import catalog as c

P = c.PREFIX


def test_every_name_is_under_the_prefix_and_unique() -> None:
    names = [m.name for m in c.METRICS] + [s.name for s in c.SPANS] + [a.name for a in c.ATTRIBUTES]
    ours = [n for n in names if n not in c.ECOSYSTEM_ATTRIBUTES + c.GENAI_METRIC_NAMES]
    assert all(n.startswith("akka.optimize.training.") for n in ours)
    # The exceptions are OpenTelemetry's semantic-convention names, spelled as it spells them.
    assert set(c.ECOSYSTEM_ATTRIBUTES) == {
        "k8s.pod.name",
        "k8s.node.name",
        "k8s.namespace.name",
        "gen_ai.token.type",
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "error.type",
    }
    assert set(c.GENAI_METRIC_NAMES) == {
        "gen_ai.server.request.duration",
        "gen_ai.server.time_to_first_token",
        "gen_ai.server.time_per_output_token",
        "gen_ai.client.token.usage",
    }
    assert len({m.name for m in c.METRICS}) == len(c.METRICS)
    assert len({s.name for s in c.SPANS}) == len(c.SPANS)
    assert len({a.name for a in c.ATTRIBUTES}) == len(c.ATTRIBUTES)


def test_the_interface_names_are_kept() -> None:
    for kind in ("rl", "sft"):
        count = c.metric(f"{P}{kind}.step.count")
        assert count.instrument is c.Instrument.COUNTER
        assert count.publisher is c.Publisher.JOB
    timing = c.metric(P + "rl.step.timing")
    assert (timing.instrument, timing.unit) == (c.Instrument.HISTOGRAM, "s")
    assert timing.attributes == (c.STEP_PHASE,)
    assert {"generation", "reward", "update"} <= set(c.attribute(c.STEP_PHASE).values)
    for which in ("declared", "observed", "claimed"):
        spec = c.metric(f"{P}pool.devices.{which}")
        assert spec.publisher is c.Publisher.SERVICE
        assert P + "pool.accelerator" in spec.attributes
    assert P + "claim.state" in c.metric(P + "pool.claims").attributes
    assert c.attribute(P + "claim.state").type == "string"
    assert c.attribute(P + "pool.accelerator").type == "string"


def test_every_attribute_a_metric_or_span_names_is_in_the_catalog() -> None:
    for m in c.METRICS:
        for a in m.attributes:
            c.attribute(a)
    for s in c.SPANS:
        for a in s.attributes:
            c.attribute(a)
    for a in c.JOB_RESOURCE_ATTRIBUTES:
        c.attribute(a)
    with pytest.raises(KeyError):
        c.metric(P + "no.such.metric")


def test_service_metrics_carry_the_project_never_the_run() -> None:
    for m in c.metrics_of(c.Publisher.SERVICE):
        assert c.RUN_ID not in m.attributes and c.RUN_ATTEMPT not in m.attributes
    project_scoped = [m for m in c.metrics_of(c.Publisher.SERVICE) if c.PROJECT in m.attributes]
    assert {m.name for m in project_scoped} >= {
        P + "project.devices.claimed",
        P + "project.devices.quota",
        P + "runs",
        P + "run.failures",
    }


def test_job_metrics_leave_run_attempt_and_project_to_the_resource() -> None:
    resource_only = set(c.JOB_RESOURCE_ATTRIBUTES) - {c.POD, c.NODE}
    for m in c.metrics_of(c.Publisher.JOB):
        assert not resource_only & set(m.attributes), m.name


def test_histograms_and_only_histograms_have_increasing_boundaries() -> None:
    for m in c.METRICS:
        if m.instrument is c.Instrument.HISTOGRAM:
            assert len(m.boundaries) >= 5, m.name
            assert list(m.boundaries) == sorted(set(m.boundaries)), m.name
            # Only rewards and term shares go below 0 (a penalty term): prometheus_client leaves
            # out _sum and _count of a histogram with a negative bound (the collector keeps
            # them), so nothing else has one.
            if m.name not in NEGATIVE_HISTOGRAMS:
                assert m.boundaries[0] >= 0, m.name
        else:
            assert m.boundaries == (), m.name


_UCUM = re.compile(r"^(s|By|W|Cel|Hz|1|\{[a-z_]+\}|\{[a-z_]+\}/s)$")
NEGATIVE_HISTOGRAMS = {P + "rl.rollout.reward", P + "rl.rollout.term.share"}


def test_units_are_ucum() -> None:
    for m in c.METRICS:
        assert _UCUM.match(m.unit), (m.name, m.unit)


def test_a_gauge_with_unit_1_is_a_ratio_named_so() -> None:
    # The collector's translator (and Prometheus's OTLP receiver) append _ratio to a gauge with
    # unit 1; Python's exporter does not. Only names already ending in "ratio" agree.
    for m in c.METRICS:
        if m.unit == "1" and m.instrument is c.Instrument.GAUGE:
            assert m.name.endswith(".ratio"), m.name


def test_prometheus_names_of_known_metrics() -> None:
    assert c.prometheus_name(c.metric(P + "rl.step.count")) == (
        "akka_optimize_training_rl_step_count_total"
    )
    assert c.prometheus_name(c.metric(P + "sft.step.count")) == (
        "akka_optimize_training_sft_step_count_total"
    )
    assert c.prometheus_series(c.metric(P + "rl.step.timing")) == (
        "akka_optimize_training_rl_step_timing_seconds_bucket",
        "akka_optimize_training_rl_step_timing_seconds_sum",
        "akka_optimize_training_rl_step_timing_seconds_count",
    )
    assert c.prometheus_name(c.metric(P + "pool.devices.declared")) == (
        "akka_optimize_training_pool_devices_declared"
    )
    assert (
        c.prometheus_name(c.metric(P + "memory.peak")) == "akka_optimize_training_memory_peak_bytes"
    )
    assert c.prometheus_name(c.metric(P + "step.throughput")) == (
        "akka_optimize_training_step_throughput_per_second"
    )
    assert c.prometheus_label(c.RUN_ID) == "akka_optimize_training_run_id"


def test_names_and_units_follow_the_ecosystem_conventions() -> None:
    # Hertz for clocks, a 0-1 ratio for utilisation, a _timestamp_seconds heartbeat.
    for clock in ("gpu.clock.sm", "gpu.clock.memory"):
        assert (
            c.prometheus_name(c.metric(P + clock))
            == f"akka_optimize_training_{clock.replace('.', '_')}_hertz"
        )
    utilisation = c.metric(P + "gpu.utilization.ratio")
    assert utilisation.unit == "1"
    assert c.prometheus_name(utilisation) == "akka_optimize_training_gpu_utilization_ratio"
    assert c.prometheus_name(c.metric(P + "job.heartbeat.timestamp")) == (
        "akka_optimize_training_job_heartbeat_timestamp_seconds"
    )
    assert not any(m.unit in ("%", "MHz") for m in c.METRICS)
    tokens = c.metric(P + "reward.judge.tokens")
    assert "gen_ai.token.type" in tokens.attributes
    assert c.attribute("gen_ai.token.type").values == ("input", "output")
    for name in ("k8s.pod.name", "k8s.node.name", "k8s.namespace.name", c.POD, c.NODE):
        assert name in c.JOB_RESOURCE_ATTRIBUTES


def test_the_genai_metrics_follow_the_semantic_conventions() -> None:
    # Names, units, attributes and bucket boundaries as OpenTelemetry's GenAI conventions give
    # them, plus the project and the endpoint as every service metric carries its project.
    genai = ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model")
    served = (c.PROJECT, P + "endpoint")
    duration = c.metric("gen_ai.server.request.duration")
    assert (duration.instrument, duration.unit) == (c.Instrument.HISTOGRAM, "s")
    assert set(duration.attributes) >= {*genai, "gen_ai.response.model", "error.type", *served}
    assert duration.boundaries[:3] == (0.01, 0.02, 0.04) and duration.boundaries[-1] == 81.92
    ttft = c.metric("gen_ai.server.time_to_first_token")
    assert ttft.unit == "s" and ttft.boundaries[:3] == (0.001, 0.005, 0.01)
    assert "error.type" not in ttft.attributes  # successful responses only
    tpot = c.metric("gen_ai.server.time_per_output_token")
    assert tpot.unit == "s" and tpot.boundaries[0] == 0.01 and tpot.boundaries[-1] == 2.5
    usage = c.metric("gen_ai.client.token.usage")
    assert usage.unit == "{token}" and "gen_ai.token.type" in usage.attributes
    assert usage.boundaries[:3] == (1.0, 4.0, 16.0) and usage.boundaries[-1] == 67108864.0
    for m in (duration, ttft, tpot, usage):
        assert m.publisher is c.Publisher.SERVICE and set(m.attributes) >= {*genai, *served}
    assert c.attribute("gen_ai.operation.name").values == ("chat", "text_completion")
    assert c.prometheus_series(duration)[2] == "gen_ai_server_request_duration_seconds_count"
    assert c.prometheus_name(usage) == "gen_ai_client_token_usage"
    assert c.prometheus_label("gen_ai.request.model") == "gen_ai_request_model"


def test_histogram_boundaries_fit_penalties_and_short_completions() -> None:
    for name in ("rl.rollout.reward", "rl.rollout.term.share"):
        bounds = c.metric(P + name).boundaries
        assert bounds[0] < 0 and 0.0 in bounds and bounds[-1] >= 5, name
    lengths = c.metric(P + "rl.rollout.completion.length").boundaries
    assert lengths[:4] == (1.0, 2.0, 4.0, 8.0)


def test_prometheus_name_agrees_with_the_real_exporter_for_every_metric() -> None:
    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    try:
        meter = provider.get_meter("test")
        for m in c.METRICS:
            if m.instrument is c.Instrument.COUNTER:
                meter.create_counter(m.name, unit=m.unit).add(1)
            elif m.instrument is c.Instrument.UP_DOWN:
                meter.create_up_down_counter(m.name, unit=m.unit).add(1)
            elif m.instrument is c.Instrument.GAUGE:
                meter.create_gauge(m.name, unit=m.unit).set(1)
            else:
                meter.create_histogram(
                    m.name, unit=m.unit, explicit_bucket_boundaries_advisory=list(m.boundaries)
                ).record(1)
        # An observable counter (as GPU ECC errors are made) names the same as a counter.
        meter.create_observable_counter(
            P + "observed.errors", unit="{error}", callbacks=[lambda _o: [Observation(1)]]
        )
        text = generate_latest(registry).decode()
    finally:
        provider.shutdown()
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    for m in c.METRICS:
        for series in c.prometheus_series(m):
            if m.name in NEGATIVE_HISTOGRAMS and not series.endswith("_bucket"):
                assert series not in samples  # the Python client's rule, see above
                continue
            assert series in samples, (m.name, series)
    assert "akka_optimize_training_observed_errors_total" in samples
