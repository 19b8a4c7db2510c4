"""Benchmark: storing every rollout of a long RL run, one Parquet file a step.

Writes `--steps` step files of `--rollouts` rollouts each (prompts of about 600 characters as
chat messages, completions of about 1,500, three reward terms, realistic word statistics) into
a temporary directory, then prints:

- the write cost per step, absolute and as a share of one GRPO step of `--grpo-step-seconds`
  (0.18 s: raw TRL GRPO on a tiny model on this machine, see the field notes);
- what the training step waits for it: the job hands each step's rollouts to the background
  `StepFileWriter` (as `StepRewards` does) and goes on; the benchmark hands steps over at one
  GRPO step's interval (the step's own work stood in by sleeping) and measures the hand-over
  (goal: at most 2 % of the step);
- the time to fetch the worst 10 and the best 10 rollouts of a step (goal: at most 50 ms), and
  for reference the time to read a whole step.

Reads run against files just written, so they come from the page cache, as the service's reads
of recent steps do. Run: ``PYTHONPATH=src python bench/rollouts.py [--steps 1000]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from akka_training.engines.step_files import StepFileWriter
from akka_training.rewards.rollouts import Rollout, read_step_file, write_step_file

WAIT_GOAL = 0.02  # of a step

_VOCABULARY = (
    "the of and to a in is it you that he was for on are with as his they be at one have this "
    "from or had by hot word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line "
    "differ turn cause much mean before move right boy old too same tell does set three want air "
    "well also play small end put home read hand port large spell add even land here must big "
    "high such follow act why ask men change went light kind off need house picture try us again "
    "animal point mother world near build self earth father total apples cost each dollars "
    "therefore so remaining half twice minutes hours per week sold bought left spent"
)
WORDS = _VOCABULARY.split()
WEIGHTS = [1.0 / (rank + 1) for rank in range(len(WORDS))]  # Zipf-like, as natural text
TERMS = {"correct": 1.0, "format": 0.2, "length": -0.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--grpo-step-seconds", type=float, default=0.18)
    parser.add_argument("--reads", type=int, default=100, help="steps sampled for read timings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--handovers", type=int, default=50, help="steps handed to the writer")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory(prefix="akka-rollouts-bench-") as tmp:
        root = Path(tmp)
        writes: list[float] = []
        sizes: list[int] = []
        for step in range(1, args.steps + 1):
            rollouts = make_step(rng, step, args.rollouts)
            path = root / f"step-{step:06d}.parquet"
            started = time.perf_counter()
            write_step_file(rollouts, path)
            writes.append(time.perf_counter() - started)
            sizes.append(path.stat().st_size)

        waits = step_waits(
            root,
            [make_step(rng, s, args.rollouts) for s in (1, 2, 3)],
            args.grpo_step_seconds,
            args.handovers,
        )

        sampled = rng.sample(range(1, args.steps + 1), min(args.reads, args.steps))
        worst, best, whole = [], [], []
        for step in sampled:
            path = root / f"step-{step:06d}.parquet"
            worst.append(timed(partial(read_step_file, path, "worst", 10)))
            best.append(timed(partial(read_step_file, path, "best", 10)))
            whole.append(timed(partial(read_step_file, path)))

    total_rollouts = args.steps * args.rollouts
    write_ms = statistics.median(writes) * 1000
    print(f"stored {args.steps} steps x {args.rollouts} rollouts = {total_rollouts:,} rollouts")
    print(
        f"step file size: median {statistics.median(sizes) / 1024:.0f} KiB, "
        f"total {sum(sizes) / 2**20:.0f} MiB ({sum(sizes) / total_rollouts:.0f} bytes a rollout)"
    )
    print(
        f"write per step: median {write_ms:.1f} ms, p95 {p95(writes) * 1000:.1f} ms; "
        f"{write_ms / 1000 / args.grpo_step_seconds:.1%} of a {args.grpo_step_seconds:g} s "
        "GRPO step"
    )
    wait = statistics.median(waits)
    share = wait / args.grpo_step_seconds
    print(
        f"step waits for it (hand-over to the background writer): median {wait * 1000:.2f} ms, "
        f"p95 {p95(waits) * 1000:.2f} ms; {share:.2%} of the step "
        f"(goal <= {WAIT_GOAL:.0%}): {'met' if share <= WAIT_GOAL else 'not met'}"
    )
    for label, times in (("worst 10", worst), ("best 10", best), ("all rollouts", whole)):
        print(
            f"read {label:<12} of a step: median {statistics.median(times) * 1000:.1f} ms, "
            f"p95 {p95(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms"
            + ("  (goal <= 50 ms)" if label != "all rollouts" else "")
        )


def make_step(rng: random.Random, step: int, count: int) -> list[Rollout]:
    """One step's rollouts: `count` / 8 prompts with 8 generations each."""
    generations = 8
    prompts = [
        [
            {"role": "system", "content": "Solve the problem. End with '#### <number>'."},
            {"role": "user", "content": text(rng, 560)},
        ]
        for _ in range(max(1, count // generations))
    ]
    rollouts = []
    for index in range(count):
        group = index // generations % len(prompts)
        answer = rng.randint(1, 500)
        correct = rng.random() < 0.4
        completion = f"{text(rng, rng.randint(900, 2100))}\n#### {answer}"
        tokens = len(completion) // 4
        values = {
            "correct": 1.0 if correct else 0.0,
            "format": 1.0 if rng.random() < 0.9 else 0.0,
            "length": min(1.0, max(0.0, (tokens - 400) / 64)),
        }
        shares = {name: TERMS[name] * value for name, value in values.items()}
        rollouts.append(
            Rollout(
                step=step,
                index=index,
                group=group,
                prompt=prompts[group],
                completion=completion,
                expected=f"#### {answer if correct else answer + 1}",
                score=sum(shares.values()),
                shares=shares,
                values=values,
                completion_tokens=tokens,
                finish_reason="length" if tokens >= 512 else "stop",
                weights=dict(TERMS),
            )
        )
    return rollouts


def step_waits(
    root: Path, steps: list[list[Rollout]], step_seconds: float, count: int
) -> list[float]:
    """How long each of `count` training steps waits to hand its rollouts over, one step every
    `step_seconds` (the step's own work stood in by sleeping, which leaves the writer the CPU
    as the step's device work would)."""
    directory = root / "handed-over"
    directory.mkdir()

    def keep(step: int, rollouts: list[Rollout]) -> None:
        write_step_file(rollouts, directory / f"step-{step}.parquet")

    writer = StepFileWriter[list[Rollout]](keep)
    waits = []
    try:
        for step in range(1, count + 1):
            began = time.perf_counter()
            writer.submit(step, steps[step % len(steps)])
            handed = time.perf_counter()
            waits.append(handed - began)
            time.sleep(max(0.0, step_seconds - (handed - began)))
        writer.wait()
    finally:
        writer.close()
    return waits


def text(rng: random.Random, chars: int) -> str:
    words = rng.choices(WORDS, weights=WEIGHTS, k=chars // 4)
    numbers = [str(rng.randint(2, 999)) for _ in range(len(words) // 12)]
    for number in numbers:
        words[rng.randrange(len(words))] = number
    return " ".join(words)[:chars]


def timed(read: Callable[[], object]) -> float:
    started = time.perf_counter()
    read()
    return time.perf_counter() - started


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.95) - 1)]


if __name__ == "__main__":
    main()
