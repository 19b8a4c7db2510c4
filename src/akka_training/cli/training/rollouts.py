"""How `runs rollouts` prints a step's rollouts for people."""

from __future__ import annotations

import json
from typing import Any

from akka_training.cli.output import table

PROMPT_WIDTH = 48
COMPLETION_WIDTH = 60


def print_rollouts(d: dict[str, Any]) -> None:
    if not d["rollouts"]:
        print(d.get("note") or f"Run {d['run']} has no rollouts.")
        return
    order = {"worst": "lowest score first", "best": "highest score first"}.get(
        d.get("order") or "", "in order"
    )
    print(
        f"Run {d['run']} step {d['step']}: {len(d['rollouts'])} of {d['count']} rollouts, {order}."
    )
    terms = sorted({t for r in d["rollouts"] for t in r["shares"]})
    table(
        ["#", "SCORE", *[t.upper() for t in terms], "TOKENS", "END", "PROMPT", "COMPLETION"],
        [
            [
                r["index"],
                f"{r['score']:.3f}",
                *[_share(r, t) for t in terms],
                r["completionTokens"],
                r["finishReason"],
                _short(last_message(r["prompt"]), PROMPT_WIDTH),
                _short(r["completion"], COMPLETION_WIDTH),
            ]
            for r in d["rollouts"]
        ],
    )
    print(
        f"Steps with rollouts: {_steps(d['steps'])}. Read one with --step N; -o json carries every field."
    )


def last_message(prompt: Any) -> str:
    """The table shows only the prompt's last message."""
    if isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)
        except ValueError:
            return prompt
    if isinstance(prompt, list) and prompt:
        content = prompt[-1].get("content", "") if isinstance(prompt[-1], dict) else prompt[-1]
        if isinstance(content, list):
            return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        return str(content)
    return str(prompt)


def _share(r: dict[str, Any], term: str) -> str:
    value = r["shares"].get(term)
    text = "-" if value is None else f"{value:.2f}"
    if term in (r.get("failures") or {}):
        text += f" ({r['failures'][term]})"
    return text


def _short(text: str, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _steps(steps: list[int]) -> str:
    if len(steps) <= 6:
        return ", ".join(map(str, steps))
    return f"{steps[0]}-{steps[-1]} ({len(steps)} steps)"
