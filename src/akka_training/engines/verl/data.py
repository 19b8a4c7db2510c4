"""A registered dataset as the Parquet files verl's `RLHFDataset` reads.

verl's layout, one row per prompt:

- ``data_source`` (string): where the row came from (the dataset's ``PROJECT/NAME``);
- ``prompt`` (list of ``{role, content}``): the chat the policy continues;
- ``ability`` (string): a label verl carries along;
- ``reward_model`` (``{style: "rule", ground_truth}``): the expected answer, which verl hands
  to the reward function as ``ground_truth``;
- ``extra_info`` (``{index, split, prompt, row}``): handed to the reward function as is.
  ``prompt`` and ``row`` are JSON text (the prompt messages and the dataset row), so the reward
  function can give every term the same input it gets under TRL without reading the dataset.

A chat row's expected answer is its last assistant message and its prompt the messages before
it; a prompt/completion row's expected answer is its completion. A row without an answer keeps
``ground_truth`` null (terms that need one fail on it, and say so).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ABILITY = "akka"

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        (
            "prompt",
            pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
        ),
        ("ability", pa.string()),
        (
            "reward_model",
            pa.struct([("style", pa.string()), ("ground_truth", pa.string())]),
        ),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("prompt", pa.string()),
                    ("row", pa.string()),
                ]
            ),
        ),
    ]
)


class DatasetRowError(ValueError):
    """A dataset row that cannot become a reinforcement-learning prompt."""


@dataclass(frozen=True)
class WrittenDataset:
    path: Path
    rows: int
    without_answer: int  # rows whose ground truth is null


def write_verl_dataset(
    rows: Iterable[Mapping[str, Any]], dest: Path, *, data_source: str, split: str
) -> WrittenDataset:
    """Write JSONL-decoded dataset rows as one verl Parquet file at `dest` (atomically).
    Raises `DatasetRowError` naming the first row that has no prompt."""
    records = list(_records(rows, data_source=data_source, split=split))
    table = pa.Table.from_pylist(records, schema=SCHEMA)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    pq.write_table(table, partial)
    partial.replace(dest)
    missing = sum(1 for r in records if r["reward_model"]["ground_truth"] is None)
    return WrittenDataset(path=dest, rows=len(records), without_answer=missing)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a registered JSONL dataset (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetRowError(f"line {number} is not JSON: {exc}") from exc


def split_row(row: Mapping[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    """A dataset row as (prompt messages, expected answer)."""
    if "messages" in row:
        messages = [_message(m) for m in row["messages"]]
        last_answer = max(
            (i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None
        )
        if last_answer is None:
            return messages, None
        return messages[:last_answer], messages[last_answer]["content"]
    if "prompt" in row:
        prompt = row["prompt"]
        messages = (
            [{"role": "user", "content": _text(prompt)}]
            if isinstance(prompt, str)
            else [_message(m) for m in prompt]
        )
        return messages, _completion_text(row.get("completion"))
    raise DatasetRowError("a row needs 'messages' (chat) or 'prompt' (prompt/completion)")


# --- helpers ----------------------------------------------------------------------------------


def _records(
    rows: Iterable[Mapping[str, Any]], *, data_source: str, split: str
) -> Iterator[dict[str, Any]]:
    for index, row in enumerate(rows):
        try:
            prompt, expected = split_row(row)
        except (DatasetRowError, TypeError, KeyError, AttributeError) as exc:
            raise DatasetRowError(f"row {index + 1}: {exc}") from exc
        if not any(m["role"] == "user" for m in prompt):
            raise DatasetRowError(f"row {index + 1}: the prompt has no user message")
        yield {
            "data_source": data_source,
            "prompt": prompt,
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": expected},
            "extra_info": {
                "index": index,
                "split": split,
                "prompt": json.dumps(prompt, ensure_ascii=False),
                "row": json.dumps(row, ensure_ascii=False),
            },
        }


def _message(message: Mapping[str, Any]) -> dict[str, str]:
    return {"role": str(message["role"]), "content": _text(message.get("content"))}


def _completion_text(completion: Any) -> str | None:
    if completion is None:
        return None
    if isinstance(completion, str):
        return completion
    messages = [_message(m) for m in completion]
    answers = [m["content"] for m in messages if m["role"] == "assistant"]
    return answers[-1] if answers else None


def _text(content: Any) -> str:
    """A message's content as text: a list of parts keeps its text parts (images are refused
    for reinforcement runs before a job starts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
            if not isinstance(part, Mapping) or part.get("type", "text") == "text"
        )
    return str(content)
