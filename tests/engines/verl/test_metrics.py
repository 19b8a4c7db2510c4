"""verl's file-logger lines as our step figures.

The fixture ``fixtures/metrics.jsonl`` was written by verl 0.9.1's own file logger
(``verl.utils.tracking.Tracking`` with the ``file`` backend), fed with what the V1 trainer
computes per step (``compute_data_metrics``, ``compute_timing_metrics``,
``compute_throughout_metrics`` on a real batch) plus the actor's update metrics under verl's
names with synthetic values: see ``fixtures/make_fixtures.py``, which
``test_fixtures.py`` runs again.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from akka_training.engines.verl.metrics import GIB, MetricsTail, read_steps, step_figures
from tests.engines.verl.conftest import FIXTURES


def fixture_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / "metrics.jsonl").read_text().splitlines()]


def test_fixture_steps_are_read_in_order() -> None:
    steps = read_steps(FIXTURES / "metrics.jsonl")
    assert [s.step for s in steps] == [1, 2, 3]


def test_verl_names_become_our_figures() -> None:
    data = fixture_lines()[1]["data"]
    figures = step_figures(data)
    assert figures["policy_loss"] == data["actor/pg_loss"]
    assert figures["tokens"] == data["perf/total_num_tokens"]
    assert figures["tokens_per_second"] == pytest.approx(
        data["perf/total_num_tokens"] / data["perf/time_per_step"]
    )
    # verl's throughput is per GPU; the fixture's step ran on 2
    assert figures["tokens_per_second"] == pytest.approx(2 * data["perf/throughput"])
    assert figures["tokens_per_second_per_gpu"] == data["perf/throughput"]
    assert figures["mfu"] == data["perf/mfu/actor"]
    assert figures["timing/generation"] == data["timing_s/gen"]
    assert figures["timing/update"] == data["timing_s/update_actor"]
    assert figures["timing/step"] == data["timing_s/step"]
    assert figures["timing/save"] == data["timing_s/save_checkpoint"]
    assert "timing/reward" not in figures  # verl's V1 trainer scores inside generation
    assert figures["completions/mean_length"] == data["response_length/mean"]
    assert figures["completions/max_length"] == data["response_length/max"]
    assert figures["completions/min_length"] == data["response_length/min"]
    assert figures["completions/clipped_ratio"] == data["response_length/clip_ratio"]
    assert figures["reward/mean"] == data["critic/score/mean"]
    assert figures["reward/max"] == data["critic/score/max"]
    assert figures["reward/min"] == data["critic/score/min"]
    assert figures["entropy"] == data["actor/entropy"]
    assert figures["kl"] == data["actor/kl_loss"]
    assert figures["clip_ratio/region_mean"] == data["actor/pg_clipfrac"]
    assert figures["learning_rate"] == data["actor/lr"]
    # verl 0.9.1's V1 trainer logs the worker's memory figures under actor/.
    assert "perf/max_memory_reserved_gb" not in data
    assert figures["memory/peak"] == data["actor/perf/max_memory_allocated_gb"] * GIB
    assert figures["memory/reserved"] == data["actor/perf/max_memory_reserved_gb"] * GIB
    assert "timing/save" not in step_figures(fixture_lines()[0]["data"])


def test_memory_figures_are_read_under_either_name() -> None:
    # The legacy trainer (and verl before the V1 trainer) logs them unprefixed.
    legacy = step_figures({"perf/max_memory_allocated_gb": 1.5, "perf/max_memory_reserved_gb": 2.0})
    assert (legacy["memory/peak"], legacy["memory/reserved"]) == (1.5 * GIB, 2.0 * GIB)
    both = step_figures(
        {"actor/perf/max_memory_allocated_gb": 3.0, "perf/max_memory_allocated_gb": 1.0}
    )
    assert both["memory/peak"] == 3.0 * GIB  # the V1 trainer's name wins


def test_reward_timing_and_validation_when_verl_logs_them() -> None:
    figures = step_figures(
        {
            "timing_s/reward": 0.5,
            "val-core/maths/train/reward/mean@1": 0.75,
            "actor/entropy": float("nan"),
        }
    )
    assert figures == {"timing/reward": 0.5, "eval/reward/mean": 0.75}


def test_a_non_finite_loss_is_kept_as_the_run_diverged() -> None:
    # The step pipeline fails (or pauses) the run on it; other non-finite figures are dropped.
    figures = step_figures(
        {"actor/pg_loss": float("nan"), "actor/grad_norm": float("inf"), "actor/entropy": 1.0}
    )
    assert math.isnan(figures["policy_loss"])
    assert figures["grad_norm"] == math.inf


def test_tail_returns_new_complete_steps_only(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.new_steps() == []  # verl has not created the file yet
    lines = (FIXTURES / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1][:40])
    assert [s.step for s in tail.new_steps()] == [1]
    assert tail.new_steps() == []  # step 2 is half written
    with open(path, "ab") as f:
        f.write(lines[1][40:] + lines[2])
    steps = tail.new_steps()
    assert [s.step for s in steps] == [2, 3]
    assert steps[0].figures["policy_loss"] == -0.02
    assert tail.new_steps() == []


def test_validation_line_before_training_is_not_a_step(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    shutil.copy(FIXTURES / "metrics.jsonl", path)
    content = path.read_text()
    path.write_text(
        json.dumps({"step": 0, "data": {"val-core/maths/train/reward/mean@1": 0.1}})
        + "\n"
        + content
    )
    assert [s.step for s in read_steps(path)] == [1, 2, 3]
