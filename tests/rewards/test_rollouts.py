"""Step files: round trip, ordering, limits, and the records built from a scored batch."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from akka_training.core.plans import MatchTerm, RegexTerm
from akka_training.rewards import rollouts
from akka_training.rewards.rollouts import (
    Rollout,
    read_step_file,
    rollouts_from_scores,
    step_file_bytes,
    step_summary,
    write_step_file,
)
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.terms import TermSpec

from .servers import rollout

WEIGHTS = {"correct": 1.0, "format": 0.2}
CHAT = [{"role": "user", "content": "Wie viel ist 6 × 7? 🤔"}]


def make(index: int, score: float, **extra: object) -> Rollout:
    fields: dict[str, object] = {
        "step": 7,
        "index": index,
        "group": index // 4,
        "prompt": CHAT,
        "completion": f"completion {index}\n#### 42",
        "expected": "#### 42",
        "score": score,
        "shares": {"correct": score, "format": 0.0},
        "values": {"correct": score, "format": 0.0},
        "completion_tokens": 10 + index,
        "finish_reason": "stop",
        "weights": dict(WEIGHTS),
    }
    fields.update(extra)
    return Rollout(**fields)  # type: ignore[arg-type]


def test_a_step_file_round_trips_every_field(tmp_path: Path) -> None:
    rollouts = [
        make(0, 1.0),
        make(
            1,
            0.0,
            prompt="plain string prompt",
            expected=None,
            finish_reason="length",
            tool_calls=3,
            tool_failures=1,
            failures={"correct": "error"},
            explanations={"correct": "the row has no expected answer to match"},
        ),
    ]
    path = tmp_path / "step-7.parquet"
    write_step_file(rollouts, path)
    assert read_step_file(path) == rollouts
    assert not list(tmp_path.glob(".*partial"))  # the atomic write left nothing behind


def test_the_file_is_zstd_parquet_with_typed_map_columns(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    write_step_file([make(i, i / 10) for i in range(40)], path)
    meta = pq.ParquetFile(path).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    schema = pq.read_schema(path)
    assert schema.field("shares").type.equals(pa.map_(pa.string(), pa.float64()))
    assert schema.field("failures").type.equals(pa.map_(pa.string(), pa.string()))
    table = pq.read_table(path, columns=["index"])
    assert table.column("index").to_pylist() == list(range(40))


def test_worst_and_best_sort_by_score_with_ties_in_index_order(tmp_path: Path) -> None:
    scores = [0.5, 0.0, 1.0, 0.0, 0.5, 1.0, 0.25, 0.0]
    path = tmp_path / "s.parquet"
    write_step_file([make(i, s) for i, s in reversed(list(enumerate(scores)))], path)
    worst = read_step_file(path, "worst", 4)
    best = read_step_file(path, "best", 3)
    assert [(r.index, r.score) for r in worst] == [(1, 0.0), (3, 0.0), (7, 0.0), (6, 0.25)]
    assert [(r.index, r.score) for r in best] == [(2, 1.0), (5, 1.0), (0, 0.5)]
    assert [r.index for r in read_step_file(path, limit=3)] == [0, 1, 2]
    assert len(read_step_file(path, "best")) == len(scores)


def test_worst_across_many_row_groups_returns_the_right_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows spread over 8 row groups; the picked rows come back whole and in order.
    monkeypatch.setattr(rollouts, "ROW_GROUP_ROWS", 32)
    scores = [((i * 37) % 101) / 100 for i in range(256)]
    path = tmp_path / "s.parquet"
    write_step_file([make(i, s) for i, s in enumerate(scores)], path)
    assert pq.ParquetFile(path).num_row_groups == 8
    expected = sorted(range(256), key=lambda i: (scores[i], i))[:10]
    worst = read_step_file(path, "worst", 10)
    assert [r.index for r in worst] == expected
    assert all(r.completion == f"completion {r.index}\n#### 42" for r in worst)
    best = read_step_file(path, "best", 10)
    assert [r.index for r in best] == sorted(range(256), key=lambda i: (-scores[i], i))[:10]


def test_a_step_file_reads_from_bytes_and_file_objects(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    write_step_file([make(0, 0.5), make(1, 1.0)], buffer)
    data = buffer.getvalue()
    assert [r.index for r in read_step_file(data, "best", 1)] == [1]
    assert len(read_step_file(io.BytesIO(data))) == 2


def test_a_step_file_built_in_memory_is_the_file_written_to_a_path(tmp_path: Path) -> None:
    rollouts = [make(i, i / 4) for i in reversed(range(4))]
    path = tmp_path / "s.parquet"
    write_step_file(rollouts, path)
    data = step_file_bytes(rollouts)
    assert data == path.read_bytes()
    assert [r.index for r in read_step_file(data)] == [0, 1, 2, 3]
    assert not list(tmp_path.glob(".*partial"))
    with pytest.raises(ValueError, match="one step"):
        step_file_bytes([make(0, 1.0), make(1, 1.0, step=8)])


def test_an_empty_step_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    write_step_file([], path)
    assert read_step_file(path, "worst", 10) == []


def test_one_file_holds_one_step(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one step"):
        write_step_file([make(0, 1.0), make(1, 1.0, step=8)], tmp_path / "s.parquet")


def test_step_summary_counts_and_bounds_the_scores() -> None:
    summary = step_summary([make(0, 0.25), make(1, 1.0), make(2, -0.5)])
    assert (summary.count, summary.best, summary.worst) == (3, 1.0, -0.5)
    assert (step_summary([]).count, step_summary([]).best, step_summary([]).worst) == (
        0,
        None,
        None,
    )


def test_records_from_a_scored_batch_carry_inputs_and_scores() -> None:
    terms: list[TermSpec] = [
        MatchTerm(name="correct", kind="match", mode="final-number"),
        RegexTerm(name="format", kind="regex", pattern=r"#### \d+$", weight=0.2),
    ]
    batch = [
        rollout("a\n#### 42", group=0, finish_reason="stop", tool_calls=2, tool_failures=1),
        rollout("b", expected=None, group=0, finish_reason="length", tokens=64),
    ]
    with RewardScorer(terms) as scorer:
        scored = scorer.score(batch)
        records = rollouts_from_scores(3, batch, scored, scorer.weights)
    first, second = records
    assert (first.step, first.index, first.score) == pytest.approx((3, 0, 1.2))
    assert (first.tool_calls, first.tool_failures) == (2, 1)
    assert first.weights == {"correct": 1.0, "format": 0.2}
    assert (second.index, second.finish_reason, second.completion_tokens) == (1, "length", 64)
    assert second.failures == {"correct": "error"}
    assert second.to_json()["finishReason"] == "length"
    assert second.to_json()["failures"] == {"correct": "error"}
