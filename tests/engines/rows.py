"""Datasets for the engine tests: arithmetic in chat and prompt/completion form."""

from __future__ import annotations

import base64
import io
import random
from typing import Any

from PIL import Image


def chat_rows(count: int, seed: int = 0, *, system: bool = False) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        messages = [
            {"role": "user", "content": f"What is {a} + {b}?"},
            {"role": "assistant", "content": f"{a} + {b} = {a + b}. #### {a + b}"},
        ]
        if system:
            messages.insert(0, {"role": "system", "content": "Answer briefly."})
        rows.append({"messages": messages})
    return rows


def long_chat_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rows of varied lengths: some fit 48 tokens, some lose part of the answer, some have a
    prompt longer than 48 tokens."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        words = " ".join("please" for _ in range(rng.randint(0, 40)))
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        answer = " ".join(str(a + b) for _ in range(rng.randint(1, 12)))
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"{words} What is {a} + {b}? ({i})"},
                    {"role": "assistant", "content": answer},
                ]
            }
        )
    return rows


def prompt_completion_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        pad = " ".join("now" for _ in range(rng.randint(0, 30)))
        rows.append({"prompt": f"{pad} Compute {a}+{b}:", "completion": f" {a + b}"})
    return rows


def image_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        colour = rng.choice([("red", (220, 20, 20)), ("blue", (20, 20, 220))])
        rows.append(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "image": data_url(colour[1])},
                            {"type": "text", "text": "What colour is the picture?"},
                        ],
                    },
                    {"role": "assistant", "content": f"The picture is {colour[0]}."},
                ]
            }
        )
    return rows


def data_url(rgb: tuple[int, int, int]) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (20, 12), rgb).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def pair_rows(count: int, seed: int = 0, *, shape: str = "openai") -> list[dict[str, Any]]:
    """Arithmetic preference pairs: the right sum preferred over a wrong one. `shape`:
    ``openai`` (input, preferred_output, non_preferred_output) or ``text`` (TRL's prompt,
    chosen and rejected as strings)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for _ in range(count):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        right, wrong = a + b, a + b + rng.choice((-10, -1, 1, 10))
        question = f"What is {a} + {b}?"
        if shape == "text":
            rows.append(
                {"prompt": f"{question} ", "chosen": f"#### {right}", "rejected": f"#### {wrong}"}
            )
            continue
        rows.append(
            {
                "input": {"messages": [{"role": "user", "content": question}]},
                "preferred_output": [{"role": "assistant", "content": f"#### {right}"}],
                "non_preferred_output": [{"role": "assistant", "content": f"#### {wrong}"}],
            }
        )
    return rows
