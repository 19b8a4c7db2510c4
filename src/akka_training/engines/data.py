"""A dataset version as training rows: read from the blob store (JSONL) and shaped the way TRL's
trainers take them.

Rows are chat rows ``{"messages": [...]}`` or prompt/completion rows ``{"prompt": ...,
"completion": ...}`` (a prompt or completion may itself be a list of messages). A user message's
content may be a list of parts; an image part carries its image under ``image``, ``url``,
``image_url`` or ``path``: a ``data:image/...;base64,`` URL, bare base64, a ``file://`` URL or an
absolute path on the job's host. The job reaches no network, so ``http(s)`` images are refused.

For reinforcement learning the last assistant message (or the completion) is the expected
answer and everything before it is the prompt. Preference rows (dpo) are a prompt and two
answers (`preference_examples`).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from PIL import Image

from akka_training.blobstore import BlobStore
from akka_training.engines.failures import DataError

Message = dict[str, Any]


@dataclass
class RlRow:
    """One prompt of a reinforcement dataset. `index` is the row's position in the file, so a
    reward term can read the row's other columns."""

    prompt: list[Message] | str
    expected: str | None
    index: int


def read_rows(store: BlobStore, key: str) -> list[dict[str, Any]]:
    """Every row of the JSONL blob `key`; a line that is not a JSON object is a data error."""
    try:
        with store.open(key) as f:
            raw = f.read()
    except FileNotFoundError as exc:
        raise DataError(f"the dataset blob {key} is missing from storage") from exc
    rows = []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DataError(f"line {number} of the dataset is not valid JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise DataError(f"line {number} of the dataset is not a JSON object")
        rows.append(row)
    if not rows:
        raise DataError("the dataset has no rows")
    return rows


def sft_examples(rows: list[dict[str, Any]], *, image_text: bool) -> list[dict[str, Any]]:
    """Rows as SFTTrainer examples. For an image-text model every message's content becomes a
    list of parts, and when any row has an image every example gets an ``images`` list (empty
    for a text row), which is how TRL's vision collator takes them; for a text model content
    becomes plain text."""
    examples: list[dict[str, Any]] = []
    found: list[list[Image.Image]] = []
    for number, row in enumerate(rows, start=1):
        images: list[Image.Image] = []
        if "messages" in row:
            example: dict[str, Any] = {
                "messages": _messages(row["messages"], number, image_text, images)
            }
        elif "prompt" in row and "completion" in row:
            example = {
                "prompt": _prompt_or_text(row["prompt"], number, image_text, images),
                "completion": _prompt_or_text(row["completion"], number, image_text, images),
            }
        else:
            raise DataError(f"row {number} has neither messages nor prompt and completion")
        examples.append(example)
        found.append(images)
    _check_uniform(examples)
    if any(found):
        for example, images in zip(examples, found, strict=True):
            example["images"] = images
    return examples


def preference_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Preference rows as DPOTrainer examples: ``prompt``, ``chosen`` and ``rejected``, all text
    or all lists of messages. OpenAI's rows (``input.messages``, ``preferred_output``,
    ``non_preferred_output``) become TRL's; a row without a prompt keeps it implicit, for TRL
    to take the messages (or text) both answers begin with. Images are refused: a dpo run
    trains on text."""
    examples: list[dict[str, Any]] = []
    for number, row in enumerate(rows, start=1):
        if "preferred_output" in row:
            given = row.get("input")
            prompt = given.get("messages") if isinstance(given, dict) else None
            sides = {
                "prompt": prompt,
                "chosen": row.get("preferred_output"),
                "rejected": row.get("non_preferred_output"),
            }
        elif "chosen" in row and "rejected" in row:
            sides = {k: row[k] for k in ("prompt", "chosen", "rejected") if k in row}
        else:
            raise DataError(f"row {number} is not a preference pair (prompt, chosen, rejected)")
        example: dict[str, Any] = {}
        for key, value in sides.items():
            if value is None:
                raise DataError(f"row {number} has no {key}")
            example[key] = _prompt_or_text(value, number, False, [])
        examples.append(example)
    shapes = {(tuple(sorted(e)), isinstance(e["chosen"], str)) for e in examples}
    if len(shapes) > 1:
        raise DataError("the dataset mixes preference rows of different shapes")
    return examples


def has_images(examples: list[dict[str, Any]]) -> bool:
    return any(example.get("images") for example in examples)


def rl_rows(rows: list[dict[str, Any]]) -> list[RlRow]:
    """Rows as reinforcement prompts with their expected answers. Images are refused: a
    reinforcement run trains on text."""
    out = []
    for number, row in enumerate(rows, start=1):
        prompt: list[Message] | str
        if "messages" in row:
            messages = _messages(row["messages"], number, False, [])
            last = max(
                (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None
            )
            if last is None:
                prompt, expected = messages, None
            else:
                prompt, expected = messages[:last], _text(messages[last].get("content"))
            if not prompt:
                raise DataError(f"row {number} has no prompt before its assistant message")
            out.append(RlRow(prompt=prompt, expected=expected, index=number - 1))
        elif "prompt" in row:
            prompt = _prompt_or_text(row["prompt"], number, False, [])
            completion = row.get("completion")
            if isinstance(completion, list):
                answers = [m for m in completion if m.get("role") == "assistant"]
                expected = _text(answers[-1].get("content")) if answers else None
            else:
                expected = None if completion is None else str(completion)
            out.append(RlRow(prompt=prompt, expected=expected, index=number - 1))
        else:
            raise DataError(f"row {number} has neither messages nor a prompt")
    kinds = {isinstance(r.prompt, str) for r in out}
    if len(kinds) > 1:
        raise DataError("the dataset mixes plain-text prompts with chat prompts")
    return out


def decode_image(source: str) -> Image.Image:
    """An image part's source (see the module docstring) as an RGB image."""
    if source.startswith(("http://", "https://")):
        raise DataError(f"the image {source[:80]} is on the network, which a job cannot reach")
    path = _local_path(source)
    try:
        if path is not None:
            image = Image.open(path)
        else:
            payload = source.split(",", 1)[1] if source.startswith("data:") else source
            image = Image.open(io.BytesIO(base64.b64decode(payload, validate=False)))
        image.load()
    except (binascii.Error, OSError, ValueError) as exc:
        raise DataError(f"an image could not be read: {exc}") from exc
    return image.convert("RGB")


# --- helpers -------------------------------------------------------------------------------------


def _messages(
    value: Any, number: int, image_text: bool, images: list[Image.Image]
) -> list[Message]:
    if not isinstance(value, list) or not value:
        raise DataError(f"row {number}: messages must be a non-empty list")
    out = []
    for message in value:
        if not isinstance(message, dict) or "role" not in message:
            raise DataError(f"row {number}: every message needs a role")
        shaped: Message = {
            "role": message["role"],
            "content": _content(message.get("content"), number, image_text, images),
        }
        for key in ("name", "tool_calls", "tool_call_id"):
            if message.get(key) is not None:
                shaped[key] = message[key]
        out.append(shaped)
    return out


def _prompt_or_text(
    value: Any, number: int, image_text: bool, images: list[Image.Image]
) -> list[Message] | str:
    if isinstance(value, str):
        return value
    return _messages(value, number, image_text, images)


def _content(
    content: Any, number: int, image_text: bool, images: list[Image.Image]
) -> str | list[dict[str, Any]]:
    if content is None:
        content = ""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if image_text else content
    if not isinstance(content, list):
        raise DataError(f"row {number}: a message's content must be text or a list of parts")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind in ("image", "image_url"):
            if not image_text:
                raise DataError(
                    f"row {number} has an image; images train only on an image-text base model "
                    "and only with sft"
                )
            images.append(decode_image(_image_data(part, number)))
            parts.append({"type": "image"})
        else:
            raise DataError(f"row {number}: unknown content part type {kind!r}")
    if image_text:
        return parts
    return "".join(p["text"] for p in parts)


def _local_path(source: str) -> Path | None:
    if source.startswith("file://"):
        return Path(unquote(urlparse(source).path))
    if source.startswith("/"):
        return Path(source)
    return None


def _image_data(part: dict[str, Any], number: int) -> str:
    for key in ("image", "url", "image_url", "path"):
        value = part.get(key)
        if isinstance(value, dict):
            value = value.get("url")
        if isinstance(value, str) and value:
            return value
    raise DataError(f"row {number}: an image part carries no image data")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _check_uniform(examples: list[dict[str, Any]]) -> None:
    shapes = {tuple(sorted(k for k in e if k != "images")) for e in examples}
    if len(shapes) > 1:
        raise DataError("the dataset mixes chat rows with prompt/completion rows")
    kinds = {isinstance(e.get("prompt"), str) for e in examples if "prompt" in e}
    if len(kinds) > 1:
        raise DataError("the dataset mixes plain-text prompts with chat prompts")
