"""The text the development tokenizer is trained on: chat turns and arithmetic, generated from a
fixed seed so that every build sees the same corpus (and so trains the same tokenizer)."""

from __future__ import annotations

import random
from collections.abc import Iterator

# Phrases of the kind the demo's and the tests' datasets use, so that they tokenise compactly.
_CHAT_LINES = (
    "Hello! How can I help you today?",
    "You are a helpful assistant that answers briefly.",
    "Please explain the answer step by step.",
    "Thank you, that was helpful.",
    "What is the capital of France? The capital of France is Paris.",
    "Describe the image in one sentence.",
    "The picture shows a red square on a white background.",
    "Summarise the following text in a few words.",
    "I am not sure; could you give me more details?",
    "Sure. Here is a short answer.",
    "The weather today is sunny with a light wind.",
    "Write a short poem about the sea.",
    "The sea is wide and blue, and the waves are calm.",
    "Call the calculator tool to add the numbers.",
    "The tool returned a result.",
    "Solve the problem and write the final answer after ####.",
    "Let me think about it. First add the tens, then the ones.",
    "system user assistant tool",
)

_OPERATORS = ("+", "-", "*")


def corpus(seed: int = 0, arithmetic_lines: int = 600) -> Iterator[str]:
    """Every line of the training corpus, in a fixed order."""
    rng = random.Random(seed)
    yield from _CHAT_LINES
    for _ in range(arithmetic_lines):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        op = rng.choice(_OPERATORS)
        result = a + b if op == "+" else a - b if op == "-" else a * b
        yield f"What is {a} {op} {b}? {a} {op} {b} = {result}. #### {result}"
        yield f"Question: compute {a}{op}{b}. Answer: {result}"
    for line in _CHAT_LINES:
        yield line.lower()
