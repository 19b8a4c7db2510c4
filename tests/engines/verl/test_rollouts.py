"""verl's rollout dump joined with our reward records.

``fixtures/rollouts/<step>.jsonl`` were written by verl 0.9.1's V1 trainer code
(``PPOTrainer._write_generations``, with what ``_log_rollout_data`` passes it), and
``fixtures/records/worker-0.jsonl`` by our reward function called through verl's
``NaiveRewardManager``, for the same rollouts: see ``fixtures/make_fixtures.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from akka_training.engines.verl.records import RecordReader, RecordWriter, RewardRecord
from akka_training.engines.verl.rollouts import MISSING_RECORD, RolloutJoiner, read_dump
from tests.engines.verl.conftest import FIXTURES

WEIGHTS = {"correct": 1.0, "format": 0.2}


def joiner_over(tmp_path: Path, records: bool = True) -> RolloutJoiner:
    shutil.copytree(FIXTURES / "rollouts", tmp_path / "rollouts")
    (tmp_path / "records").mkdir()
    if records:
        shutil.copy(FIXTURES / "records" / "worker-0.jsonl", tmp_path / "records" / "host-1.jsonl")
    return RolloutJoiner(tmp_path / "rollouts", tmp_path / "records", WEIGHTS, expected=8)


def test_each_dump_row_gets_its_record(tmp_path: Path) -> None:
    joiner = joiner_over(tmp_path)
    step = joiner.take(1)
    assert step is not None and step.unmatched == 0
    assert [r.index for r in step.rollouts] == list(range(8))
    assert [r.group for r in step.rollouts] == [0, 0, 0, 0, 1, 1, 1, 1]
    dump = [
        json.loads(line) for line in (FIXTURES / "rollouts" / "1.jsonl").read_text().splitlines()
    ]
    for rollout, row in zip(step.rollouts, dump, strict=True):
        assert (rollout.completion, rollout.expected, rollout.step) == (
            row["output"],
            row["gts"],
            1,
        )
        assert rollout.score == row["score"]
        assert sum(rollout.shares.values()) == rollout.score
        assert rollout.weights == WEIGHTS
        assert isinstance(rollout.prompt, list) and rollout.prompt[-1]["role"] == "user"
    first = step.rollouts[0]
    assert first.prompt == [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": "What is 2 + 3?"},
    ]
    assert (first.shares, first.finish_reason) == ({"correct": 1.0, "format": 0.2}, "stop")
    assert first.completion_tokens > 0
    assert step.reward_seconds is not None and step.reward_seconds > 0


def test_steps_share_the_record_pool(tmp_path: Path) -> None:
    joiner = joiner_over(tmp_path)
    # step 3 repeats step 1's prompts; each takes its own records
    taken = [joiner.take(s) for s in (1, 2, 3)]
    assert all(t is not None and t.unmatched == 0 for t in taken)
    assert [t.step for t in taken if t] == [1, 2, 3]


def test_an_incomplete_dump_waits_unless_verl_has_exited(tmp_path: Path) -> None:
    joiner = joiner_over(tmp_path)
    path = joiner.dump_path(2)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]) + lines[5][:10])  # verl's thread is still writing
    assert joiner.take(2) is None
    path.write_bytes(b"".join(lines[:5]))
    assert joiner.take(2) is None  # 5 of 8 rollouts
    final = joiner.take(2, final=True)
    assert final is not None and len(final.rollouts) == 5
    assert joiner.take(7, final=True) is None  # no dump at all


def test_rollouts_without_record_keep_verl_score(tmp_path: Path) -> None:
    joiner = joiner_over(tmp_path, records=False)
    step = joiner.take(1)
    assert step is not None and step.unmatched == 8 and step.reward_seconds is None
    assert step.rollouts[0].explanations == {"record": MISSING_RECORD}
    assert step.rollouts[0].score == 1.2
    prompt = step.rollouts[0].prompt
    assert isinstance(prompt, str) and prompt.startswith("system\nYou are a careful calculator.")


def test_padding_rows_are_left_out(tmp_path: Path) -> None:
    path = tmp_path / "1.jsonl"
    rows = [
        json.loads(line) for line in (FIXTURES / "rollouts" / "1.jsonl").read_text().splitlines()
    ]
    rows.append(rows[0] | {"uid": "pad0123_0_0"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dump = read_dump(path)
    assert dump is not None and len(dump) == 8


def test_records_are_read_incrementally_across_processes(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path)
    reader = RecordReader(tmp_path)
    record = RewardRecord.from_json(
        json.loads((FIXTURES / "records" / "worker-0.jsonl").read_text().splitlines()[0])
    )
    writer.write(record)
    (tmp_path / "other-7.jsonl").write_text(record.to_line() + record.to_line()[:20])
    assert len(reader.new_records()) == 2  # the other process's second line is not finished
    assert reader.new_records() == []
    writer.write(record)
    assert [r.completion for r in reader.new_records()] == ["#### 5"]
    writer.close()
