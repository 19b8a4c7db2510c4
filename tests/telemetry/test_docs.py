"""The generated reference, the dashboard and the alert rules stay true to the catalog."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from akka_training.telemetry import catalog as c
from akka_training.telemetry import dashboard, docs
from akka_training.telemetry.figures import mapping_rows
from tests.telemetry.promql import PROMTOOL, needs_promtool

REPO = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPO / "docs" / "observability.md"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboard.json"
ALERTS = REPO / "deploy" / "grafana" / "alerts.yaml"

_KNOWN = {s for m in c.METRICS for s in (c.prometheus_name(m), *c.prometheus_series(m))} | {
    c.prometheus_label(a.name) for a in c.ATTRIBUTES
}
_IDENTIFIER = re.compile(r"\bakka_optimize_training_[A-Za-z0-9_]+")
# The front door's metrics and labels keep OpenTelemetry's GenAI names.
_GENAI_IDENTIFIER = re.compile(r"\bgen_ai_[A-Za-z0-9_]+")


def test_observability_md_is_current() -> None:
    assert OBSERVABILITY.read_text() == docs.render(), (
        "docs/observability.md is stale: run "
        "`python -m akka_training.telemetry.docs > docs/observability.md`"
    )


def test_dashboard_json_is_current() -> None:
    assert DASHBOARD.read_text() == dashboard.render(), (
        "deploy/grafana/dashboard.json is stale: run "
        "`python -m akka_training.telemetry.dashboard > deploy/grafana/dashboard.json`"
    )


def test_the_reference_lists_every_name_and_the_promised_sections() -> None:
    text = docs.render()
    for m in c.METRICS:
        assert f"| `{m.name}` |" in text
        assert f"`{c.prometheus_name(m)}`" in text
    for s in c.SPANS:
        assert f"| `{s.name}` |" in text
    for a in c.ATTRIBUTES:
        assert f"| `{a.name}` |" in text
    for _kind, figure, _metric, _attrs in mapping_rows():
        assert f"`{figure}`" in text
    assert "increase(akka_optimize_training_rl_step_count_total[15m]) == 0" in text
    assert "increase(akka_optimize_training_sft_step_count_total[15m]) == 0" in text
    assert "keep their last values" in text
    assert "DCGM_FI_DEV_GPU_UTIL" in text and '"UUID"' in text
    assert "## Reading throttle reasons" in text
    for reason in c.THROTTLE_REASONS:
        assert f"| `{reason}` |" in text


def test_every_prometheus_name_in_docs_dashboard_and_alerts_is_in_the_catalog() -> None:
    texts = [docs.render(), DASHBOARD.read_text(), ALERTS.read_text()]
    texts.append((REPO / "docs" / "grafana.md").read_text())
    used = {name for text in texts for name in _IDENTIFIER.findall(text)}
    used |= {name for text in texts for name in _GENAI_IDENTIFIER.findall(text)}
    assert used - _KNOWN == set()
    assert len(used) > 40


def test_the_dashboard_has_its_uid_variables_and_panels() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "akka-training"
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "project", "run", "attempt", "evaluation"]
    titles = {p["title"] for p in board["panels"]}
    for wanted in (
        "Completed steps",
        "Reward percentiles",
        "Completion length tail",
        "Term shares (mean)",
        "Step phases (rl, mean)",
        "Throughput",
        "MFU",
        "Device memory at the step's peak",
        "Throttle reasons active",
        "Pool devices",
        "Evaluation metrics (mean, 95% interval)",
        "Evaluation time by part",
        "Front door requests",
        "Time to first token",
        "Time per output token",
        "Tokens per second",
    ):
        assert wanted in titles
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    run_label = c.prometheus_label(c.RUN_ID)
    evaluation_label = c.prometheus_label(c.EVALUATION_ID)
    service = {s for m in c.metrics_of(c.Publisher.SERVICE) for s in c.prometheus_series(m)}
    evaluation = {s for m in c.metrics_of(c.Publisher.EVALUATION) for s in c.prometheus_series(m)}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            used = set(_IDENTIFIER.findall(expr)) | set(_GENAI_IDENTIFIER.findall(expr))
            # Job panels select the run; capacity panels (service metrics) never name it;
            # evaluation panels select the project's evaluations.
            if used & service:
                assert run_label not in expr, expr
            elif used & evaluation:
                assert f'{evaluation_label}=~"$evaluation"' in expr, expr
                assert run_label not in expr, expr
            else:
                assert f'{run_label}="$run"' in expr, expr


def test_the_alert_rules_use_the_documented_stalled_queries() -> None:
    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    by_uid = {r["uid"]: r for r in rules}

    def flat(text: str) -> str:
        return " ".join(text.split())

    for kind in ("rl", "sft"):
        rule = by_uid[f"akka-training-{kind}-stalled"]
        expr = rule["data"][0]["model"]["expr"]
        assert flat(docs.stalled_query(kind)) in flat(expr)
        assert rule["condition"] == "C"
        assert rule["noDataState"] == "OK"
        assert flat(docs.stalled_query(kind)) in flat(docs.render())


@needs_promtool
@pytest.mark.parametrize("project", [None, "maths"])
def test_every_dashboard_query_parses_in_prometheus(tmp_path: Path, project: str | None) -> None:
    board = dashboard.build(project)
    grafana_vars = {
        "$__rate_interval": "2m",
        "$__interval": "1m",
        "$project": "maths",
        "$run": "run-1",
        "$attempt": ".*",
    }
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if v.get("type") == "query"]
    rules = []
    for i, expr in enumerate(exprs):
        for name, value in grafana_vars.items():
            expr = expr.replace(name, value)
        if expr.startswith("label_values("):
            # Grafana's variable function: its first argument is the PromQL selector.
            expr = expr.removeprefix("label_values(").rsplit(",", 1)[0]
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout + checked.stderr
