"""verl's per-step metrics as the job's flat figures.

verl's file logger (``trainer.logger`` with ``file``; ``verl.utils.tracking.FileLogger``)
writes one JSON line per logged step, ``{"step": N, "data": {name: value}}``, to
``VERL_FILE_LOGGER_PATH``. `MetricsTail` reads that file as it grows and returns the steps that
were completed since the last call; `step_figures` renames verl's names to ours:

| figure                          | verl 0.9.1                                      |
|---------------------------------|-------------------------------------------------|
| policy_loss                     | actor/pg_loss                                   |
| tokens                          | perf/total_num_tokens                           |
| tokens_per_second               | perf/total_num_tokens / perf/time_per_step      |
| tokens_per_second_per_gpu       | perf/throughput                                 |
| mfu                             | perf/mfu/actor                                  |
| timing/generation               | timing_s/gen                                    |
| timing/reward                   | timing_s/reward (only when verl scores apart)   |
| timing/update                   | timing_s/update_actor                           |
| timing/step                     | timing_s/step                                   |
| timing/save                     | timing_s/save_checkpoint                        |
| completions/mean_length ...     | response_length/mean, max, min                  |
| completions/clipped_ratio       | response_length/clip_ratio                      |
| reward/mean, max, min           | critic/score/mean, max, min                     |
| entropy                         | actor/entropy                                   |
| kl                              | actor/kl_loss (klBeta above 0)                  |
| clip_ratio/region_mean          | actor/pg_clipfrac                               |
| learning_rate, grad_norm        | actor/lr, actor/grad_norm                       |
| memory/peak, memory/reserved    | actor/perf/max_memory_allocated_gb, ..._reserved_gb |
| eval/reward/mean                | val-core/<source>/reward/mean@N                 |

Memory figures are bytes (verl logs GiB). verl 0.9.1's V1 trainer prefixes every figure of the
actor's update with ``actor/`` (``rename_dict(output["metrics"], "actor/")`` in
``trainer_base.py``), its memory figures included; the legacy trainer logs them unprefixed:
both names are read, the prefixed one first. ``perf/throughput`` is per GPU (tokens / (time x GPUs)); ``tokens_per_second`` is the whole
job's, as under TRL. verl counts the tokens clipped by the policy ratio at either bound in one
figure, so there is no low/high split. verl 0.9.1's V1 trainer scores rollouts inside the
generation phase (its reward loop runs beside the rollout), so ``timing_s/reward`` is usually
absent; the job then measures reward timing from the reward function's own records.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from akka_training.core.monitors import LOSS_FIGURES

GIB = float(1 << 30)

# Figures copied from one verl name each.
RENAMED: dict[str, str] = {
    "actor/pg_loss": "policy_loss",
    "perf/total_num_tokens": "tokens",
    "perf/throughput": "tokens_per_second_per_gpu",
    "perf/mfu/actor": "mfu",
    "timing_s/gen": "timing/generation",
    "timing_s/reward": "timing/reward",
    "timing_s/update_actor": "timing/update",
    "timing_s/step": "timing/step",
    "timing_s/save_checkpoint": "timing/save",
    "timing_s/testing": "timing/evaluation",
    "response_length/mean": "completions/mean_length",
    "response_length/max": "completions/max_length",
    "response_length/min": "completions/min_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
    "critic/score/mean": "reward/mean",
    "critic/score/max": "reward/max",
    "critic/score/min": "reward/min",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/pg_clipfrac": "clip_ratio/region_mean",
    "actor/lr": "learning_rate",
    "actor/grad_norm": "grad_norm",
}
# verl reports these in GiB; our memory figures are bytes. Each figure's verl names, in the
# order they are looked up: the V1 trainer's (prefixed), then the legacy trainer's.
MEMORY_GIB: dict[str, tuple[str, ...]] = {
    "memory/peak": ("actor/perf/max_memory_allocated_gb", "perf/max_memory_allocated_gb"),
    "memory/reserved": ("actor/perf/max_memory_reserved_gb", "perf/max_memory_reserved_gb"),
}


@dataclass(frozen=True)
class VerlStep:
    """One line of verl's file logger: the step and verl's own metric names."""

    step: int
    data: dict[str, Any]

    @property
    def figures(self) -> dict[str, float]:
        return step_figures(self.data)


def step_figures(data: dict[str, Any]) -> dict[str, float]:
    """Our flat figures from one step's verl metrics (names verl does not log are absent)."""
    figures: dict[str, float] = {}
    for source, name in RENAMED.items():
        # A NaN loss is a run that diverged (`core.monitors.non_finite_loss`): it is kept.
        value = _number(data.get(source), finite=name not in LOSS_FIGURES)
        if value is not None:
            figures[name] = value
    for name, sources in MEMORY_GIB.items():
        for source in sources:
            value = _number(data.get(source))
            if value is not None:
                figures[name] = value * GIB
                break
    tokens = _number(data.get("perf/total_num_tokens"))
    seconds = _number(data.get("perf/time_per_step"))
    if tokens is not None and seconds:
        figures["tokens_per_second"] = tokens / seconds
    for key, value in data.items():
        # Validation (trainer.test_freq): "val-core/<data source>/reward/mean@<n>".
        if key.startswith("val-core/") and "/reward/mean@" in key:
            number = _number(value)
            if number is not None:
                figures["eval/reward/mean"] = number
    return figures


class MetricsTail:
    """Follows verl's metrics file. `new_steps` returns the training steps whose lines were
    completed since the previous call (a half-written last line waits for its newline), in
    file order; lines for step 0 (validation before training) are skipped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._buffer = b""

    def new_steps(self) -> list[VerlStep]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._buffer + chunk
        end = data.rfind(b"\n") + 1
        self._buffer = data[end:]
        steps: list[VerlStep] = []
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            body = json.loads(line)
            step = int(body.get("step", 0))
            if step >= 1:
                steps.append(VerlStep(step=step, data=dict(body.get("data", {}))))
        return steps


def read_steps(path: Path) -> list[VerlStep]:
    """Every step of a finished metrics file."""
    return MetricsTail(path).new_steps()


def _number(value: Any, finite: bool = True) -> float | None:
    """`value` as a float; None for what is not a number, or (`finite`) not a finite one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) or not finite else None
