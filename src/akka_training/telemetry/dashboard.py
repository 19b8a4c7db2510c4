"""Builds the provisioned Grafana dashboard from the catalog's Prometheus names.

    python -m akka_training.telemetry.dashboard > deploy/grafana/dashboard.json
    python -m akka_training.telemetry.dashboard --project maths > maths/dashboard.json

The dashboard has the fixed uid ``akka-training`` (the links `GrafanaLinks` prints open it) and
the variables ``project``, ``run`` and ``attempt`` (the run panels), and ``evaluation`` (the
evaluation panels: the metrics with their intervals, samples, time by part, completion lengths).
The Serving row shows the project's endpoints from the front door's GenAI metrics: requests,
request duration, time to first token, time per output token and tokens per second. Every metric is named through
`catalog.prometheus_name`, so a renamed metric changes the dashboard with it; a test keeps the
file in deploy/ equal to this output.

With ``--project P`` the dashboard is locked to one project, for that project's Grafana
organisation: ``project`` is a hidden constant (a link's ``var-project`` cannot change it) and
the run list holds that project's runs only.

The service's series are aggregated so that none shows twice: the capacity gauges are the same
whichever replica or path reports them (``max by`` their own labels), and the failure counter
is summed by project and reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from akka_training.telemetry import catalog as c

UID = "akka-training"
TITLE = "akka training"

_PROJECT = c.prometheus_label(c.PROJECT)
_RUN = c.prometheus_label(c.RUN_ID)
_ATTEMPT = c.prometheus_label(c.RUN_ATTEMPT)
# The selector every job panel uses.
_SEL = f'{_PROJECT}="$project", {_RUN}="$run", {_ATTEMPT}=~"$attempt"'
_EVALUATION = c.prometheus_label(c.EVALUATION_ID)
# The selector of the evaluation panels (their jobs have no run attempt).
_EVAL_SEL = f'{_PROJECT}="$project", {_EVALUATION}=~"$evaluation"'


def build(project: str | None = None) -> dict[str, Any]:
    """The dashboard; with `project`, locked to that project."""
    layout = _Layout()
    for title, panels in _sections():
        layout.row(title)
        for panel in panels:
            layout.add(panel)
    return {
        "uid": UID,
        "title": TITLE,
        "description": "A training run of akka training: progress, loss and reward, reward "
        "graders, timings, memory, GPU health, the pools' capacity over time, the "
        "project's evaluations, and its endpoints' requests (OpenTelemetry GenAI metrics).",
        "tags": ["akka-training"],
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": _variables(project)},
        "annotations": {"list": []},
        "links": [],
        "panels": layout.panels,
    }


def render(project: str | None = None) -> str:
    return json.dumps(build(project), indent=2) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m akka_training.telemetry.dashboard")
    parser.add_argument("--project", help="lock the dashboard to this project")
    args = parser.parse_args(argv)
    sys.stdout.write(render(args.project))


# --- panels ---------------------------------------------------------------------------------------


def _n(short: str) -> str:
    """The Prometheus name of a catalog metric."""
    return c.prometheus_name(c.metric(c.PREFIX + short))


def _job(short: str, suffix: str = "") -> str:
    return f"{_n(short)}{suffix}{{{_SEL}}}"


def _evaluation(short: str, suffix: str = "") -> str:
    return f"{_n(short)}{suffix}{{{_EVAL_SEL}}}"


def _once(short: str, by: str, selector: str = "") -> str:
    """A service gauge once per label set: every replica of the service (and either export
    path) reports the same value from the same tables."""
    return f"max by ({by}) ({_n(short)}{selector})"


def _quantiles(
    short: str, by: str = "", qs: tuple[float, ...] = (0.1, 0.5, 0.9)
) -> list[tuple[str, str]]:
    group = f"le{', ' + by if by else ''}"
    legend = f"{{{{{by}}}}} " if by else ""
    return [
        (
            f"histogram_quantile({q}, sum by ({group}) "
            f"(rate({_job(short, '_bucket')}[$__rate_interval])))",
            f"{legend}p{round(q * 100)}",
        )
        for q in qs
    ]


def _mean_of(short: str, by: str) -> tuple[str, str]:
    return (
        f"sum by ({by}) (rate({_job(short, '_sum')}[$__rate_interval])) / "
        f"sum by ({by}) (rate({_job(short, '_count')}[$__rate_interval]))",
        f"{{{{{by}}}}}",
    )


def _sections() -> list[tuple[str, list[dict[str, Any]]]]:
    phase = c.prometheus_label(c.STEP_PHASE)
    term = c.prometheus_label(c.REWARD_TERM)
    cause = c.prometheus_label(c.REWARD_FAILURE_CAUSE)
    token_type = c.prometheus_label(c.TOKEN_TYPE)
    part = c.prometheus_label(c.MEMORY_PART)
    bound = c.prometheus_label(c.CLIP_BOUND)
    uuid = c.prometheus_label(c.GPU_UUID)
    reason = c.prometheus_label(c.GPU_THROTTLE_REASON)
    xid = c.prometheus_label(c.GPU_XID)
    ecc = c.prometheus_label(c.GPU_ECC_TYPE)
    pool = c.prometheus_label(c.POOL_NAME)
    state = c.prometheus_label(c.CLAIM_STATE)
    run_phase = c.prometheus_label(c.RUN_PHASE)
    evaluation_state = c.prometheus_label(c.EVALUATION_STATE)
    evaluation_phase = c.prometheus_label(c.EVALUATION_PHASE)
    metric = c.prometheus_label(c.EVALUATION_METRIC)
    project_sel = f'{{{_PROJECT}="$project"}}'
    pools = f"{pool}, {c.prometheus_label(c.POOL_ACCELERATOR)}"
    failure = c.prometheus_label(c.FAILURE_REASON)
    return [
        (
            "Progress",
            [
                _ts(
                    "Completed steps",
                    [(_job("sft.step.count"), "sft"), (_job("rl.step.count"), "rl")],
                    "none",
                ),
                _ts(
                    "Steps per minute",
                    [
                        (f"60 * rate({_job('sft.step.count')}[$__rate_interval])", "sft"),
                        (f"60 * rate({_job('rl.step.count')}[$__rate_interval])", "rl"),
                    ],
                    "none",
                ),
                _ts(
                    "Job state",
                    [
                        (
                            f"time() - {_job('job.heartbeat.timestamp')}",
                            "seconds since heartbeat",
                        ),
                        (_job("job.stalled"), "stalled"),
                        (f"{_job('job.phase')} == 1", f"{{{{{run_phase}}}}}"),
                    ],
                    "none",
                ),
            ],
        ),
        (
            "Loss and reward",
            [
                _ts(
                    "Loss (sft, dpo)",
                    [(_job("sft.loss"), "train"), (_job("sft.eval.loss"), "eval")],
                    "none",
                ),
                _ts(
                    "Preference rewards (dpo)",
                    [
                        (_job("dpo.rewards.chosen"), "chosen"),
                        (_job("dpo.rewards.rejected"), "rejected"),
                        (_job("dpo.rewards.margin"), "margin"),
                    ],
                    "none",
                ),
                _ts(
                    "Pairs ranked right (dpo)",
                    [(_job("dpo.rewards.accuracy.ratio"), "accuracy")],
                    "percentunit",
                ),
                _ts(
                    "Reward mean and spread",
                    [
                        (_job("rl.reward.mean"), "mean"),
                        (_job("rl.reward.std"), "std"),
                        (_job("rl.reward.min"), "min"),
                        (_job("rl.reward.max"), "max"),
                    ],
                    "none",
                ),
                _ts("Reward percentiles", _quantiles("rl.rollout.reward"), "none"),
                _heatmap(
                    "Reward distribution",
                    f"sum by (le) (increase({_job('rl.rollout.reward', '_bucket')}[$__interval]))",
                ),
                _ts(
                    "Term shares (mean)",
                    [(_job("rl.term.share.mean"), f"{{{{{term}}}}}")],
                    "none",
                ),
                _ts(
                    "Term shares (spread)",
                    [(_job("rl.term.share.std"), f"{{{{{term}}}}}")],
                    "none",
                ),
                _ts(
                    "Term share median per term",
                    _quantiles("rl.rollout.term.share", term, (0.5,)),
                    "none",
                ),
            ],
        ),
        (
            "Completions and policy",
            [
                _ts(
                    "Completion length",
                    [
                        (_job("rl.completion.length.min"), "min"),
                        (_job("rl.completion.length.mean"), "mean"),
                        (_job("rl.completion.length.max"), "max"),
                        (_job("rl.completion.terminated.length.mean"), "mean terminated"),
                    ],
                    "none",
                ),
                _ts(
                    "Completion length tail",
                    _quantiles("rl.rollout.completion.length", "", (0.5, 0.9, 0.99)),
                    "none",
                ),
                _ts(
                    "Shares of the step",
                    [
                        (_job("rl.completion.truncated.ratio"), "completions truncated"),
                        (_job("rl.policy.clipped.ratio"), f"clipped at {{{{{bound}}}}}"),
                        (_job("rl.reward.zero_std.ratio"), "prompt groups without signal"),
                        (_job("rl.reward.zero.ratio"), "rollouts scoring 0"),
                        (_job("rl.reward.full.ratio"), "rollouts scoring full"),
                    ],
                    "percentunit",
                ),
                _ts(
                    "KL, entropy, policy loss",
                    [
                        (_job("rl.kl"), "kl"),
                        (_job("rl.entropy"), "entropy"),
                        (_job("rl.policy.loss"), "policy loss"),
                    ],
                    "none",
                ),
                _ts(
                    "Tools",
                    [
                        (_job("rl.tool.calls"), "calls per completion"),
                        (_job("rl.tool.failure.ratio"), "failure share"),
                    ],
                    "none",
                ),
            ],
        ),
        (
            "Reward graders",
            [
                _ts(
                    "Scoring time per rollout (p50, p95)",
                    _quantiles("reward.term.timing", term, (0.5, 0.95)),
                    "s",
                ),
                _ts(
                    "Scoring failures per second",
                    [
                        (
                            f"sum by ({term}, {cause}) "
                            f"(rate({_job('reward.term.failures')}[$__rate_interval]))",
                            f"{{{{{term}}}}} {{{{{cause}}}}}",
                        )
                    ],
                    "none",
                ),
                _ts(
                    "Judge tokens per second",
                    [
                        (
                            f"sum by ({term}, {token_type}) "
                            f"(rate({_job('reward.judge.tokens')}[$__rate_interval]))",
                            f"{{{{{term}}}}} {{{{{token_type}}}}}",
                        )
                    ],
                    "none",
                ),
            ],
        ),
        (
            "Timing and throughput",
            [
                _ts("Step phases (rl, mean)", [_mean_of("rl.step.timing", phase)], "s"),
                _ts("Step phases (sft, mean)", [_mean_of("sft.step.timing", phase)], "s"),
                _ts(
                    "Throughput",
                    [(_job("step.throughput"), "tokens/s")],
                    "none",
                ),
                _ts("Tokens per step", [(_job("step.tokens"), "tokens")], "none"),
                _ts("MFU", [(_job("step.mfu.ratio"), "MFU")], "percentunit"),
            ],
        ),
        (
            "Memory and data",
            [
                _ts(
                    "Device memory at the step's peak",
                    [
                        (_job("memory.peak"), f"{{{{{part}}}}}"),
                    ],
                    "bytes",
                    stacked=True,
                ),
                _ts(
                    "Reserved and host",
                    [
                        (_job("memory.allocated.peak"), "device allocated"),
                        (_job("memory.reserved"), "device reserved"),
                        (_job("memory.host.peak"), "host peak"),
                    ],
                    "bytes",
                ),
                _ts(
                    "Data fit",
                    [
                        (_job("data.rows.truncated"), "rows truncated"),
                        (_job("data.answers.truncated"), "answers truncated"),
                        (_job("data.rows.dropped"), "rows dropped"),
                    ],
                    "none",
                ),
                _ts("Padding share", [(_job("data.padding.ratio"), "padding")], "percentunit"),
            ],
        ),
        (
            "GPU health",
            [
                _ts(
                    "Utilisation",
                    [(_job("gpu.utilization.ratio"), f"{{{{{uuid}}}}}")],
                    "percentunit",
                ),
                _ts("Power", [(_job("gpu.power"), f"{{{{{uuid}}}}}")], "watt"),
                _ts("Temperature", [(_job("gpu.temperature"), f"{{{{{uuid}}}}}")], "celsius"),
                _ts("Memory used", [(_job("gpu.memory.used"), f"{{{{{uuid}}}}}")], "bytes"),
                _ts(
                    "Clocks",
                    [
                        (_job("gpu.clock.sm"), f"SM {{{{{uuid}}}}}"),
                        (_job("gpu.clock.memory"), f"memory {{{{{uuid}}}}}"),
                    ],
                    "hertz",
                ),
                _ts(
                    "Throttle reasons active",
                    [(f"{_job('gpu.throttle')} == 1", f"{{{{{reason}}}}} {{{{{uuid}}}}}")],
                    "none",
                ),
                _ts(
                    "XID and ECC errors",
                    [
                        (
                            f"increase({_job('gpu.xid.errors')}[$__rate_interval])",
                            f"XID {{{{{xid}}}}} {{{{{uuid}}}}}",
                        ),
                        (
                            f"increase({_job('gpu.ecc.errors')}[$__rate_interval])",
                            f"ECC {{{{{ecc}}}}} {{{{{uuid}}}}}",
                        ),
                    ],
                    "none",
                ),
            ],
        ),
        (
            "Capacity over time",
            [
                _ts(
                    "Pool devices",
                    [
                        (_once("pool.devices.declared", pools), f"declared {{{{{pool}}}}}"),
                        (_once("pool.devices.observed", pools), f"observed {{{{{pool}}}}}"),
                        (_once("pool.devices.claimed", pools), f"claimed {{{{{pool}}}}}"),
                    ],
                    "none",
                ),
                _ts(
                    "Claims by state",
                    [
                        (
                            _once("pool.claims", f"{pools}, {state}"),
                            f"{{{{{pool}}}}} {{{{{state}}}}}",
                        )
                    ],
                    "none",
                    stacked=True,
                ),
                _ts(
                    "Project devices and quota",
                    [
                        (_once("project.devices.claimed", _PROJECT, project_sel), "claimed"),
                        (_once("project.devices.quota", _PROJECT, project_sel), "quota"),
                    ],
                    "none",
                ),
                _ts(
                    "Project runs by phase",
                    [
                        (
                            _once("runs", f"{_PROJECT}, {run_phase}", project_sel),
                            f"{{{{{run_phase}}}}}",
                        )
                    ],
                    "none",
                    stacked=True,
                ),
                _ts(
                    "Project evaluations by state",
                    [
                        (
                            _once("evaluations", f"{_PROJECT}, {evaluation_state}", project_sel),
                            f"{{{{{evaluation_state}}}}}",
                        )
                    ],
                    "none",
                    stacked=True,
                ),
                _ts(
                    "Run failures",
                    [
                        (
                            f"sum by ({failure}) "
                            f"(increase({_n('run.failures')}{project_sel}[$__rate_interval]))",
                            f"{{{{{failure}}}}}",
                        )
                    ],
                    "none",
                ),
            ],
        ),
        (
            "Evaluations",
            [
                _ts(
                    "Evaluation metrics (mean, 95% interval)",
                    [
                        (
                            f"max by ({_EVALUATION}, {metric}) "
                            f"({_evaluation('evaluation.metric.' + bound)})",
                            f"{{{{{_EVALUATION}}}}} {{{{{metric}}}}} {bound}",
                        )
                        for bound in ("mean", "low", "high")
                    ],
                    "none",
                ),
                _ts(
                    "Evaluation samples",
                    [
                        (
                            f"sum by ({_EVALUATION}) ({_evaluation('evaluation.samples')})",
                            f"{{{{{_EVALUATION}}}}} generated",
                        ),
                        (
                            f"sum by ({_EVALUATION}) ({_evaluation('evaluation.samples.scored')})",
                            f"{{{{{_EVALUATION}}}}} scored",
                        ),
                    ],
                    "none",
                ),
                _ts(
                    "Evaluation time by part",
                    [
                        (
                            f"sum by ({_EVALUATION}, {evaluation_phase}) "
                            f"({_evaluation('evaluation.phase.duration', '_sum')})",
                            f"{{{{{_EVALUATION}}}}} {{{{{evaluation_phase}}}}}",
                        )
                    ],
                    "s",
                    stacked=True,
                ),
                _ts(
                    "Evaluation completion length",
                    [
                        (
                            f"histogram_quantile({q}, sum by (le, {_EVALUATION}) "
                            f"({_evaluation('evaluation.completion.length', '_bucket')}))",
                            f"{{{{{_EVALUATION}}}}} p{round(q * 100)}",
                        )
                        for q in (0.5, 0.9, 0.99)
                    ],
                    "none",
                ),
            ],
        ),
        ("Serving", _serving()),
    ]


def _serving() -> list[dict[str, Any]]:
    """The front door's GenAI histograms for the project's endpoints: every replica of the
    service counts its own requests, so series are summed."""
    endpoint = c.prometheus_label(c.ENDPOINT)
    model = c.prometheus_label(c.GENAI_REQUEST_MODEL)
    error = c.prometheus_label(c.ERROR_TYPE)
    token_type = c.prometheus_label(c.TOKEN_TYPE)
    sel = f'{{{_PROJECT}="$project"}}'
    duration = c.prometheus_name(c.metric("gen_ai.server.request.duration"))
    usage = c.prometheus_name(c.metric("gen_ai.client.token.usage"))

    def quantiles(name: str) -> list[tuple[str, str]]:
        series = c.prometheus_name(c.metric(name))
        return [
            (
                f"histogram_quantile({q}, sum by (le, {endpoint}) "
                f"(rate({series}_bucket{sel}[$__rate_interval])))",
                f"{{{{{endpoint}}}}} p{round(q * 100)}",
            )
            for q in (0.5, 0.9, 0.99)
        ]

    return [
        _ts(
            "Front door requests",
            [
                (
                    f"sum by ({endpoint}, {model}) "
                    f'(rate({duration}_count{{{_PROJECT}="$project", {error}=""}}'
                    "[$__rate_interval]))",
                    f"{{{{{endpoint}}}}} {{{{{model}}}}}",
                ),
                (
                    f"sum by ({endpoint}, {error}) "
                    f'(rate({duration}_count{{{_PROJECT}="$project", {error}!=""}}'
                    "[$__rate_interval]))",
                    f"{{{{{endpoint}}}}} failed {{{{{error}}}}}",
                ),
            ],
            "reqps",
        ),
        _ts("Request duration", quantiles("gen_ai.server.request.duration"), "s"),
        _ts("Time to first token", quantiles("gen_ai.server.time_to_first_token"), "s"),
        _ts("Time per output token", quantiles("gen_ai.server.time_per_output_token"), "s"),
        _ts(
            "Tokens per second",
            [
                (
                    f"sum by ({endpoint}, {token_type}) (rate({usage}_sum{sel}[$__rate_interval]))",
                    f"{{{{{endpoint}}}}} {{{{{token_type}}}}}",
                )
            ],
            "none",
        ),
    ]


def _ts(
    title: str, queries: list[tuple[str, str]], unit: str, *, stacked: bool = False
) -> dict[str, Any]:
    custom: dict[str, Any] = {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    if stacked:
        custom.update(stacking={"mode": "normal", "group": "A"}, fillOpacity=40)
    return {
        "type": "timeseries",
        "title": title,
        "datasource": _DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "range": True}
            for i, (expr, legend) in enumerate(queries)
        ],
    }


def _heatmap(title: str, expr: str) -> dict[str, Any]:
    return {
        "type": "heatmap",
        "title": title,
        "datasource": _DATASOURCE,
        "options": {"calculate": False, "yAxis": {"unit": "none"}, "cellGap": 1},
        "targets": [{"refId": "A", "expr": expr, "format": "heatmap", "legendFormat": "{{le}}"}],
    }


def _variables(project: str | None) -> list[dict[str, Any]]:
    heartbeat = _n("job.heartbeat.timestamp")
    evaluated = _n("evaluation.samples")
    if project is None:
        project_var = _query_var("project", "Project", f"label_values({heartbeat}, {_PROJECT})")
    else:
        # Hidden and constant: the URL's var-project cannot move a locked dashboard elsewhere.
        project_var = {
            "name": "project",
            "label": "Project",
            "type": "constant",
            "hide": 2,
            "query": project,
            "current": {"text": project, "value": project},
            "options": [{"text": project, "value": project, "selected": True}],
        }
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
        },
        project_var,
        _query_var(
            "run",
            "Run",
            f'label_values({heartbeat}{{{_PROJECT}="$project"}}, {_RUN})',
        ),
        {
            **_query_var(
                "attempt",
                "Attempt",
                f'label_values({heartbeat}{{{_PROJECT}="$project", {_RUN}="$run"}}, {_ATTEMPT})',
            ),
            "includeAll": True,
            "allValue": ".*",
            "multi": True,
            "current": {"text": "All", "value": "$__all"},
        },
        {
            **_query_var(
                "evaluation",
                "Evaluation",
                f'label_values({evaluated}{{{_PROJECT}="$project"}}, {_EVALUATION})',
            ),
            "includeAll": True,
            "allValue": ".*",
            "multi": True,
            "current": {"text": "All", "value": "$__all"},
        },
    ]


def _query_var(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": _DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
    }


_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


class _Layout:
    """Places panels three to a line under full-width rows."""

    WIDTH, HEIGHT, PER_LINE = 8, 8, 3

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._y = 0
        self._column = 0

    def row(self, title: str) -> None:
        if self._column:
            self._y += self.HEIGHT
            self._column = 0
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "id": len(self.panels) + 1,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y},
                "panels": [],
            }
        )
        self._y += 1

    def add(self, panel: dict[str, Any]) -> None:
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {
            "h": self.HEIGHT,
            "w": self.WIDTH,
            "x": self._column * self.WIDTH,
            "y": self._y,
        }
        self.panels.append(panel)
        self._column += 1
        if self._column == self.PER_LINE:
            self._column = 0
            self._y += self.HEIGHT


if __name__ == "__main__":
    main()
