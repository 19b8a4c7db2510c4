"""Tools from scoring bundles: time limits and counters around each call, and a GRPO run that
declares tools and scores with a rule term from the same bundle."""

from __future__ import annotations

import fcntl
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest

from akka_training.core.plans import Tool
from akka_training.engines.trl.rewards import StepRewards, tool_use
from akka_training.engines.trl.tools import ToolCounters, ToolTimeout, load_tools
from akka_training.rewards.rollouts import read_step_file
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_bundle, put_dataset, run_in_process
from tests.engines.rows import chat_rows

TOOLS = textwrap.dedent(
    '''
    import fcntl


    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return a + b


    def hold(path: str) -> str:
        """Wait until nobody holds the lock on a file.

        Args:
            path: The file.
        """
        with open(path) as f:
            fcntl.flock(f, fcntl.LOCK_EX)
        return "free"


    def broken(x: int) -> int:
        """Always fails.

        Args:
            x: Ignored.
        """
        raise ValueError("broken on purpose")
    '''
)
SCORING = textwrap.dedent(
    """
    def has_digit(prompt, completion, expected, row):
        return {"score": float(any(c.isdigit() for c in completion)), "explanation": row["id"]}
    """
)


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "bundle"
    directory.mkdir()
    (directory / "tools.py").write_text(TOOLS)
    (directory / "scoring.py").write_text(SCORING)
    return directory


def test_tools_are_named_timed_and_counted(bundle_dir: Path, tmp_path: Path) -> None:
    counters = ToolCounters()
    tools = load_tools(
        [
            Tool(name="plus", bundle="b", function="tools:add"),
            Tool(name="wait", bundle="b", function="tools:hold", timeout_seconds=0.2),
            Tool(name="broken", bundle="b", function="tools:broken"),
        ],
        lambda ref: bundle_dir,
        counters,
    )
    plus, wait, broken = tools

    assert plus.__name__ == "plus"
    assert plus(a=2, b=3) == 5
    lock = tmp_path / "lock"
    lock.touch()
    assert wait(path=str(lock)) == "free"
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the tool waits until the test lets go: stuck
        with pytest.raises(ToolTimeout, match=r"did not answer within 0\.2 s"):
            wait(path=str(lock))
    with pytest.raises(ValueError, match="broken on purpose"):
        broken(x=1)
    assert dict(counters.calls) == {"plus": 1, "wait": 2, "broken": 1}
    assert dict(counters.failures) == {"plus": 0, "wait": 1, "broken": 1}
    assert dict(counters.timeouts) == {"plus": 0, "wait": 1, "broken": 0}


def test_the_failure_share_counts_the_calls_made_not_the_messages_left(bundle_dir: Path) -> None:
    # TRL drops a tool result (its error too) that would push the completion past
    # maxCompletionTokens: the completions then show the calls but not the failures. The share
    # comes from the calls the tools served.
    counters = ToolCounters()
    plus, broken = load_tools(
        [
            Tool(name="plus", bundle="b", function="tools:add"),
            Tool(name="broken", bundle="b", function="tools:broken"),
        ],
        lambda ref: bundle_dir,
        counters,
    )
    rewards = StepRewards(
        cast(Any, None),
        [],
        [],
        generations_per_prompt=4,
        max_completion_tokens=16,
        stop_ids=set(),
        tool_counters=counters,
    )
    for _ in range(3):
        plus(a=1, b=2)
    for _ in range(5):
        with pytest.raises(ValueError):
            broken(x=0)
    truncated = [{"role": "assistant", "tool_calls": [{"function": {"name": "broken"}}]}]
    assert tool_use(truncated) == (1, 0)  # what the messages left would say
    assert rewards._tool_figures(completions=8) == {
        "tools/calls_per_completion": 1.0,
        "tools/failure_share": 0.625,
    }
    plus(a=1, b=1)  # the next step counts its own calls only
    assert rewards._tool_figures(completions=8) == {
        "tools/calls_per_completion": 0.125,
        "tools/failure_share": 0.0,
    }
    assert rewards._tool_figures(completions=8) == {}  # no call: no figure


@pytest.mark.slow
def test_a_grpo_run_with_tools_and_a_rule_term_from_a_bundle(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: Any,
    tmp_path: Path,
    bundle_dir: Path,
) -> None:
    ref, pin = put_bundle(store, bundle_dir, "test/helpers")
    rows = [r | {"id": f"row-{i}"} for i, r in enumerate(chat_rows(4))]
    config = {
        "method": "grpo",
        "maxSeqLength": 1024,
        "rlHyperparams": {
            "promptsPerStep": 2,
            "generationsPerPrompt": 2,
            "maxCompletionTokens": 8,
            "lora": {"rank": 4},
            "training": {"maxSteps": 1},
        },
        "reward": {
            "terms": [
                {"name": "digits", "kind": "rule", "bundle": ref, "function": "scoring:has_digit"}
            ]
        },
        "tools": [{"name": "add", "bundle": ref, "function": "tools:add"}],
    }
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", rows),
        config=config,
        trainer_url=report_server.url,
        store=store,
        bundles={ref: pin},
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    rollouts = read_step_file(store.get_bytes("runs/run-1/rollouts/step-1.parquet"))
    assert len(rollouts) == 4
    assert all(set(r.shares) == {"digits"} for r in rollouts)
    # The rule saw each prompt's own row.
    assert {r.explanations["digits"] for r in rollouts} <= {f"row-{i}" for i in range(4)}
    # The tools were declared to the model: they are part of every prompt's length.
    fit = report_server.of("training")[0]["dataFit"]
    assert fit["rowsDropped"] == 0
    assert report_server.kinds()[-1] == "finished"
