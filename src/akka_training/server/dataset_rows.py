"""Row validation of a JSONL dataset while it streams in.

`RowValidator` takes the upload's bytes in blocks of any size (`feed`) and checks each complete
line as it arrives, carrying a partial line over to the next block, so a file is never held in
memory; `finish` checks the last line and returns a `RowSummary`.

A row is one line of JSON (blank lines are skipped) in one of three formats, shared by every row
of a file:

- ``chat``: ``{"messages": [{"role": ..., "content": ...}, ...]}`` with roles system, user,
  assistant and tool, ending with the assistant message to train on. A content is a string or a
  list of parts (``{"type": "text", "text": ...}``, ``{"type": "image", ...}``); only user
  messages carry images.
- ``prompt-completion``: ``{"prompt": ..., "completion": ...}``, both strings or both lists of
  messages (the completion ending with an assistant message).
- ``preference``: a prompt and two answers, the preferred one first, in OpenAI's shape
  (``{"input": {"messages": [...]}, "preferred_output": [...], "non_preferred_output": [...]}``)
  or TRL's (``{"prompt": ..., "chosen": ..., "rejected": ...}``, all strings or all lists of
  messages; without ``prompt``, the prompt is what ``chosen`` and ``rejected`` begin with). The
  answers must differ, hold text, and be the assistant's; a prompt starts with its system message
  and ends with the turn the answers reply to.

Problems name the line and the field ("line 7: messages[2].role is 'bot'; use system, user,
assistant or tool"); the first `max_listed` are kept and the rest counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from pydantic_core import from_json

CHAT = "chat"
PROMPT_COMPLETION = "prompt-completion"
PREFERENCE = "preference"
ROLES = ("system", "user", "assistant", "tool")
MAX_LISTED = 20
# One row is parsed whole, so one line is the most the validator holds in memory.
MAX_LINE_BYTES = 32 * 1024 * 1024

_ROLES = frozenset(ROLES)
# Any of these keys makes a row a preference row.
_PREFERENCE_KEYS = frozenset({"chosen", "rejected", "preferred_output", "non_preferred_output"})
_OPENAI_KEYS = ("input", "preferred_output", "non_preferred_output")
# A line as the quick tests take it: a view into the received block, or bytes.
Buffer = bytes | memoryview
_ROLE_LIST = "system, user, assistant or tool"
_PART_TYPES = "text or image"


@dataclass(frozen=True)
class RowProblem:
    """One thing wrong with one line. `line` is 1-based, counting blank lines; `field` is the
    path inside the row (``messages[2].role``), empty when the problem is the row as a whole."""

    line: int
    field: str
    message: str


@dataclass(frozen=True)
class RowSummary:
    """What a whole file held. `format` is None when no row was valid; `problem_count` counts
    every problem, `problems` holds the first ones."""

    rows: int
    format: str | None
    has_images: bool
    problems: list[RowProblem]
    problem_count: int

    @property
    def ok(self) -> bool:
        return self.problem_count == 0


@dataclass
class _Shape:
    """The format of the first valid row, which every later row must share. `style` is
    ``messages`` or ``text`` (prompt-completion rows with plain strings); for preference rows
    also ``openai``, ``implicit-messages`` or ``implicit-text`` (no prompt key)."""

    format: str
    style: str
    line: int


class RowValidator:
    """Validates rows from a byte stream; see the module docstring for the rules."""

    def __init__(self, max_listed: int = MAX_LISTED, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_listed = max_listed
        self.max_line_bytes = max_line_bytes
        self.rows = 0
        self.has_images = False
        self.problem_count = 0
        self.problems: list[RowProblem] = []
        self._line = 0  # lines checked so far
        self._tail: list[bytes] = []  # the partial line carried over, in pieces
        self._tail_bytes = 0
        self._skipping = False  # inside a line already refused as too long
        self._shape: _Shape | None = None
        # Once the file's shape is known: a quick test that passes only rows the full check
        # would pass too, so most rows skip the full check's bookkeeping.
        self._fast: Callable[[Buffer], bool] | None = None

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def feed(self, data: bytes) -> None:
        """Check every line that `data` completes; keep the partial last line for later."""
        first = data.find(b"\n")
        if first < 0:
            self._carry(data)
            return
        start = 0
        if self._skipping:
            start = first + 1  # past the end of a line already refused as too long
            self._line += 1
            self._skipping = False
        elif self._tail:
            self._tail.append(data[:first])
            self._check_line(b"".join(self._tail))
            start = first + 1
        self._tail = []
        self._tail_bytes = 0
        end = data.rfind(b"\n") + 1  # after the last newline: the start of a line still to come
        self._check_span(data, start, end)
        if end < len(data):
            self._carry(data[end:])

    def finish(self) -> RowSummary:
        """Check the last line (a file need not end with a newline) and sum up."""
        if self._skipping:
            self._line += 1
        elif self._tail:
            self._check_line(b"".join(self._tail))
        self._tail = []
        self._skipping = False
        return RowSummary(
            rows=self.rows,
            format=self._shape.format if self._shape else None,
            has_images=self.has_images,
            problems=list(self.problems),
            problem_count=self.problem_count,
        )

    # --- lines -----------------------------------------------------------------------------------

    def _carry(self, piece: bytes) -> None:
        if self._skipping:
            return
        self._tail.append(piece)
        self._tail_bytes += len(piece)
        if self._tail_bytes > self.max_line_bytes:
            # Refuse the line now and drop the rest of it as it arrives, so memory stays flat.
            self._tail = []
            self._tail_bytes = 0
            self._skipping = True
            self.rows += 1
            self._add(
                self._line + 1,
                "",
                f"the row is longer than {self.max_line_bytes // (1024 * 1024)} MiB, "
                "the most one row may hold",
            )

    def _check_span(self, data: bytes, start: int, end: int) -> None:
        """Check the lines of data[start:end], which ends with a newline. The hot loop: each
        line is found in place and handed to the file's quick test as a view, not copied; only
        a line it does not pass (and every line before the file's shape is known) is copied out
        for the full check, which words the problem."""
        view = memoryview(data)
        find = data.find
        fast = self._fast
        limit = self.max_line_bytes
        number = self._line  # lines before the one at p
        passed = 0
        p = start
        while p < end:
            q = find(b"\n", p, end)
            if fast is not None and q - p <= limit and fast(view[p:q]):
                passed += 1
            else:
                self._line = number
                self._check_line(data[p:q])
                fast = self._fast
            number += 1
            p = q + 1
        self.rows += passed
        self._line = number

    def _check_line(self, raw: bytes) -> None:
        """The full check of one line (the next one), blank or not."""
        self._line += 1
        number = self._line
        if not raw.strip():
            return
        self.rows += 1
        limit = self.max_line_bytes
        if len(raw) > limit:
            self._add(
                number,
                "",
                f"the row is longer than {limit // (1024 * 1024)} MiB, the most one row may hold",
            )
            return
        fast = self._fast
        if fast is not None and fast(raw):
            return
        try:
            row = from_json(raw)
        except ValueError:
            row = self._parse_slowly(number, raw)
            if row is None:
                return
        self._check_row(number, row)

    def _parse_slowly(self, number: int, raw: bytes) -> Any:
        """The standard library decides lines the fast parser refused, and words the error."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._add(
                number,
                "",
                f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                "save the file as UTF-8",
            )
            return None
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            self._add(number, "", f"is not valid JSON: {exc.msg} (column {exc.colno})")
            return None
        except RecursionError:
            self._add(number, "", "is not valid JSON: it nests too deeply")
            return None
        except ValueError:
            # Python refuses to read a whole number of more than 4300 digits.
            self._add(
                number,
                "",
                "holds a number too long to read (more than 4300 digits); a row holds text, "
                "write the number as a string or remove it",
            )
            return None
        # The fast parser refuses an escaped surrogate without its pair ("\ud800"); the standard
        # library reads it into a string no tokenizer can encode.
        try:
            where = _lone_surrogate(row, "")
        except RecursionError:
            self._add(number, "", "is not valid JSON: it nests too deeply")
            return None
        if where is not None:
            self._add(
                number,
                where,
                "holds a lone surrogate escape (such as \\ud800), which is not a "
                "character; remove it or write the character itself",
            )
            return None
        return row

    # --- rows ------------------------------------------------------------------------------------

    def _check_row(self, number: int, row: Any) -> None:
        if type(row) is not dict:
            self._add(
                number,
                "",
                f"holds {_kind(row)}; each line holds one row, an object with messages "
                "(chat), prompt and completion, or prompt, chosen and rejected (preference)",
            )
            return
        problems: list[tuple[str, str]] = []
        if not _PREFERENCE_KEYS.isdisjoint(row):
            fmt = PREFERENCE
            style, images = _check_preference(row, problems)
        elif "messages" in row:
            if "prompt" in row or "completion" in row:
                self._add(
                    number,
                    "",
                    "has both messages and prompt/completion; a row is either chat (messages) "
                    "or prompt-completion",
                )
                return
            fmt, style = CHAT, "messages"
            images = _check_messages(row["messages"], "messages", True, problems)
        elif "prompt" in row or "completion" in row:
            fmt = PROMPT_COMPLETION
            style, images = _check_prompt_completion(row, problems)
        else:
            keys = ", ".join(sorted(str(k) for k in row)[:8]) or "none"
            self._add(
                number,
                "",
                f"has neither messages nor prompt and completion (keys: {keys}); "
                "write chat rows, prompt-completion rows or preference rows",
            )
            return
        for where, text in problems:
            self._add(number, where, text)
        if problems:
            return
        if images:
            self.has_images = True
        shape = self._shape
        if shape is None:
            self._shape = _Shape(fmt, style, number)
            self._fast = _FAST.get((fmt, style))
        elif shape.format != fmt or shape.style != style:
            self._add(number, "", _mixed(fmt, style, shape))

    def _add(self, number: int, where: str, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < self.max_listed:
            prefix = f"line {number}: {where} " if where else f"line {number}: "
            self.problems.append(RowProblem(number, where, prefix + text))


# --- formats -------------------------------------------------------------------------------------


def _check_prompt_completion(
    row: dict[str, Any], problems: list[tuple[str, str]]
) -> tuple[str, bool]:
    """Check a prompt-completion row; returns its style and whether it carries an image."""
    prompt = row.get("prompt")
    completion = row.get("completion")
    for name, value in (("prompt", prompt), ("completion", completion)):
        if name not in row:
            problems.append(("", f"has no {name}; a prompt-completion row needs both"))
        elif type(value) is not str and type(value) is not list:
            problems.append((name, f"is {_kind(value)}; it must be a string or a list of messages"))
    if problems:
        return "text", False
    if type(prompt) is str and type(completion) is str:
        if not completion.strip():
            problems.append(("completion", "is empty; give the answer to train on"))
        return "text", False
    if type(prompt) is list and type(completion) is list:
        images = _check_messages(prompt, "prompt", False, problems)
        images |= _check_messages(completion, "completion", True, problems)
        return "messages", images
    problems.append(
        (
            "",
            f"has a prompt that is {_kind(prompt)} and a completion that is {_kind(completion)}; "
            "make both strings or both lists of messages",
        )
    )
    return "text", False


def _check_preference(row: dict[str, Any], problems: list[tuple[str, str]]) -> tuple[str, bool]:
    """Check a preference row in OpenAI's or TRL's shape; returns its style and whether it
    carries an image."""
    if "preferred_output" in row or "non_preferred_output" in row or "input" in row:
        return "openai", _check_openai_pair(row, problems)
    return _check_trl_pair(row, problems)


def _check_openai_pair(row: dict[str, Any], problems: list[tuple[str, str]]) -> bool:
    for name in _OPENAI_KEYS:
        if name not in row:
            problems.append(
                (
                    "",
                    f"has no {name}; an OpenAI preference row needs input, preferred_output and "
                    "non_preferred_output",
                )
            )
    if problems:
        return False
    given = row["input"]
    if type(given) is not dict or "messages" not in given:
        problems.append(
            ("input", f'is {_kind(given)} without messages; write it as {{"messages": [...]}}')
        )
        images = False
    else:
        images = _check_prompt(given["messages"], "input.messages", problems)
    _check_answer(row["preferred_output"], "preferred_output", problems)
    _check_answer(row["non_preferred_output"], "non_preferred_output", problems)
    if not problems and row["preferred_output"] == row["non_preferred_output"]:
        problems.append(
            (
                "",
                "has the same preferred_output and non_preferred_output; a pair needs two "
                "different answers",
            )
        )
    return images


def _check_trl_pair(row: dict[str, Any], problems: list[tuple[str, str]]) -> tuple[str, bool]:
    for name in ("chosen", "rejected"):
        if name not in row:
            problems.append(
                ("", f"has no {name}; a preference row needs both a chosen and a rejected answer")
            )
    if problems:
        return "text", False
    sides = {k: row[k] for k in ("prompt", "chosen", "rejected") if k in row}
    for name, value in sides.items():
        if type(value) is not str and type(value) is not list:
            problems.append((name, f"is {_kind(value)}; it must be a string or a list of messages"))
    if problems:
        return "text", False
    implicit = "prompt" not in row
    kinds = {type(v) for v in sides.values()}
    if len(kinds) > 1:
        shown = ", ".join(f"{k} is {_kind(v)}" for k, v in sides.items())
        problems.append(
            (
                "",
                f"mixes strings and lists of messages ({shown}); make "
                f"{'chosen and rejected' if implicit else 'prompt, chosen and rejected'} all "
                "strings or all lists of messages",
            )
        )
        return "text", False
    chosen, rejected = row["chosen"], row["rejected"]
    if type(chosen) is str:
        for name, text in (("chosen", chosen), ("rejected", rejected)):
            if not text.strip():
                problems.append((name, "is an empty answer; give the answer's text"))
        if not problems and chosen == rejected:
            problems.append(_SAME_ANSWER)
        return ("implicit-text" if implicit else "text"), False
    if not implicit:
        images = _check_prompt(row["prompt"], "prompt", problems)
        _check_answer(chosen, "chosen", problems)
        _check_answer(rejected, "rejected", problems)
        if not problems and chosen == rejected:
            problems.append(_SAME_ANSWER)
        return "messages", images
    images = _check_messages(chosen, "chosen", True, problems)
    images |= _check_messages(rejected, "rejected", True, problems)
    if problems:
        return "implicit-messages", images
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == len(chosen) and shared == len(rejected):
        problems.append(_SAME_ANSWER)
    elif shared == 0:
        problems.append(
            (
                "",
                "has chosen and rejected conversations that share no opening message; without a "
                "prompt, the prompt is the messages both begin with, so begin both with it or "
                "give prompt",
            )
        )
    else:
        _check_prompt(chosen[:shared], "chosen", problems)
        for name, side in (("chosen", chosen), ("rejected", rejected)):
            if shared < len(side):
                _check_answer(side[shared:], name, problems, first=shared)
    return "implicit-messages", images


_SAME_ANSWER = ("", "has the same chosen and rejected answer; a pair needs two different answers")
_PAIR_SHAPES = {
    "openai": "OpenAI's input, preferred_output and non_preferred_output",
    "text": "prompt, chosen and rejected strings",
    "messages": "prompt, chosen and rejected lists of messages",
    "implicit-text": "chosen and rejected strings without a prompt",
    "implicit-messages": "chosen and rejected conversations without a prompt",
}


def _check_prompt(messages: Any, where: str, problems: list[tuple[str, str]]) -> bool:
    """A preference prompt: messages whose system message comes first and whose last turn is
    the one the answers reply to. Returns whether it carries an image."""
    before = len(problems)
    images = _check_messages(messages, where, False, problems)
    if len(problems) > before:
        return images
    roles = [m.get("role") for m in messages]
    for i, role in enumerate(roles):
        if role == "system" and i > 0:
            problems.append(
                (
                    f"{where}[{i}].role",
                    "is a system message after the conversation began; the system message "
                    "comes first",
                )
            )
    if roles[-1] == "assistant":
        problems.append(
            (
                where,
                "ends with an assistant message; a prompt ends with the turn the answers reply "
                "to (a user or tool message)",
            )
        )
    return images


def _check_answer(
    messages: Any, where: str, problems: list[tuple[str, str]], first: int = 0
) -> None:
    """An answer: the assistant's messages (tool results between them), starting with the
    assistant and holding some text or a tool call. `first` is the index of its first message
    in `where` (an implicit prompt's answer follows the shared messages)."""
    if type(messages) is not list:
        problems.append((where, f"is {_kind(messages)}; it must be a list of messages"))
        return
    before = len(problems)
    if first == 0:
        _check_messages(messages, where, True, problems)
    if len(problems) > before:
        return
    role = messages[0].get("role")
    if role != "assistant":
        problems.append(
            (
                f"{where}[{first}].role",
                f"is {role!r}; an answer starts with the assistant's message (the prompt holds "
                "the turns before it)",
            )
        )
        return
    if not any(_has_answer(m) for m in messages if m.get("role") == "assistant"):
        problems.append((where, "is an empty answer; give the assistant's text"))


def _has_answer(message: dict[str, Any]) -> bool:
    if message.get("tool_calls"):
        return True
    content = message.get("content")
    if type(content) is str:
        return bool(content.strip())
    if type(content) is list:
        return any(
            type(p) is dict and type(p.get("text")) is str and p["text"].strip() for p in content
        )
    return False


def _check_messages(
    messages: Any, where: str, ends_with_answer: bool, problems: list[tuple[str, str]]
) -> bool:
    """Check a list of messages; returns whether any carries an image part."""
    if type(messages) is not list:
        problems.append((where, f"is {_kind(messages)}; it must be a list of messages"))
        return False
    if not messages:
        problems.append((where, "is empty; it must hold at least one message"))
        return False
    images = False
    for i, message in enumerate(messages):
        if type(message) is not dict:
            problems.append(
                (
                    f"{where}[{i}]",
                    f"is {_kind(message)}; a message is an object with role and content",
                )
            )
            continue
        role = message.get("role")
        if type(role) is not str or role not in _ROLES:
            text = (
                f"is {role!r}"
                if type(role) is str
                else (
                    "is missing" if role is None and "role" not in message else f"is {_kind(role)}"
                )
            )
            problems.append((f"{where}[{i}].role", f"{text}; use {_ROLE_LIST}"))
        content = message.get("content")
        if type(content) is str:
            continue
        if type(content) is list:
            images |= _check_parts(content, f"{where}[{i}].content", role, problems)
        elif content is None and role == "assistant" and message.get("tool_calls"):
            continue  # an assistant turn that only calls tools
        elif content is None and "content" not in message:
            problems.append(
                (f"{where}[{i}].content", "is missing; give a string or a list of parts")
            )
        else:
            problems.append(
                (f"{where}[{i}].content", f"is {_kind(content)}; use a string or a list of parts")
            )
    if ends_with_answer:
        last = messages[-1]
        last_role = last.get("role") if type(last) is dict else None
        if last_role != "assistant" and type(last_role) is str and last_role in _ROLES:
            problems.append(
                (
                    where,
                    f"ends with a {last_role} message; training needs the assistant's answer "
                    "as the last message",
                )
            )
    return images


def _check_parts(parts: list[Any], where: str, role: Any, problems: list[tuple[str, str]]) -> bool:
    if not parts:
        problems.append((where, "is an empty list; give a string or at least one part"))
        return False
    images = False
    for j, part in enumerate(parts):
        here = f"{where}[{j}]"
        if type(part) is not dict:
            problems.append((here, f"is {_kind(part)}; a part is an object with a type"))
            continue
        kind = part.get("type")
        if kind == "text":
            if type(part.get("text")) is not str:
                problems.append(
                    (f"{here}.text", f"is {_kind(part.get('text'))}; it must be a string")
                )
        elif kind == "image":
            images = True
            if role != "user" and type(role) is str and role in _ROLES:
                problems.append(
                    (here, f"is an image in the {role}'s message; only user messages carry images")
                )
        else:
            shown = repr(kind) if type(kind) is str else _kind(kind)
            problems.append((f"{here}.type", f"is {shown}; use {_PART_TYPES}"))
    return images


# The quick tests parse a line straight into the one shape they pass (in C, refusing every other
# key, so a number too long, a lone surrogate or a byte that is not UTF-8 all go to the full
# check, which words the problem); what the shape cannot say is checked after.
_Role = Literal["system", "user", "assistant", "tool"]


# gc=False: the parsed rows hold only strings and lists, never a cycle, so the garbage collector
# need not track the million objects a large file makes (its passes cost a tenth of the check).
class _PlainMessage(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    role: _Role
    content: str


class _PlainChat(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    messages: list[_PlainMessage]


class _PlainPromptCompletion(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    prompt: str
    completion: str


_chat_decoder = msgspec.json.Decoder(_PlainChat)
_prompt_completion_decoder = msgspec.json.Decoder(_PlainPromptCompletion)


def _plain_chat(raw: Buffer) -> bool:
    """A chat row of messages with only a valid role and a string content, ending with the
    assistant."""
    try:
        messages = _chat_decoder.decode(raw).messages
    except msgspec.DecodeError:
        return False
    return bool(messages) and messages[-1].role == "assistant"


def _plain_prompt_completion(raw: Buffer) -> bool:
    """A prompt-completion row of two strings and nothing else, the completion not blank."""
    try:
        row = _prompt_completion_decoder.decode(raw)
    except msgspec.DecodeError:
        return False
    return bool(row.completion.strip())


_FAST: dict[tuple[str, str], Callable[[Buffer], bool]] = {
    (CHAT, "messages"): _plain_chat,
    (PROMPT_COMPLETION, "text"): _plain_prompt_completion,
}


def _mixed(fmt: str, style: str, first: _Shape) -> str:
    if fmt != first.format:
        return (
            f"is a {fmt} row, but line {first.line} is a {first.format} row; "
            "all rows of a file share one format"
        )
    if fmt == PREFERENCE:
        return (
            f"writes its pair as {_PAIR_SHAPES[style]}, but line {first.line} writes it as "
            f"{_PAIR_SHAPES[first.style]}; all rows of a file share one shape"
        )
    now = "lists of messages" if style == "messages" else "strings"
    then = "lists of messages" if first.style == "messages" else "strings"
    return (
        f"has prompt and completion as {now}, but line {first.line} has {then}; "
        "all rows of a file share one format"
    )


def _lone_surrogate(value: Any, where: str) -> str | None:
    """Where in a row a string holds a lone surrogate (``messages[0].content``), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _lone_surrogate(item, f"{where}[{i}]")
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            if _lone_surrogate(key, where) is not None:
                return where
            found = _lone_surrogate(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    return None


def _kind(value: Any) -> str:
    """How a JSON value reads in a message: 'a number', 'a list', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
