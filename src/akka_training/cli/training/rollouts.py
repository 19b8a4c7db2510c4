"""How `runs rollouts` prints a step's rollouts for people."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from akka_training.cli.output import table

if TYPE_CHECKING:
    from akka_training.api.rollouts import Rollout, StepRollouts

PROMPT_WIDTH = 48
COMPLETION_WIDTH = 60


def print_rollouts(page: StepRollouts) -> None:
    if not page.rollouts:
        print(page.note or f"Run {page.run} has no rollouts.")
        return
    order = {"worst": "lowest score first", "best": "highest score first"}.get(
        page.order or "", "in order"
    )
    print(
        f"Run {page.run} step {page.step}: {len(page.rollouts)} of {page.count} rollouts, {order}."
    )
    terms = sorted({t for r in page.rollouts for t in r.shares})
    table(
        ["#", "SCORE", *[t.upper() for t in terms], "TOKENS", "END", "PROMPT", "COMPLETION"],
        [
            [
                r.index,
                f"{r.score:.3f}",
                *[_share(r, t) for t in terms],
                r.completion_tokens,
                r.finish_reason,
                _short(last_message(r.prompt), PROMPT_WIDTH),
                _short(r.completion, COMPLETION_WIDTH),
            ]
            for r in page.rollouts
        ],
    )
    print(
        f"Steps with rollouts: {_steps(page.steps)}. Read one with --step N; -o json carries every field."
    )


def last_message(prompt: Any) -> str:
    """The table shows only the prompt's last message."""
    if isinstance(prompt, str):
        text = prompt
        try:
            prompt = json.loads(text)
        except ValueError:
            return text
    if isinstance(prompt, list) and prompt:
        content = prompt[-1].get("content", "") if isinstance(prompt[-1], dict) else prompt[-1]
        if isinstance(content, list):
            return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        return str(content)
    return str(prompt)


def _share(r: Rollout, term: str) -> str:
    value = r.shares.get(term)
    text = "-" if value is None else f"{value:.2f}"
    if term in r.failures:
        text += f" ({r.failures[term]})"
    return text


def _short(text: str, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _steps(steps: list[int]) -> str:
    if len(steps) <= 6:
        return ", ".join(map(str, steps))
    return f"{steps[0]}-{steps[-1]} ({len(steps)} steps)"
