"""The demo: an embedded trainer, a real SFT run, then a real GRPO run warm-started from it,
whose adapter it downloads.

It starts `akka trainer serve` with its home in `.akka-demo/` (SQLite, a local blob directory, the
local backend, the development models it builds on first start), and drives it with the `akka`
CLI exactly as a user would, printing each command before it runs. Everything is seeded, so the
rise of the reward between the first and the last GRPO step is the same on every run.

    ./scripts/demo            # set up .venv, then this
    python scripts/demo.py    # in an activated .venv
"""

from __future__ import annotations

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
EXAMPLES = REPO / "examples"
WORK = REPO / ".akka-demo"


def main() -> int:
    WORK.mkdir(exist_ok=True)
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
        return _demo(env)
    finally:
        trainer.send_signal(signal.SIGTERM)
        try:
            trainer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            trainer.kill()
        log.close()


def _demo(env: dict[str, str]) -> int:
    akka(env, "training", "info")
    akka(env, "training", "base-models", "list")
    if not any(p["name"] == "demo" for p in akka_json(env, "training", "projects", "list")):
        akka(env, "training", "projects", "create", "demo", "--quota", "1")
    for name in ("arithmetic", "arithmetic-eval", "arithmetic-prompts"):
        akka(
            env,
            "training",
            "datasets",
            "register",
            f"demo/{name}",
            "-f",
            str(EXAMPLES / "data" / f"{name}.jsonl"),
        )

    print("\n# 1. Supervised fine-tuning: teach the tiny model the answer format '#### N'.")
    sft = akka_json(env, "training", "runs", "start", "-f", str(EXAMPLES / "sft.yaml"))
    akka(env, "training", "runs", "wait", sft["id"], "--exit-status")
    akka(env, "training", "runs", "get", sft["id"])

    print(
        "\n# 2. GRPO warm-started from the SFT adapter, rewarding the format and the right number."
    )
    plan = yaml.safe_load((EXAMPLES / "grpo.yaml").read_text().replace("SFT_RUN_ID", sft["id"]))
    plan_path = WORK / "grpo.yaml"
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    grpo = akka_json(env, "training", "runs", "start", "-f", str(plan_path))
    akka(env, "training", "runs", "wait", grpo["id"], "--exit-status")
    akka(env, "training", "runs", "get", grpo["id"])

    print("\n# 3. The rollouts of the last step: the best and the worst.")
    akka(env, "training", "runs", "rollouts", grpo["id"], "--best", "3")
    akka(env, "training", "runs", "rollouts", grpo["id"], "--worst", "3")

    metrics = akka_json(env, "training", "runs", "metrics", grpo["id"], "--fields", "reward/mean")
    rewards = [s["reward/mean"] for s in metrics["steps"]]
    early, late = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    print(
        f"\nReward: first step {rewards[0]:.3f}, last step {rewards[-1]:.3f}; "
        f"mean of the first four steps {early:.3f}, of the last four {late:.3f}."
    )
    print("\n# 4. The adapter, out: the Hugging Face layout PEFT and vLLM load as it is.")
    adapter = WORK / "grpo-adapter"
    akka(env, "training", "runs", "download", grpo["id"], "-d", str(adapter), "--force")
    print(f"The trainer's home is {WORK / 'home'}; run the demo again to reuse it.")
    return 0


def akka(env: dict[str, str], *args: str) -> None:
    print(f"\n$ akka {' '.join(shlex.quote(a) for a in args)}", flush=True)
    subprocess.run([sys.executable, "-m", "akka_training.cli", *args], env=env, check=True)


def akka_json(env: dict[str, str], *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "akka_training.cli", *args, "-o", "json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


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
