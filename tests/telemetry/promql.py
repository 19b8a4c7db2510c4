"""Prometheus's own semantics over the trainer's real exposition: scrapes of the text that the
service's `/metrics` or a job's Prometheus reader writes, turned into a promtool unit test
(``promtool test rules``), so that `increase()`, `rate()` and the alert expressions are
evaluated by Prometheus's engine, not by a re-implementation of it."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus)"
)

Series = dict[str, list[float | None]]


def samples(text: str | bytes) -> dict[str, float]:
    """Every sample of a Prometheus text exposition, keyed by its series in PromQL notation
    (``name{label="value",...}``, labels sorted)."""
    if isinstance(text, bytes):
        text = text.decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[series_key(sample.name, sample.labels)] = float(sample.value)
    return out


def series_key(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def scrapes(texts: Sequence[str | bytes], names: Iterable[str]) -> Series:
    """The series named `names` across consecutive scrapes; None where a scrape did not hold
    the series (it did not exist yet)."""
    wanted = tuple(names)
    taken = [samples(t) for t in texts]
    keys = sorted({k for s in taken for k in s if k.split("{")[0] in wanted})
    return {k: [s.get(k) for s in taken] for k in keys}


def promtool_test(
    tmp_path: Path,
    series: Series,
    alerts: Mapping[str, str],
    expected: Mapping[str, Sequence[Mapping[str, str]]],
    *,
    interval: str = "1m",
    eval_time: str,
) -> subprocess.CompletedProcess[str]:
    """Run ``promtool test rules`` with `series` as input (one sample per interval), an alert
    rule per entry of `alerts` (name -> expression) and, at `eval_time`, the firing alerts
    `expected` per rule (each alert's labels). The completed process: returncode 0 when
    Prometheus's evaluation matched."""
    assert PROMTOOL is not None
    rules = {
        "groups": [
            {
                "name": "first-increments",
                "rules": [{"alert": name, "expr": expr} for name, expr in alerts.items()],
            }
        ]
    }
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(rules, sort_keys=False))
    test = {
        "rule_files": [rule_file.name],
        "evaluation_interval": interval,
        "tests": [
            {
                "interval": interval,
                "input_series": [
                    {"series": key, "values": " ".join(_value(v) for v in values)}
                    for key, values in series.items()
                ],
                "alert_rule_test": [
                    {
                        "eval_time": eval_time,
                        "alertname": name,
                        "exp_alerts": [{"exp_labels": dict(labels)} for labels in expected[name]],
                    }
                    for name in alerts
                ],
            }
        ],
    }
    test_file = tmp_path / "test.yaml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(
        [PROMTOOL, "test", "rules", test_file.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def without_first_scrape(series: Series) -> Series:
    """`series` as they would be had a counter appeared with its first value: the samples
    before its first increment are missing."""
    out: Series = {}
    for key, values in series.items():
        first_rise = next((i for i, v in enumerate(values) if v is not None and v > 0), len(values))
        missing: list[float | None] = [None] * first_rise
        out[key] = missing + values[first_rise:]
    return out


def labels_of(key: str) -> dict[str, str]:
    inner = key[key.index("{") + 1 : -1]
    out: dict[str, Any] = {}
    for part in _split_labels(inner):
        name, _, value = part.partition("=")
        out[name] = json.loads(value)
    return out


def _split_labels(inner: str) -> list[str]:
    parts, depth, current = [], False, ""
    for ch in inner:
        if ch == '"':
            depth = not depth
        if ch == "," and not depth:
            parts.append(current)
            current = ""
            continue
        current += ch
    if current:
        parts.append(current)
    return parts


def _value(v: float | None) -> str:
    return "_" if v is None else repr(float(v))
