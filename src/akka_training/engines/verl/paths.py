"""Where a verl job keeps its files.

Everything lives under one directory per run (`root`), so that a later attempt of the same run
(a resume) finds the checkpoints an earlier attempt left, while each attempt writes its own
metrics file (verl truncates its file logger's output when it starts), rollout dump and reward
records (a resumed attempt repeats step numbers an earlier one may have dumped).

    root/
      data/train.parquet, data/eval.parquet    the dataset in verl's layout (`data.py`)
      reward/config.json                       the reward terms, read inside verl's workers
      reward/records/attempt-K/<host>-<pid>.jsonl  one record per scored rollout (`reward_fn.py`)
      checkpoints/global_step_N/               verl's checkpoints (trainer.default_local_dir)
      rollouts/attempt-K/N.jsonl               verl's rollout dump (trainer.rollout_data_dir)
      metrics/attempt-K.jsonl                  verl's file logger (VERL_FILE_LOGGER_PATH)
      logs/attempt-K.log                       verl's stdout and stderr
      exports/step-N/                          adapters exported with verl's model merger
      source/adapter/                          the adapter a warm start or branch begins from
      pylib/akka_training -> the package       what verl's interpreter imports of ours
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class VerlPaths:
    """The files of one attempt of a verl run. `root` is per run; `attempt` picks the files
    that must be fresh for each attempt."""

    root: Path
    attempt: int

    @property
    def train_data(self) -> Path:
        return self.root / "data" / "train.parquet"

    @property
    def eval_data(self) -> Path:
        return self.root / "data" / "eval.parquet"

    @property
    def reward_config(self) -> Path:
        return self.root / "reward" / "config.json"

    @property
    def reward_records(self) -> Path:
        return self.root / "reward" / "records" / f"attempt-{self.attempt}"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts" / f"attempt-{self.attempt}"

    @property
    def metrics_file(self) -> Path:
        return self.root / "metrics" / f"attempt-{self.attempt}.jsonl"

    @property
    def log_file(self) -> Path:
        return self.root / "logs" / f"attempt-{self.attempt}.log"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def source_adapter(self) -> Path:
        return self.root / "source" / "adapter"

    @property
    def pylib(self) -> Path:
        return self.root / "pylib"

    def checkpoint(self, step: int) -> Path:
        """verl's checkpoint directory of a step."""
        return self.checkpoints / f"global_step_{step}"

    def make_dirs(self) -> None:
        for directory in (
            self.train_data.parent,
            self.reward_records,
            self.checkpoints,
            self.rollouts,
            self.metrics_file.parent,
            self.log_file.parent,
            self.exports,
            self.pylib,
        ):
            directory.mkdir(parents=True, exist_ok=True)
