"""The demo's closing sentence says where a rise of the reward came from: the right answer, an
answer given to every prompt, or the other terms."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def steps(correct: list[float], fmt: float = 0.5) -> list[dict[str, Any]]:
    return [
        {
            "reward/mean": c + fmt,
            "terms/correct/share_mean": c,
            "terms/format/share_mean": fmt,
        }
        for c in correct
    ]


def test_a_rise_above_one_answer_for_every_prompt_is_learning() -> None:
    lines = demo().reward_summary(steps([0.1] * 10 + [0.6] * 10), one_answer=0.2)
    assert lines[0] == "Mean over the first and the last 10 steps (of 20):"
    assert "  correct    0.100 -> 0.600" in lines
    assert "One number given to every prompt would be right for 0.200 of them." in lines
    assert lines[-1] == "The correct term rose: the policy answers more prompts right."


def test_a_rise_to_what_one_answer_scores_is_called_a_possible_collapse() -> None:
    lines = demo().reward_summary(steps([0.0] * 10 + [0.5] * 10), one_answer=0.5)
    assert lines[-1] == (
        "The correct term rose only as far as one answer for every prompt would take it: the "
        "policy may have collapsed to one answer (read the rollouts above)."
    )


def test_a_flat_correct_term_says_the_gain_came_from_the_other_terms() -> None:
    lines = demo().reward_summary(steps([0.05] * 20))
    assert lines[-1].startswith("The correct term did not rise: what the reward gained came")


def test_one_answer_share_counts_the_most_common_answer(tmp_path: Path) -> None:
    rows = [
        ("What is 1 + 1?", "#### 2"),
        ("What is 0 + 2?", "#### 2"),
        ("What is 2 + 1?", "#### 3"),
    ]
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            )
            + "\n"
            for q, a in rows
        )
    )
    assert demo().one_answer_share(path) == 2 / 3
    assert demo().one_answer_share(ROOT / "examples" / "data" / "arithmetic-prompts.jsonl") < 0.2
