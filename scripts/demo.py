"""The demo: an embedded trainer, a real SFT run, then a real GRPO run warm-started from it,
whose adapter it downloads, and evaluations of the GRPO adapter and of the SFT adapter it started
from on held-out prompts that neither run trained on, compared.

It starts `akka trainer serve` with its home in `.akka-demo/` (SQLite, a local blob directory, the
local backend, the development models it builds on first start), and drives it with the `akka`
CLI exactly as a user would, printing each command before it runs. The task is one the tiny
model learns in minutes on a CPU: "What is N + 0?" for a two-digit N, answered "#### N"
(examples/demo/). Both runs train on 70 of the 90 numbers; the evaluations ask the other 20, so
a right answer there is a copied number, not a remembered one. The SFT run teaches the format
and leaves most answers wrong; the GRPO run is paid for the right number only. Everything is
seeded, so the same steps come out on every run. It says what rose: the reward and each reward
term's share over the first and the last steps, and whether the `correct` term rose above what
one answer for every prompt would score (a collapse); then whether GRPO answers more held-out
prompts right than the SFT adapter it started from.

    ./scripts/demo            # set up .venv, then this
    python scripts/demo.py    # in an activated .venv
    python scripts/demo.py --learning-rate 1e-9    # the control: the same seed, no learning

`AKKA_DEMO_DIR` moves its working directory (default `.akka-demo/`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "demo"
WORK = Path(os.environ.get("AKKA_DEMO_DIR") or REPO / ".akka-demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="the GRPO run's learning rate instead of the plan's (1e-9: a control that learns "
        "nothing, on the same seed)",
    )
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = dict(os.environ)
    env.update(
        {
            "AKKA_HOME": str(WORK / "home"),
            "AKKA_CONFIG": str(WORK / "config.yaml"),
            "TRAINER_URL": f"http://127.0.0.1:{port}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("AKKA_ACCESS_TOKEN", None)
    env.pop("AKKA_CONTEXT", None)
    log = open(WORK / "trainer.log", "ab")  # noqa: SIM115 - open while the trainer runs
    print(
        f"$ akka trainer serve --port {port}    # home {WORK / 'home'}; log {WORK / 'trainer.log'}"
    )
    trainer = subprocess.Popen(
        [sys.executable, "-m", "akka_training.cli", "trainer", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_healthy(env["TRAINER_URL"], trainer)
        return _demo(env, args.learning_rate)
    finally:
        trainer.send_signal(signal.SIGTERM)
        try:
            trainer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            trainer.kill()
        log.close()


def _demo(env: dict[str, str], learning_rate: float | None) -> int:
    akka(env, "training", "info")
    akka(env, "training", "base-models", "list")
    if not any(p["name"] == "demo" for p in akka_json(env, "training", "projects", "list")):
        akka(env, "training", "projects", "create", "demo", "--quota", "1")
    for name in ("add-zero", "add-zero-eval", "add-zero-prompts"):
        akka(
            env,
            "training",
            "datasets",
            "register",
            f"demo/{name}",
            "-f",
            str(EXAMPLES / "data" / f"{name}.jsonl"),
        )

    print(
        "\n# 1. Supervised fine-tuning on 'What is N + 0?': 40 steps teach the tiny model the "
        "answer format '#### N' and leave most of its answers wrong."
    )
    sft = akka_json(env, "training", "runs", "start", "-f", str(EXAMPLES / "sft.yaml"))
    print(f"  (run {sft['id']}: the SFT run)")
    akka(env, "training", "runs", "wait", sft["id"], "--exit-status")
    akka(env, "training", "runs", "get", sft["id"])

    print(
        "\n# 2. GRPO warm-started from the SFT adapter. The reward pays the right number only "
        "(the correct term), so the reward below rises only as the answers get right."
    )
    plan = yaml.safe_load((EXAMPLES / "grpo.yaml").read_text().replace("SFT_RUN_ID", sft["id"]))
    if learning_rate is not None:
        plan["config"]["rlHyperparams"]["optimizer"]["learningRate"] = learning_rate
        print(f"  (the GRPO run's learning rate is {learning_rate:g} instead of the plan's)")
    plan_path = WORK / "grpo.yaml"
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    grpo = akka_json(env, "training", "runs", "start", "-f", str(plan_path))
    print(f"  (run {grpo['id']}: the GRPO run, from {plan_path})")
    akka(env, "training", "runs", "wait", grpo["id"], "--exit-status")
    akka(env, "training", "runs", "get", grpo["id"])

    print("\n# 3. The rollouts of the last step: the best and the worst.")
    akka(env, "training", "runs", "rollouts", grpo["id"], "--best", "3")
    akka(env, "training", "runs", "rollouts", grpo["id"], "--worst", "3")

    metrics = akka_json(env, "training", "runs", "metrics", grpo["id"])
    print()
    prompts = EXAMPLES / "data" / "add-zero-prompts.jsonl"
    for line in reward_summary(metrics["steps"], one_answer_share(prompts)):
        print(line)
    print(health_line(akka_json(env, "training", "runs", "get", grpo["id"]).get("health")))
    print("\n# 4. The adapter, out: the Hugging Face layout PEFT and vLLM load as it is.")
    adapter = WORK / "grpo-adapter"
    akka(env, "training", "runs", "download", grpo["id"], "-d", str(adapter), "--force")

    print(
        "\n# 5. The GRPO adapter against the SFT adapter it started from, on 20 held-out "
        "prompts: numbers neither run trained on."
    )
    plan = yaml.safe_load((EXAMPLES / "evaluation.yaml").read_text())
    ids = []
    for name, run in (("sft", sft["id"]), ("grpo", grpo["id"])):
        plan_path = WORK / f"evaluation-{name}.yaml"
        plan_path.write_text(
            yaml.safe_dump({**plan, "name": f"add-zero-{name}", "source": {"run": run}})
        )
        evaluation = akka_json(env, "training", "evaluations", "start", "-f", str(plan_path))
        ids.append(evaluation["id"])
        print(f"  (evaluation {evaluation['id']}: the {name.upper()} adapter)")
        akka(env, "training", "evaluations", "wait", ids[-1], "--exit-status")
    akka(env, "training", "evaluations", "compare", *ids)
    comparison = akka_json(env, "training", "evaluations", "compare", *ids)
    print()
    print(held_out_line(comparison))
    print(f"The trainer's home is {WORK / 'home'}; run the demo again to reuse it.")
    return 0


def health_line(health: dict[str, Any] | None) -> str:
    """One line on what the run's health monitors saw at its last step."""
    if not health:
        return "Health monitors: no figures reported."
    past = [
        f"{m['monitor']} ({m['figure']} {m['value']:.3g})"
        for m in health["monitors"]
        if m["crossed"]
    ]
    if not past:
        return f"Health monitors at step {health['step']}: every monitor within its threshold."
    return f"Health monitors at step {health['step']}: past their threshold: {', '.join(past)}."


def reward_summary(
    steps: list[dict[str, Any]], one_answer: float | None = None, window: int = 10
) -> list[str]:
    """What rose and what did not: the reward and each term's share over the first and the
    last `window` steps, and a plain sentence on where a rise came from. `one_answer` is the
    correct share a policy that gives the same number to every prompt would reach: a correct
    share that only climbs to it says the policy collapsed to one answer, not that it learned."""

    def mean(key: str, part: list[dict[str, Any]]) -> float:
        values = [float(s[key]) for s in part if key in s]
        return sum(values) / len(values) if values else 0.0

    window = max(1, min(window, len(steps) // 2))
    first, last = steps[:window], steps[-window:]
    terms = sorted(
        {k for s in steps for k in s if k.startswith("terms/") and k.endswith("/share_mean")}
    )
    lines = [f"Mean over the first and the last {window} steps (of {len(steps)}):"]
    rows = [("reward", "reward/mean"), *((k.split("/")[1], k) for k in terms)]
    for name, key in rows:
        lines.append(f"  {name:<10} {mean(key, first):.3f} -> {mean(key, last):.3f}")
    if "terms/correct/share_mean" in terms:
        before = mean("terms/correct/share_mean", first)
        after = mean("terms/correct/share_mean", last)
        if one_answer is not None:
            lines.append(
                f"One number given to every prompt would be right for {one_answer:.3f} of them."
            )
        if after - before > 0.1 and (one_answer is None or after > one_answer + 0.05):
            lines.append("The correct term rose: the policy answers more prompts right.")
        elif after - before > 0.1:
            lines.append(
                "The correct term rose only as far as one answer for every prompt would take "
                "it: the policy may have collapsed to one answer (read the rollouts above)."
            )
        elif len(rows) > 2:
            lines.append(
                "The correct term did not rise: what the reward gained came from the other "
                "terms (read the rollouts above to see what the policy learned)."
            )
        else:
            lines.append(
                "The correct term did not rise, and it is the reward's only term: the policy "
                "answers no more prompts right than it did at the start."
            )
    return lines


def held_out_line(comparison: dict[str, Any]) -> str:
    """One sentence on the held-out evaluations: GRPO's `correct` mean against the SFT
    adapter's, and whether the difference lies beyond noise."""
    found = [m for m in comparison["metrics"] if m["name"] == "correct"]
    if not found or found[0]["a"] is None or found[0]["b"] is None:
        return "The held-out evaluations have no correct figure to compare."
    metric = found[0]
    sft, grpo = float(metric["a"]["mean"]), float(metric["b"]["mean"])
    said = (
        f"On the held-out prompts GRPO answers {grpo:.0%} right, the SFT adapter it started "
        f"from {sft:.0%}"
    )
    if not metric.get("beyond_noise"):
        return f"{said}: a difference within noise, so GRPO's gain is not shown on new prompts."
    if grpo > sft:
        return f"{said}: GRPO's gain carries over to prompts it never trained on."
    return f"{said}: GRPO answers fewer new prompts right than the adapter it started from."


def one_answer_share(prompts: Path) -> float:
    """The share of the prompts whose answer is the most common one."""
    answers = [
        json.loads(line)["messages"][-1]["content"] for line in prompts.read_text().splitlines()
    ]
    return max(answers.count(a) for a in set(answers)) / len(answers) if answers else 0.0


def akka(env: dict[str, str], *args: str) -> None:
    show(*args)
    subprocess.run([sys.executable, "-m", "akka_training.cli", *args], env=env, check=True)


def akka_json(env: dict[str, str], *args: str) -> Any:
    """Run a command whose JSON answer the demo reads; it is printed like every other one."""
    show(*args, "-o", "json")
    out = subprocess.run(
        [sys.executable, "-m", "akka_training.cli", *args, "-o", "json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def show(*args: str) -> None:
    """Print a command as a user would type it, before it runs."""
    print(f"\n$ akka {' '.join(shlex.quote(a) for a in args)}", flush=True)


def _wait_healthy(url: str, trainer: subprocess.Popen[bytes]) -> None:
    print("  (the first start builds the development models: a few seconds)", flush=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if trainer.poll() is not None:
            raise SystemExit(f"the trainer exited; see {WORK / 'trainer.log'}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"the trainer did not start; see {WORK / 'trainer.log'}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
