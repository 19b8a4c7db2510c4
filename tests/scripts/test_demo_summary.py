"""The demo's closing sentences: where a rise of the reward came from (the right answer, an
answer given to every prompt, or the other terms), and GRPO against the SFT adapter it started
from on prompts neither run trained on."""

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


def test_a_flat_only_term_says_no_more_prompts_are_answered_right() -> None:
    # The demo's reward has one term: no "other terms" to credit (the control's case).
    only = [{"reward/mean": 0.3, "terms/correct/share_mean": 0.3} for _ in range(20)]
    lines = demo().reward_summary(only, one_answer=1 / 70)
    assert lines[-1] == (
        "The correct term did not rise, and it is the reward's only term: the policy answers no "
        "more prompts right than it did at the start."
    )


def prompts_of(name: str) -> set[str]:
    path = ROOT / "examples" / "demo" / "data" / f"{name}.jsonl"
    return {json.loads(line)["messages"][0]["content"] for line in path.read_text().splitlines()}


def test_the_demo_evaluates_on_prompts_neither_run_trained_on() -> None:
    held_out = prompts_of("add-zero-eval")
    assert len(held_out) == 20
    assert held_out.isdisjoint(prompts_of("add-zero"))
    assert held_out.isdisjoint(prompts_of("add-zero-prompts"))


def comparison(sft: float, grpo: float, beyond_noise: bool) -> dict[str, Any]:
    return {
        "metrics": [
            {
                "name": "correct",
                "a": {"mean": sft},
                "b": {"mean": grpo},
                "beyond_noise": beyond_noise,
            }
        ]
    }


def test_the_held_out_sentence_compares_grpo_with_the_sft_adapter_it_started_from() -> None:
    line = demo().held_out_line
    assert line(comparison(0.2, 0.6, True)) == (
        "On the held-out prompts GRPO answers 60% right, the SFT adapter it started from 20%: "
        "GRPO's gain carries over to prompts it never trained on."
    )
    assert line(comparison(0.2, 0.3, False)) == (
        "On the held-out prompts GRPO answers 30% right, the SFT adapter it started from 20%: "
        "a difference within noise, so GRPO's gain is not shown on new prompts."
    )
    assert line(comparison(0.5, 0.1, True)) == (
        "On the held-out prompts GRPO answers 10% right, the SFT adapter it started from 50%: "
        "GRPO answers fewer new prompts right than the adapter it started from."
    )
