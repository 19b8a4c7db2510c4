"""The first XID error, the first failed rollout, the first judge tokens and the first failed
run show in `increase()`: the counters are published at 0 before their first increment, and
Prometheus (promtool's evaluation of the real scrapes) sees the increment. The same scrapes
with the zero samples taken out, as a counter that appears with its first value would give,
show nothing: that is the bug the zeros fix."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from akka_training.core.failures import FailureReason
from akka_training.core.reports import Gpu
from akka_training.telemetry import catalog as c
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import job_resource
from akka_training.telemetry.service_metrics import (
    CapacitySnapshot,
    ProjectCapacity,
    ServiceTelemetry,
)
from akka_training.testing.fake_nvml import FakeGpu, FakeNvml
from tests.telemetry.promql import (
    labels_of,
    needs_promtool,
    promtool_test,
    scrapes,
    without_first_scrape,
)

P = c.PREFIX
GPU = "GPU-0a1b2c3d-0000-1111-2222-333344445555"


def _name(short: str) -> str:
    return c.prometheus_name(c.metric(P + short))


def _alerts() -> dict[str, str]:
    return {
        "RewardFailure": f"increase({_name('reward.term.failures')}[3m]) > 0",
        "JudgeTokens": f"rate({_name('reward.judge.tokens')}[3m]) > 0",
        "Xid": f"increase({_name('gpu.xid.errors')}[3m]) > 0",
        "RunFailure": f"increase({_name('run.failures')}[3m]) > 0",
    }


def _job_scrapes(tmp_path: Path) -> list[bytes]:
    """Three scrapes of a job's metrics: after its start, after the first failure, XID and
    judge call, and a minute later."""
    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(scope_info_enabled=False, registry=registry)
    telemetry = JobTelemetry(
        job_resource("run-1", 1, "maths"),
        None,
        tmp_path / "artifacts",
        metric_readers=[reader],
        tensorboard=False,
    )
    nvml = FakeNvml([FakeGpu(GPU, index=0)])
    try:
        telemetry.reward_terms({"judge": "judge", "correct": "match"})
        health = telemetry.watch_gpus([Gpu(index=0, uuid=GPU)], nvml=nvml, interval_s=3600)
        assert health.active
        texts = [generate_latest(registry)]
        telemetry.reward_stats(
            failures={("judge", "timeout"): 1},
            judge_prompt_tokens={"judge": 120},
            judge_completion_tokens={"judge": 8},
        )
        nvml.queue_xid(GPU, 79)
        assert health.poll_events(timeout_ms=2000) == 1
        texts.append(generate_latest(registry))
        texts.append(generate_latest(registry))
        return texts
    finally:
        telemetry.shutdown()


def _service_scrapes() -> list[bytes]:
    snapshot = CapacitySnapshot(projects=[ProjectCapacity("maths", 0, None)])
    telemetry = ServiceTelemetry(None, lambda: snapshot, export="scrape", snapshot_ttl_s=0)
    try:
        texts = [telemetry.prometheus_text()]
        telemetry.run_failed("maths", FailureReason.DEVICE_OOM)
        texts += [telemetry.prometheus_text(), telemetry.prometheus_text()]
        return texts
    finally:
        telemetry.shutdown()


@needs_promtool
def test_prometheus_sees_the_first_increment_of_every_counter(tmp_path: Path) -> None:
    counters = [_name(s) for s in ("reward.term.failures", "reward.judge.tokens", "gpu.xid.errors")]
    series = scrapes(_job_scrapes(tmp_path), counters)
    series |= scrapes(_service_scrapes(), [_name("run.failures")])
    # The zeros were there before anything happened, for every known attribute set.
    assert all(values[0] == 0 for values in series.values()), series
    rose = {key: values for key, values in series.items() if values[-1]}
    expected = {
        alert: [labels_of(k) for k in rose if k.startswith(_name(short))]
        for alert, short in (
            ("RewardFailure", "reward.term.failures"),
            ("JudgeTokens", "reward.judge.tokens"),
            ("Xid", "gpu.xid.errors"),
            ("RunFailure", "run.failures"),
        )
    }
    assert expected["RewardFailure"] == [
        {
            c.prometheus_label(c.REWARD_FAILURE_CAUSE): "timeout",
            c.prometheus_label(c.REWARD_TERM): "judge",
        }
    ]
    assert [x[c.prometheus_label(c.GPU_XID)] for x in expected["Xid"]] == ["79"]
    assert [r[c.prometheus_label(c.FAILURE_REASON)] for r in expected["RunFailure"]] == [
        FailureReason.DEVICE_OOM.value
    ]
    assert len(expected["JudgeTokens"]) == 2  # input and output

    fixed = promtool_test(tmp_path, series, _alerts(), expected, eval_time="2m")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr

    # Had the counters appeared with their first value, Prometheus would see no increase.
    control = tmp_path / "control"
    control.mkdir()
    broken = promtool_test(
        control, without_first_scrape(series), _alerts(), expected, eval_time="2m"
    )
    assert broken.returncode != 0
    assert "FAILED" in broken.stdout + broken.stderr
