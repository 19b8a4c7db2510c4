"""Renders the Observability reference from the catalog.

    python -m akka_training.telemetry.docs > docs/observability.md

The tables come from `catalog` and `figures`; the sections around them (collector setup, the
stalled-run alert, the DCGM join, throttle reasons) are written here, beside the names they use,
so a renamed metric breaks the page's test rather than the page's readers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from akka_training.telemetry import catalog as c
from akka_training.telemetry.figures import mapping_rows
from akka_training.telemetry.gpu import THROTTLE_CONSTANTS


def render() -> str:
    parts = [
        _INTRO,
        _section("Metrics", _METRICS_INTRO),
        _metric_table(
            "Service metrics",
            [m for m in c.metrics_of(c.Publisher.SERVICE) if m not in c.GENAI_METRICS],
        ),
        _metric_table("Serving metrics", c.GENAI_METRICS),
        _SERVING,
        _metric_table("Job metrics", c.metrics_of(c.Publisher.JOB)),
        _job_resource(),
        _metric_table("Evaluation metrics", c.metrics_of(c.Publisher.EVALUATION)),
        _evaluation_resource(),
        _boundaries(),
        _figures(),
        _spans(),
        _attributes(),
        _stalled(),
        _DCGM,
        _throttle(),
        _XID,
        _FILES,
    ]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def main() -> None:
    sys.stdout.write(render())


# --- generated sections ---------------------------------------------------------------------------


def _short(name: str) -> str:
    return name.removeprefix(c.PREFIX)


def _metric_table(title: str, specs: Iterable[c.MetricSpec]) -> str:
    rows = [
        f"### {title}",
        "",
        "| Metric | Instrument | Unit | Prometheus | Attributes | Description |",
        "|---|---|---|---|---|---|",
    ]
    for m in specs:
        attrs = ", ".join(f"`{_short(a)}`" for a in m.attributes)
        rows.append(
            f"| `{m.name}` | {m.instrument.value} | `{m.unit}` | `{c.prometheus_name(m)}` | "
            f"{attrs} | {m.description} |"
        )
    return "\n".join(rows) + "\n"


def _job_resource() -> str:
    return _resource(
        "### Resource attributes of a job",
        "Every metric and span of a job carries these resource attributes (the first three "
        "always, the others where they apply), besides `service.name` = `akka-training-job`. "
        "The service's own metrics and spans carry `service.name` = `akka-training` and no run. "
        "The pod and node appear twice, under the documented names and under OpenTelemetry's "
        "Kubernetes conventions (`k8s.pod.name`, `k8s.node.name`), with `k8s.namespace.name`.",
        c.JOB_RESOURCE_ATTRIBUTES,
        c.JOB_REQUIRED_RESOURCE_ATTRIBUTES,
    )


def _evaluation_resource() -> str:
    return _resource(
        "### Resource attributes of an evaluation's job",
        "An evaluation runs as a job of its own (`evaluations start`), with `service.name` = "
        "`akka-training-job` and these resource attributes instead of a run's attempt (the "
        "first two always; the run when the evaluation scores a run's adapter):",
        c.EVALUATION_RESOURCE_ATTRIBUTES,
        c.EVALUATION_REQUIRED_RESOURCE_ATTRIBUTES,
    )


def _resource(title: str, intro: str, names: tuple[str, ...], required: tuple[str, ...]) -> str:
    lines = [title, "", intro, ""]
    for name in names:
        spec = c.attribute(name)
        note = " Always present." if name in required else ""
        lines.append(f"- `{name}` (label `{c.prometheus_label(name)}`): {spec.description}{note}")
    return "\n".join(lines) + "\n"


def _boundaries() -> str:
    lines = [
        "### Histogram boundaries",
        "",
        "Each histogram has explicit bucket boundaries (upper bounds; a last bucket takes the "
        "rest):",
        "",
    ]
    for m in c.METRICS:
        if m.instrument is c.Instrument.HISTOGRAM:
            bounds = ", ".join(f"{b:g}" for b in m.boundaries)
            lines.append(f"- `{m.name}` (`{m.unit}`): {bounds}")
    return "\n".join(lines) + "\n"


def _figures() -> str:
    lines = [
        "## Figures a job reports",
        "",
        "Engines report each step as flat figures (`runs metrics` shows the same names). Every "
        "figure goes to `metrics.jsonl` and TensorBoard; the ones below are also published as "
        "metrics. Every step adds 1 to its kind's step counter and sets "
        "`akka.optimize.training.step.latest`. `<term>` is a reward term's name, `<part>` a "
        "memory part. Names in this table omit the prefix `akka.optimize.training.`.",
        "",
        "| Kind | Figure | Metric | Attributes |",
        "|---|---|---|---|",
    ]
    for kind, figure, metric, attrs in mapping_rows():
        shown = ", ".join(_short(a) for a in attrs.split(", ")) if attrs else ""
        lines.append(f"| {kind} | `{figure}` | `{_short(metric)}` | {shown} |")
    return "\n".join(lines) + "\n"


def _spans() -> str:
    lines = [
        "## Spans",
        "",
        "The service's spans and a job's spans share a trace: the service passes the context "
        "of `akka.optimize.training.job.launch` to the job as a W3C `traceparent` (in the job's "
        "spec and in the `TRACEPARENT` environment variable), and the job's root span "
        "`akka.optimize.training.job` is its child. A step's span (`job.step`) holds its "
        "phases: generation, reward and update for a reinforcement step (from the engine's own "
        "timings on verl), the evaluation and the snapshot save for a step that had them. "
        "An evaluation's job joins the trace of its submission the same way: its root span "
        "`akka.optimize.training.evaluation` is a child of `evaluation.submit`, with a span for "
        "each part of its work (load, generate, score, save). "
        "Spans are exported to `trainer.telemetry.collector-endpoint` over OTLP/HTTP.",
        "",
        "| Span | Published by | Attributes | Description |",
        "|---|---|---|---|",
    ]
    for s in c.SPANS:
        attrs = ", ".join(f"`{_short(a)}`" for a in s.attributes)
        lines.append(f"| `{s.name}` | {s.publisher.value} | {attrs} | {s.description} |")
    return "\n".join(lines) + "\n"


def _attributes() -> str:
    lines = [
        "## Attributes",
        "",
        "| Attribute | Type | Prometheus label | Values | Description |",
        "|---|---|---|---|---|",
    ]
    for a in c.ATTRIBUTES:
        values = ", ".join(f"`{v}`" for v in a.values)
        lines.append(
            f"| `{a.name}` | {a.type} | `{c.prometheus_label(a.name)}` | {values} | "
            f"{a.description} |"
        )
    return "\n".join(lines) + "\n"


def _throttle() -> str:
    lines = [
        _THROTTLE_INTRO.rstrip("\n"),
        "",
        "| Reason | NVML bit | What it means |",
        "|---|---|---|",
    ]
    for reason, (constant, _legacy) in THROTTLE_CONSTANTS.items():
        lines.append(f"| `{reason}` | `{constant}` | {_THROTTLE_MEANING[reason]} |")
    return "\n".join(lines) + "\n" + _THROTTLE_QUERIES


def _section(title: str, body: str) -> str:
    return f"## {title}\n\n{body}"


def stalled_query(kind: str, window: str = "15m") -> str:
    """The stalled-run alert for `kind` (``rl`` or ``sft``): the step counter did not increase
    over `window` while the job is in TRAINING. The offset clause waits until the counter is
    `window` old, so a job whose first step is still under way does not fire."""
    counter = c.prometheus_name(c.metric(f"{c.PREFIX}{kind}.step.count"))
    phase = c.prometheus_name(c.metric(c.PREFIX + "job.phase"))
    on = f"on ({c.prometheus_label(c.RUN_ID)}, {c.prometheus_label(c.RUN_ATTEMPT)})"
    training = f'{{{c.prometheus_label(c.RUN_PHASE)}="TRAINING"}}'
    return (
        f"increase({counter}[{window}]) == 0\n"
        f"  and {on} ({counter} offset {window})\n"
        f"  and {on} {phase}{training} == 1"
    )


def _stalled() -> str:
    return f"""\
## Stalled runs

A job counts its completed steps: `akka.optimize.training.rl.step.count` and
`akka.optimize.training.sft.step.count` add 1 per step (Prometheus
`akka_optimize_training_rl_step_count_total` and `akka_optimize_training_sft_step_count_total`).
When a job stops making progress (a hung collective, a judge that never answers), its step
gauges keep their last values, so a loss or reward panel looks calm; the completed-step count
stops increasing. Alert on the counter, `increase(akka_optimize_training_rl_step_count_total[15m]) == 0`,
while the run is in `TRAINING`:

```promql
{stalled_query("rl")}
```

and for supervised runs:

```promql
{stalled_query("sft")}
```

The job publishes its step counter at 0 and `akka.optimize.training.job.phase` = 1 for
`TRAINING` when it starts training, so a job that never completes its first step is caught too;
the `offset` clause holds the alert until the counter is 15 minutes old, so a first step still
under way right after the start does not fire. Choose the window longer than the slowest step
you expect (15 minutes suits most runs; a long reinforcement step on a large model may need
more). `deploy/grafana/alerts.yaml` provisions both rules in Grafana.

Two other signals tell a stalled job from a dead one:

- `akka_optimize_training_job_heartbeat_timestamp_seconds` is the Unix time of the job's latest
  export. It advances while the process lives, even when steps stop:
  `time() - akka_optimize_training_job_heartbeat_timestamp_seconds > 120` means the process stopped
  exporting (it exited or is wedged as a whole). The service notices a job that died and fails
  or requeues its run with a reason.
- `akka_optimize_training_job_stalled` is 1 once the job's own watchdog saw no step complete
  within its stall limit. A supervised or TRL job then also writes every thread's stack and a
  device-memory summary beside its `metrics.jsonl`, once per stall: a step completing ends the
  stall, and the next one gets its own dump. The watchdog's clock starts with the first step,
  so loading the model and tokenising the data never count as a stall.

`akka.optimize.training.job.phase` follows the job: `PREPARING` while it loads, `TRAINING`
from its first step, `PAUSING` once a pause (`runs pause --checkpoint save`) asked it to save
and stop. In the job's last export, as it exits, every phase is 0, so a finished, paused or
cancelled run's job never matches `job_phase{{...="TRAINING"}} == 1`, whatever the alert's
window. (Through the collector, the series then stays at 0 until the exporter's
`metric_expiration`, 5 minutes by default, and ends.)

## Counters start at 0

Prometheus's `increase()` and `rate()` need a sample before the first increment: a series that
appears with the value 1 shows an increase of 0. Every counter is therefore published at 0 for
each attribute set known in advance: a job's step counter when it starts training, each reward
term's failures by every cause the term can fail with and a judge's input and output tokens
when the job starts, each GPU's XID counter for the codes of note
({", ".join(str(x) for x in c.XIDS_OF_NOTE)}; any other code appears with its first
value), and the service's run failures for every reason of every project.
"""


# --- hand-written sections ------------------------------------------------------------------------

_INTRO = """\
<!-- Generated by `python -m akka_training.telemetry.docs > docs/observability.md` from
src/akka_training/telemetry/catalog.py. Edit the generator, not this file. -->

# Observability

The trainer and its training jobs publish OpenTelemetry metrics, spans and attributes for
dashboards and alerts across runs. Every name starts with `akka.optimize.training.`.

- The **service** publishes capacity gauges (pools, claims, project quotas, runs by phase) and
  a run-failure counter, by one path per deployment (`trainer.telemetry.service-metrics`):
  `otlp`, the default when `trainer.telemetry.collector-endpoint` is set, exports them to the
  collector and `GET /metrics` answers 404 naming the collector; `scrape`, the default without
  a collector, serves them in Prometheus text at `GET /metrics` (for the metrics token,
  `trainer.telemetry.metrics-token-file`, and admin tokens: they cover every project) and
  exports none over OTLP.
  Both at once would show every service series twice. The dashboard's capacity panels take
  each gauge once per label set (`max by`), so several replicas of the service never double
  them either. Service metrics carry the project, never the run.
- Each **training job** exports its metrics and spans over OTLP/HTTP to
  `trainer.telemetry.collector-endpoint` (the base URL of a collector's OTLP/HTTP receiver,
  such as `http://otel-collector:4318`). Job metrics carry the run, the attempt and the project
  as resource attributes. Whether or not a collector is set, a job writes every step's figures
  to `metrics.jsonl` and TensorBoard files beside its other artifacts.

## From OpenTelemetry to Prometheus

Prometheus names follow OpenTelemetry's Prometheus conversion: dots become underscores, the unit
is appended (`s` -> `_seconds`, `By` -> `_bytes`, `W` -> `_watts`, `Cel` -> `_celsius`,
`Hz` -> `_hertz`, `{token}/s` -> `_per_second`; `1` and annotations such as `{step}` add
nothing), counters end in `_total`, and a histogram `X` shows as `X_bucket`, `X_sum` and
`X_count`. Attributes become labels the same way (`akka.optimize.training.run.id` ->
`akka_optimize_training_run_id`). The names below are the same whether a series comes from
the service's `/metrics`, from an OpenTelemetry collector's Prometheus exporter, or from
Prometheus's own OTLP receiver: the collector's translator appends `_ratio` to a gauge with unit
`1`, so every such gauge here is a ratio whose name already ends in `ratio`, and other plain
numbers carry annotation units (`{loss}`, `{reward}`, `{state}`).

A job's run, attempt and project are resource attributes. For them to become labels on every
series (the dashboard and the alert below need them), turn on resource-to-label conversion in
the collector's Prometheus exporter:

```yaml
receivers:
  otlp:
    protocols:
      http: {endpoint: 0.0.0.0:4318}
exporters:
  prometheus:
    endpoint: 0.0.0.0:8889
    resource_to_telemetry_conversion: {enabled: true}
service:
  pipelines:
    metrics: {receivers: [otlp], exporters: [prometheus]}
```

The job's pod and node come from the environment. KubeRay's pods carry the pod's name in
`HOSTNAME` (or set `POD_NAME`); add the node from the downward API to the Ray worker (and head)
containers so GPU series can be joined per node:

```yaml
env:
  - name: NODE_NAME
    valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
```
"""

_SERVING = """\
The trainer's front door (`/openai/v1`, see [Talk to your adapter](talk-to-your-adapter.md))
publishes these with the service's metrics, under the names and bucket boundaries of
OpenTelemetry's GenAI semantic conventions, so dashboards built for those conventions read them
as they are. Each carries `gen_ai.operation.name` (`chat` or `text_completion`),
`gen_ai.provider.name` (`akka.training`), `gen_ai.request.model` (the `model` the request
named), `gen_ai.response.model` (the `model` of the answer) and the endpoint's project and name.
They are measured from the answer as the front door relays it:

- `gen_ai.server.request.duration`: from the request's arrival to the answer's last byte. A
  failed request carries `error.type`: the status the caller got (`503` while the endpoint
  starts or does not answer, `400` or `404` from the endpoint), or `cancelled` when the caller
  went away mid-answer. Requests refused before an endpoint is known (`401`, a model no
  endpoint of the caller's projects serves) belong to no endpoint and are not counted.
- `gen_ai.server.time_to_first_token`: streamed requests only, from the arrival to the first
  chunk that carries generated text (a chunk naming the role only is not one).
- `gen_ai.server.time_per_output_token`: streamed requests of two output tokens or more, from
  the first token to the end, divided by the output tokens after the first.
- `gen_ai.client.token.usage`: the answer's `usage`, input and output (`gen_ai.token.type`),
  streamed or not. The conventions define token usage for a client only; the front door is its
  endpoint's client.

Only successful requests count tokens and token timings. With several completions (`n`), the
first token is that of any completion and the output tokens are those of all of them.

```promql
histogram_quantile(0.9, sum by (le, akka_optimize_training_endpoint)
  (rate(gen_ai_server_time_to_first_token_seconds_bucket[5m])))
```
"""

_METRICS_INTRO = """\
Attribute names in the tables omit the prefix `akka.optimize.training.`; the
[Attributes](#attributes) table lists them in full. A gauge keeps the last value it was set to
until the job ends: step gauges hold the latest step's figures.
"""

_DCGM = """\
## Joining GPU placement with DCGM

Each process of a job publishes `akka.optimize.training.gpu.placement` = 1 for each GPU it
uses, with the GPU's UUID, index, pod and node. NVIDIA's DCGM exporter labels its series
(`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_FB_USED`, ...) with the same
UUID in the label `UUID`. Copy the UUID into a `UUID` label and join on it to see the cluster's
GPU series per run:

```promql
DCGM_FI_DEV_GPU_UTIL
  * on (UUID) group_left (akka_optimize_training_project, akka_optimize_training_run_id, akka_optimize_training_run_attempt)
  max by (UUID, akka_optimize_training_project, akka_optimize_training_run_id, akka_optimize_training_run_attempt) (
    label_replace(
      akka_optimize_training_gpu_placement{akka_optimize_training_run_id="RUN_ID"},
      "UUID", "$1", "akka_optimize_training_gpu_uuid", "(.+)"
    )
  )
```

Replace `RUN_ID` with the run's id (or use `$run` in a Grafana panel). `max by` keeps one
placement series per GPU when several processes of the job share it. Join on the UUID, not the
index: indices depend on `CUDA_VISIBLE_DEVICES` and on what the container sees.

The job's own GPU health series (`akka.optimize.training.gpu.*`) carry the UUID too, so the
same run can be read without DCGM.
"""

_THROTTLE_INTRO = """\
## Reading throttle reasons

`akka.optimize.training.gpu.throttle` is sampled from NVML's clock-event reasons (every 15
seconds by default). Each reason is a series with the attribute
`akka.optimize.training.gpu.throttle.reason`: 1 while it holds the GPU's clocks down, 0
otherwise. Several can be 1 at once.
"""

_THROTTLE_MEANING = {
    "gpu-idle": "Nothing runs on the GPU. Normal between steps; long stretches during a step "
    "mean the GPU waits for the CPU (data loading, reward scoring, a judge).",
    "applications-clocks-setting": "Clocks are held at the applications clocks an operator "
    "set (`nvidia-smi -ac`).",
    "sw-power-cap": "The GPU reached its power limit and the driver lowered its clocks. "
    "Common under full load; when it holds all the time the run is power-bound.",
    "hw-slowdown": "The hardware cut the clocks (often by half or more): too hot, or the "
    "power supply asked it to. Look at temperature and power, and at the node.",
    "sync-boost": "Clocks are held down to match other GPUs in a sync-boost group.",
    "sw-thermal-slowdown": "The driver lowered clocks to keep the GPU or its memory below "
    "their maximum operating temperature.",
    "hw-thermal-slowdown": "The hardware lowered clocks because the GPU is too hot: a cooling "
    "problem on the node.",
    "hw-power-brake-slowdown": "An external power brake (the system's power supply) slowed "
    "the GPU: a problem with the node's power.",
    "display-clock-setting": "Clocks are held to match the display clock setting (rare on "
    "data-centre GPUs).",
}

_THROTTLE_QUERIES = """
The share of the last hour each reason held a run's GPUs:

```promql
avg_over_time(akka_optimize_training_gpu_throttle{akka_optimize_training_run_id="RUN_ID"}[1h])
```

`sw-power-cap` now and then is expected on a busy GPU. Any of `hw-slowdown`,
`hw-thermal-slowdown` or `hw-power-brake-slowdown` points at the node rather than the run: the
same step on another node will be faster. A short event between two samples can be missed;
DCGM's clock-event reasons field shows the same bits at DCGM's own rate.
"""

_XID = """\
## XID errors

`akka.optimize.training.gpu.xid.errors` counts the XID errors the driver reports for a job's
GPUs through NVML events, by XID code, as they arrive. Any increase deserves a look at the
node's kernel log; codes such as 48 (double-bit ECC error), 63 and 64 (row remapping), 74
(NVLink error), 79 (the GPU fell off the bus) and 94/95 (contained and uncontained ECC errors)
mean the GPU or the node needs attention, and usually explain a run that failed or slowed on
it. `akka.optimize.training.gpu.ecc.errors` counts corrected and uncorrected ECC errors since
the driver loaded.

Without NVML (no NVIDIA driver, as on a CPU-only machine) a job logs once that GPU health is
off and publishes no GPU health series.
"""

_FILES = """\
## Files beside a job's artifacts

- `metrics.jsonl`: one JSON line per completed step,
  `{"step": 12, "kind": "rl", "time": 1767225600.123, "figures": {"reward/mean": 0.41, ...}}`
  (a figure that is not a finite number is written as `null`). A step's line is written within
  half a second of its end: the lines of steps that end within that time are written together,
  and all of them before the job exits.
- `tensorboard/`: the same figures as TensorBoard scalars named `<kind>/<figure>`
  (`tensorboard --logdir` on the artifacts directory shows them). When the job exits they are
  kept with the run in the trainer's storage, at `runs/RUN/attempts/N/tensorboard/`.

With `trainer.tracking.mlflow-uri` set, every step's figures also go to the run's MLflow run;
see [Experiment tracking in MLflow](experiment-tracking.md).
"""


if __name__ == "__main__":
    main()
