"""The command blocks of the README and the guide, and what the tests do with each: the one place
that says which blocks run against a real trainer (`test_blocks.py`) and why each other block
does not.

A command block is a fenced block without a language, or marked ``bash``/``sh``/``console``,
whose lines are shell commands. It is named by its page and its first line. Every such block is
in `RUN` or in `NOT_RUN`; a new block in neither fails `test_every_command_block_is_run_or_says_why`.

A block in `RUN` runs in one ``bash`` with ``set -euo pipefail``, against a trainer that already
holds what the pages assume (`PLACEHOLDERS` say what stands for each name the pages use), after
these changes, which are the same for every page:
- a line ``akka trainer serve &`` is the trainer the test started (on a free port, its own home);
- an optional part in square brackets (``[--steps N]``) is left out;
- a ``$ `` prompt line is a command; the lines below it, up to the next prompt, are its output,
  which must appear in what the command printed (its exit status may be any: a transcript shows
  refusals too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_LANGUAGES = {"", "bash", "sh", "console"}
# The first word of a line that makes a block a command block.
COMMANDS = re.compile(
    r"^\s*(\$ )?(akka|RUN=|AKKA_\w+=|kubectl|helm|ray|pip|python|python3\.11|source|mkdir|\./scripts)\b"
)

# The names the pages use for things a reader has, and what the test gives for each: a
# completed sft run (40 steps, snapshots step-20 and step-40) in project maths, trained on
# maths/train, which has the alias prod.
PLACEHOLDERS = {"RUN": "$RUN", "RUN_ID": "$RUN", "N": "2"}

# (page, first line) of each block that runs.
RUN = {
    ("docs/authenticate.md", "akka trainer serve &"),
    ("docs/checkpoints-and-branches.md", "akka training runs snapshots RUN"),
    (
        "docs/checkpoints-and-branches.md",
        "akka training runs branch RUN --snapshot step-40 [--steps N] [--overrides changes.yaml]",
    ),
    ("docs/checkpoints-and-branches.md", "akka training runs tree RUN"),
    ("docs/cli.md", "$ akka training runs list --limit abc"),
    ("docs/datasets.md", "akka training datasets list [--project maths]"),
    ("docs/grafana.md", "mkdir -p dashboards/maths"),
    ("docs/start-a-run.md", "akka training runs list [--phase open|TRAINING|…]"),
    (
        "docs/talk-to-your-adapter.md",
        "akka training endpoints create chat --base tiny-chat --adapter RUN --project maths",
    ),
    (
        "docs/talk-to-your-adapter.md",
        "akka training endpoints add-adapter chat RUN:step-20 --project maths",
    ),
    ("docs/use-your-adapter.md", "akka training runs download RUN"),
    ("docs/use-your-adapter.md", "akka training runs export RUN --merged"),
    ("docs/tinker-api.md", "akka auth tokens create my-tinker-script --project maths"),
}

SYNOPSIS = (
    "a synopsis of the command's forms (alternatives joined by |), not one command line; "
    "test_commands.py parses every form"
)
OFF_LOOPBACK = "talks to a trainer at trainer.example.com; the tests send no traffic off loopback"
PACKAGE_INDEX = "installs from the package index, which the tests do not reach"

# (page, first line) of each block that does not run, and why.
NOT_RUN = {
    (
        "docs/talk-to-your-adapter.md",
        "akka training sample RUN -f prompts.jsonl --out samples.jsonl --n 4 --temperature 0.7",
    ): (
        "needs a prompts file and the endpoint's job to serve the run; "
        "tests/integration/test_endpoints.py samples a file through the same command"
    ),
    (
        "docs/talk-to-your-adapter.md",
        'akka training chat RUN -m "What is 2 + 3?" --temperature 0',
    ): (
        "needs the endpoint's job to load the run's adapter, which the page's trainer does not "
        "wait for; tests/integration/test_endpoints.py runs the same command"
    ),
    (
        "docs/tinker-api.md",
        "python bench/tinker_api.py [--pairs 8] [--warmup 2] [--batch 8] [--length 64] "
        "[--tiny-only]",
    ): (
        "a benchmark that starts its own trainer and builds a ~100M model; it takes minutes, "
        "the page shows what it printed, and tests/integration/test_tinker_api.py runs the "
        "same SDK calls"
    ),
    (
        "docs/talk-to-your-adapter.md",
        "python bench/serving.py [--streams 32] [--repeats 3] [--max-tokens 64] [--adapters]",
    ): (
        "a benchmark that starts its own trainer and takes minutes; the page shows what it "
        "printed, and tests/integration/test_endpoints.py runs the same front door"
    ),
    ("README.md", "./scripts/demo"): (
        "sets up .venv (from the package index, which the tests do not reach), then runs the "
        "demo or the whole suite, which is what runs this test"
    ),
    ("README.md", "python3.11 -m venv .venv && . .venv/bin/activate"): PACKAGE_INDEX,
    ("docs/tinker-api.md", 'pip install "tinker==0.38.0"'): PACKAGE_INDEX,
    ("README.md", "akka trainer serve >trainer.log 2>&1 &"): (
        "the quickstart: tests/docs/test_readme.py runs it"
    ),
    ("README.md", 'python -m pytest -m "not slow"'): (
        "the test suite, the linters and the benchmarks themselves: CI runs them"
    ),
    (
        "docs/authenticate.md",
        "akka config set-context prod --api-host https://trainer.example.com --project maths",
    ): OFF_LOOPBACK,
    ("docs/authenticate.md", "$ akka --context nope training info"): (
        "a transcript whose output names the reader's home (/home/me) and other contexts; "
        "tests/client/test_connection.py checks the sentence"
    ),
    (
        "docs/authenticate.md",
        "akka auth tokens create ci-maths --project maths [--expires-in-days 30]",
    ): (
        "revokes a token id made up for the page (t1a2b3c4d5e6); tests/integration/test_spine.py "
        "creates, lists and revokes tokens"
    ),
    (
        "docs/checkpoints-and-branches.md",
        "akka training runs pause RUN --checkpoint save",
    ): (
        "pauses a run while it trains, which the completed run the pages assume is not; "
        "tests/integration/test_runs_lifecycle.py pauses and resumes real runs"
    ),
    ("docs/cli.md", "$ akka training runs start -f plan.yaml --dry-run -o json"): (
        "a transcript of a refused plan the page does not show, with its message cut short (...)"
    ),
    ("docs/cli.md", "source <(akka completion bash)"): (
        "loads completion into bash, zsh and fish; tests/cli/test_conventions.py checks the scripts"
    ),
    ("docs/datasets.md", "akka training datasets register maths/train -f train.jsonl"): (
        "a command with the output of the page's example file (7473 rows), which the "
        "repository does not hold"
    ),
    ("docs/contributing/ARCHITECTURE.md", "akka CLI ──HTTP──▶ trainer service"): (
        "a diagram of the processes, not commands"
    ),
    ("docs/deploy-kubernetes.md", "mkdir -p my-akka/secrets"): (
        "writes the reader's overlay and secrets for a Kubernetes cluster; tests/deploy render "
        "the shipped overlays"
    ),
    ("docs/deploy-kubernetes.md", "kubectl kustomize my-akka | less"): (
        "needs the reader's overlay and a Kubernetes cluster; tests/deploy render the overlays"
    ),
    (
        "docs/deploy-kubernetes.md",
        "kubectl -n akka port-forward service/akka-trainer 9001:9001 &",
    ): "needs a Kubernetes cluster",
    ("docs/deploy-kubernetes.md", "akka auth login --api-host http://127.0.0.1:9001 --token"): (
        "logs in through the port-forward of the block above, to a Kubernetes cluster"
    ),
    ("docs/deploy-ray.md", "# On the head (no jobs run here):"): (
        "starts Ray nodes on several machines; tests/ray_cluster.py starts a local head the "
        "same way"
    ),
    ("docs/pipelines.md", "akka training pipelines start -f pipeline.yaml [--dry-run"): SYNOPSIS,
    ("docs/pipelines.md", "akka training pipelines start -f pipeline.yaml --dry-run --preview 8"): (
        "previews a pipeline.yaml the page shows in parts; tests/integration/test_regrade.py "
        "previews a pipeline through the CLI and asserts each stage's terms and flags"
    ),
    ("docs/python-client.md", "pip install akka-training"): PACKAGE_INDEX,
    ("docs/rollouts.md", "akka training runs rollouts RUN [--step N]"): SYNOPSIS,
    ("docs/rollouts.md", "akka training runs verify RUN_ID"): (
        "verifies a reinforcement run, and the run the pages assume is sft; "
        "tests/integration/test_training.py and test_verify.py verify real grpo runs through the "
        "CLI"
    ),
    ("docs/rollouts.md", "akka training runs rollouts RUN_ID --step 120 --worst 10"): (
        "reads step 120 of a long reinforcement run; tests/integration/test_training.py reads a "
        "run's rollouts"
    ),
    (
        "docs/start-a-run.md",
        "akka training runs start -f plan.yaml [--dry-run [--preview N]] [--show-resolved] "
        "[--wait] [--exit-status]",
    ): SYNOPSIS,
    ("docs/start-a-run.md", "akka training runs start -f plan.yaml --dry-run --preview 8"): (
        "previews a grpo plan.yaml the page shows in parts; tests/integration/test_regrade.py "
        "runs a preview through the CLI and asserts its flags"
    ),
    (
        "docs/regrade.md",
        "akka training runs regrade RUN --reward FILE [--steps A-B] [--timeout SECONDS] [-o json]",
    ): SYNOPSIS,
    ("docs/regrade.md", "akka training runs regrade RUN_ID --reward reward-v2.yaml --steps 2-3"): (
        "regrades a reinforcement run, and the run the pages assume is sft; "
        "tests/integration/test_regrade.py regrades a real grpo run through the CLI"
    ),
    (
        "docs/evaluate-an-adapter.md",
        "akka training evaluations start -f eval.yaml --dry-run --show-resolved   # check it, "
        "start nothing",
    ): (
        "evaluates on a held-out dataset the page assumes registered; "
        "tests/integration/test_evaluations.py starts real evaluations through the CLI"
    ),
    ("docs/evaluate-an-adapter.md", "akka training evaluations results EVALUATION --limit 5"): (
        "reads an evaluation the block above starts; tests/integration/test_evaluations.py "
        "reads real results"
    ),
    (
        "docs/evaluate-an-adapter.md",
        "akka training evaluations compare BASE_EVALUATION ADAPTER_EVALUATION",
    ): (
        "compares two evaluations the page starts; tests/integration/test_evaluations.py "
        "compares base and adapter"
    ),
    (
        "docs/preference-fine-tuning.md",
        "akka training datasets register demo/arithmetic -f examples/data/arithmetic.jsonl",
    ): (
        "trains the examples' SFT run and then their DPO run, whose plan needs the SFT run's id "
        "written in; tests/integration/test_examples.py checks both plans against a trainer"
    ),
    ("docs/preference-fine-tuning.md", "akka training runs get RUN"): (
        "reads a dpo run's figures, and the run the pages assume is an sft run; "
        "tests/server/routers/test_preference_plans.py reads a dpo run's back"
    ),
    ("docs/start-a-run.md", "akka training runs cancel RUN"): (
        "cancels a run that has not ended, which the completed run the pages assume has; "
        "tests/integration/test_runs_lifecycle.py cancels real runs"
    ),
    ("docs/start-a-run.md", "$ akka training runs start -f plan.yaml --dry-run"): (
        "a transcript of a verl deployment's refusal (qwen3-0.6b at 4 GPUs); "
        "tests/integration/test_plans.py asserts both sentences"
    ),
    ("docs/start-a-run.md", "akka training runs start -f plan.yaml --dry-run --show-resolved"): (
        "resolves the page's qwen3-0.6b plan, a model of the reader's catalog"
    ),
}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    text: str

    @property
    def first_line(self) -> str:
        return next(line.strip() for line in self.text.splitlines() if line.strip())

    @property
    def key(self) -> tuple[str, str]:
        return (self.page, self.first_line)


def command_blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for language, body in re.findall(r"```([a-z]*)\n(.*?)```", text, flags=re.S):
            if language not in SHELL_LANGUAGES:
                continue
            lines = [line for line in body.splitlines() if line.strip()]
            if not any(COMMANDS.match(line) for line in lines):
                continue
            found.append(Block(page.relative_to(ROOT).as_posix(), body))
    return found


def listed(block: Block) -> str | None:
    """`RUN` or the reason the block does not run; None when it is in neither list. A block
    is matched by its page and the start of its first line (a comment after it may change)."""
    for key in RUN:
        if block.page == key[0] and block.first_line.startswith(key[1]):
            return "RUN"
    for (page, first), reason in NOT_RUN.items():
        if block.page == page and block.first_line.startswith(first):
            return reason
    return None


def as_script(block: Block) -> tuple[str, list[tuple[str, list[str]]]]:
    """The block as the lines of a bash script, and its transcripts: (command, output lines)."""
    lines: list[str] = []
    transcripts: list[tuple[str, list[str]]] = []
    for raw in block.text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("akka trainer serve &"):
            continue
        if line.startswith("$ "):
            transcripts.append((_substitute(line[2:]), []))
            continue
        if transcripts:
            transcripts[-1][1].append(line)
            continue
        lines.append(_substitute(line))
    return "\n".join(lines), transcripts


def _substitute(line: str) -> str:
    line = re.sub(r"\s*\[[^\]]*\]", "", line)
    for name, value in PLACEHOLDERS.items():
        line = re.sub(rf"(?<![\w$/.-]){name}(?![\w-])", value, line)
    return line
