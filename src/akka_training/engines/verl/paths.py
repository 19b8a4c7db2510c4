"""Where a verl job keeps its files.

Everything lives under one directory per run on the node (`root`), so that a later attempt of
the same run (a resume) finds the checkpoint an earlier attempt left and does not download it
again, while each attempt writes its own metrics file (verl truncates its file logger's output
when it starts), rollout dump and reward records (a resumed attempt repeats step numbers an
earlier one may have dumped). Both backends give each attempt a job directory
``<jobs>/<run>/<attempt>``; the run's verl directory is beside them, ``<jobs>/<run>/verl``
(`for_job`). One attempt at a time uses it (`lock`). Once the run finished, only the logs,
the metrics and the reward records stay (the engine removes the rest).

    root/
      data/train.parquet, data/eval.parquet    the dataset in verl's layout (`data.py`)
      reward/config.json                       the reward terms, read inside verl's workers
      reward/records/attempt-K/<host>-<pid>.jsonl  one record per scored rollout (`reward_fn.py`)
      checkpoints/global_step_N/               verl's checkpoints (trainer.default_local_dir)
      rollouts/attempt-K/N.jsonl               verl's rollout dump (trainer.rollout_data_dir)
      metrics/attempt-K.jsonl                  verl's file logger (VERL_FILE_LOGGER_PATH)
      logs/attempt-K.log                       verl's stdout and stderr
      exports/step-N/                          an adapter being exported, removed once stored
      lock                                     held by the attempt using the directory
      source/adapter/                          the adapter a warm start or branch begins from
      pylib/akka_training -> the package       what verl's interpreter imports of ours
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


class DirectoryBusy(Exception):
    """Another attempt of the run still holds the run's verl directory on this node."""


@dataclass(frozen=True)
class VerlPaths:
    """The files of one attempt of a verl run. `root` is per run; `attempt` picks the files
    that must be fresh for each attempt."""

    root: Path
    attempt: int

    @classmethod
    def for_job(cls, workdir: Path, attempt: int) -> VerlPaths:
        """The run's verl directory beside its attempts' job directories (``<run>/<attempt>``);
        inside the job directory when it is not laid out so."""
        if workdir.name == str(attempt):
            return cls(workdir.parent / "verl", attempt)
        return cls(workdir / "verl", attempt)

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


@contextmanager
def lock(paths: VerlPaths, wait_seconds: float = 120.0) -> Iterator[None]:
    """Hold the run's verl directory for this attempt; an earlier attempt still stopping gets
    `wait_seconds` to let go, then `DirectoryBusy`."""
    paths.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DirectoryBusy(
                        f"another attempt of this run still uses {paths.root} on this node; "
                        "retry once it has stopped"
                    ) from None
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.write(fd, f"attempt {paths.attempt} pid {os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
