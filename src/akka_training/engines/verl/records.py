"""The record our reward function keeps of each rollout it scores under verl.

verl's own rollout dump holds the prompt, the completion and the total score only; the term
shares, timings and failures exist only inside the reward function. So the function appends
one JSON line per rollout to a file of its own process (``<host>-<pid>.jsonl``: verl scores in
several worker processes at once, and one writer per file needs no locking between them), and
the job joins these records with verl's dump (`rollouts.py`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from akka_training.engines.verl.reward_config import SETUP_ERROR_FILE
from akka_training.rewards.inputs import RolloutInput
from akka_training.rewards.scoring import ScoredRollout


@dataclass
class RewardRecord:
    """One scored rollout, as the reward function saw it."""

    started: float  # epoch seconds when scoring began
    seconds: float  # wall time of scoring this rollout, all terms
    split: str  # "train" or "eval" (the row's dataset)
    index: int  # the row's position in its dataset
    prompt: list[dict[str, Any]] | str
    completion: str
    expected: str | None
    completion_tokens: int
    finish_reason: str  # "stop" or "length"
    score: float
    shares: dict[str, float]
    values: dict[str, float]
    term_seconds: dict[str, float]
    failures: dict[str, str] = field(default_factory=dict)
    explanations: dict[str, str] = field(default_factory=dict)
    # Tokens each judge term's model read and wrote for this rollout.
    judge_prompt_tokens: dict[str, int] = field(default_factory=dict)
    judge_completion_tokens: dict[str, int] = field(default_factory=dict)
    # Tries each remote term made again for this rollout after a 429 or 5xx.
    retries: dict[str, int] = field(default_factory=dict)

    def rollout_input(self, group: int) -> RolloutInput:
        """What was scored (`group`: the prompt's index within its step)."""
        prompt = self.prompt if isinstance(self.prompt, str | list) else str(self.prompt)
        return RolloutInput(
            prompt=prompt,
            completion=self.completion,
            expected=self.expected,
            completion_tokens=self.completion_tokens,
            group=group,
            finish_reason="length" if self.finish_reason == "length" else "stop",
        )

    def scored(self) -> ScoredRollout:
        """What the reward gave it."""
        return ScoredRollout(
            score=self.score,
            shares=self.shares,
            values=self.values,
            seconds=self.term_seconds,
            failures=self.failures,
            explanations=self.explanations,
            retries=self.retries,
        )

    def to_line(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RewardRecord:
        return cls(**{k: body[k] for k in cls.__dataclass_fields__ if k in body})


class RecordWriter:
    """Appends records to this process's file; safe to share between threads."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept for the process)

    def write(self, record: RewardRecord) -> None:
        line = record.to_line()
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class RecordReader:
    """Reads the records of every process incrementally: each call returns the records that
    were completed since the previous one (a line still being written waits)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}

    def new_records(self) -> list[RewardRecord]:
        records: list[RewardRecord] = []
        if not self.directory.is_dir():
            return records
        for path in sorted(self.directory.glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            for line in chunk[:end].splitlines():
                if line.strip():
                    records.append(RewardRecord.from_json(json.loads(line)))
            self._offsets[path] = offset + end
        return records


def setup_error(directory: Path) -> str | None:
    """The message a reward worker left when it could not build the reward terms."""
    path = directory / SETUP_ERROR_FILE
    return path.read_text(encoding="utf-8").strip() if path.exists() else None


def write_setup_error(directory: Path, message: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SETUP_ERROR_FILE).write_text(message + "\n", encoding="utf-8")
