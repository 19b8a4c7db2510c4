"""verl's rollout dump joined with our reward records: the rollouts of each step.

With ``trainer.rollout_data_dir`` set, verl 0.9.1's V1 trainer writes ``<dir>/<step>.jsonl``
after each step (``PPOTrainer._log_rollout_data`` / ``_write_generations``), one line per
rollout, sorted by key::

    {"input": <decoded prompt>, "output": <decoded completion>, "gts": <ground truth>,
     "score": <total reward>, "step": N, "uid": "<prompt uid>_<session>_<index>"}

It writes the file from a background thread, so a step's file may still be growing when its
metrics line appears. The dump knows which rollouts belong to a step and how they group into
prompts; our reward function's records (`records.py`) know the prompt messages, the term
shares, timings and failures. A dump line and a record belong together when their completion
and expected answer are equal; among equal ones (the same answer sampled twice for a prompt,
which score the same) the oldest unused record is taken. Rows verl added only to pad a batch
(keys starting ``pad``) are left out.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from akka_training.engines.verl.records import RecordReader, RewardRecord
from akka_training.rewards.inputs import RolloutInput
from akka_training.rewards.rollouts import Rollout, rollout_record
from akka_training.rewards.scoring import ScoredRollout

MISSING_RECORD = "the reward function's record of this rollout was not found"


@dataclass
class DumpRow:
    """One line of verl's rollout dump."""

    prompt_text: str
    completion: str
    expected: str | None
    score: float
    step: int
    uid: str

    @property
    def prompt_uid(self) -> str:
        return self.uid.rsplit("_", 2)[0]


@dataclass
class StepRollouts:
    step: int
    rollouts: list[Rollout]
    # Seconds during which at least one rollout of the step was being scored (the union of
    # the scoring intervals), or None without records.
    reward_seconds: float | None
    # Rollouts of the dump without a reward record.
    unmatched: int
    # The reward records of the step's rollouts (for the reward timing and failure metrics).
    records: list[RewardRecord]


def read_dump(path: Path) -> list[DumpRow] | None:
    """A step's dump, or None while it does not exist or its last line is still being
    written."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if raw and not raw.endswith(b"\n"):
        return None
    rows = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        body = json.loads(line)
        uid = str(body.get("uid", ""))
        if uid.startswith("pad"):
            continue
        rows.append(
            DumpRow(
                prompt_text=str(body.get("input", "")),
                completion=str(body.get("output", "")),
                expected=None if body.get("gts") is None else str(body["gts"]),
                score=float(body.get("score", 0.0)),
                step=int(body.get("step", 0)),
                uid=uid,
            )
        )
    return rows


class RolloutJoiner:
    """Turns each step's dump into rollout records, joining our reward records.

    `expected` is the number of rollouts a step has (promptsPerStep x generationsPerPrompt):
    a step's dump counts as complete once it holds that many rows, or when `final` is passed
    (verl has exited and will write no more).
    """

    def __init__(
        self, dump_dir: Path, records_dir: Path, weights: Mapping[str, float], expected: int
    ) -> None:
        self.dump_dir = dump_dir
        self.weights = dict(weights)
        self.expected = expected
        self._reader = RecordReader(records_dir)
        self._pool: dict[tuple[str, str | None], deque[RewardRecord]] = defaultdict(deque)

    def dump_path(self, step: int) -> Path:
        return self.dump_dir / f"{step}.jsonl"

    def take(self, step: int, *, final: bool = False) -> StepRollouts | None:
        """The step's rollouts, or None while its dump is incomplete."""
        rows = read_dump(self.dump_path(step))
        if rows is None or (len(rows) < self.expected and not final):
            return None
        self._absorb()
        groups: dict[str, int] = {}
        rollouts: list[Rollout] = []
        used: list[RewardRecord] = []
        for index, row in enumerate(rows):
            group = groups.setdefault(row.prompt_uid, len(groups))
            record = self._claim(row)
            if record is not None:
                used.append(record)
            rollouts.append(self._rollout(step, index, group, row, record))
        return StepRollouts(
            step=step,
            rollouts=rollouts,
            reward_seconds=_busy_seconds(used) if used else None,
            unmatched=len(rows) - len(used),
            records=used,
        )

    # --- helpers ------------------------------------------------------------------------------

    def _absorb(self) -> None:
        for record in self._reader.new_records():
            if record.split == "train":
                self._pool[(record.completion, record.expected)].append(record)

    def _claim(self, row: DumpRow) -> RewardRecord | None:
        queue = self._pool.get((row.completion, row.expected))
        return queue.popleft() if queue else None

    def _rollout(
        self, step: int, index: int, group: int, row: DumpRow, record: RewardRecord | None
    ) -> Rollout:
        if record is not None:
            return rollout_record(
                step, index, record.rollout_input(group), record.scored(), self.weights
            )
        # Only verl's dump knows this rollout: its texts and total score, no terms.
        item = RolloutInput(
            prompt=row.prompt_text,
            completion=row.completion,
            expected=row.expected,
            completion_tokens=0,
            group=group,
        )
        result = ScoredRollout(
            score=row.score,
            shares={},
            values={},
            seconds={},
            explanations={"record": MISSING_RECORD},
        )
        return rollout_record(step, index, item, result, self.weights)


def _busy_seconds(records: list[RewardRecord]) -> float:
    """Length of the union of the records' [started, started + seconds] intervals."""
    intervals = sorted((r.started, r.started + r.seconds) for r in records)
    total, current_start, current_end = 0.0, intervals[0][0], intervals[0][1]
    for start, end in intervals[1:]:
        if start > current_end:
            total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + current_end - current_start
