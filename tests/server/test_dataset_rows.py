"""Row validation while a dataset streams in: formats, line numbers, fields, limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from akka_training.server.dataset_rows import RowSummary, RowValidator


def chat(*turns: tuple[str, Any], **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": r, "content": c} for r, c in turns], **extra}


def jsonl(*rows: Any) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


def check(data: bytes, block: int | None = None, **kwargs: Any) -> RowSummary:
    validator = RowValidator(**kwargs)
    step = block or len(data) or 1
    for i in range(0, len(data), step):
        validator.feed(data[i : i + step])
    return validator.finish()


def messages(summary: RowSummary) -> list[str]:
    return [p.message for p in summary.problems]


GOOD = jsonl(
    chat(("system", "Be brief."), ("user", "1+1?"), ("assistant", "2")),
    chat(("user", "2+2?"), ("assistant", "4")),
    chat(("user", [{"type": "text", "text": "3+3?"}]), ("assistant", "6")),
)


def test_chat_rows_are_counted_whatever_the_chunk_boundaries() -> None:
    whole = check(GOOD)
    assert whole.ok and whole.rows == 3 and whole.format == "chat" and not whole.has_images
    for block in (1, 2, 7, 64):
        assert check(GOOD, block) == whole


def test_blank_lines_are_skipped_but_keep_their_line_numbers() -> None:
    data = b"\n" + GOOD + b"   \r\n\n" + b'{"messages": [{"role": "bot", "content": "x"}]}'
    summary = check(data, 5)
    assert summary.rows == 4
    # The last line has no newline after it and is still checked: it is line 7.
    assert messages(summary) == [
        "line 7: messages[0].role is 'bot'; use system, user, assistant or tool",
    ]


def test_a_bad_role_names_the_line_and_the_field() -> None:
    rows = [chat(("user", "q"), ("assistant", "a"))] * 6
    rows.append(chat(("system", "s"), ("user", "q"), ("bot", "a"), ("assistant", "a")))
    summary = check(jsonl(*rows))
    assert summary.problem_count == 1
    assert messages(summary) == [
        "line 7: messages[2].role is 'bot'; use system, user, assistant or tool"
    ]


def test_malformed_json_names_the_line_and_column() -> None:
    data = GOOD + b'{"messages": [{"role": "user", "content": "x"},]}\n'
    summary = check(data)
    assert messages(summary) == ["line 4: is not valid JSON: Expecting value (column 48)"]
    assert summary.rows == 4


def test_a_conversation_must_end_with_the_assistant() -> None:
    summary = check(jsonl(chat(("user", "q"), ("assistant", "a"), ("user", "and?"))))
    assert messages(summary) == [
        "line 1: messages ends with a user message; training needs the assistant's answer "
        "as the last message"
    ]


def test_message_shapes_are_checked() -> None:
    rows = [
        {"messages": []},
        {"messages": "hello"},
        {"messages": [["user", "q"], {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "user"}, {"role": "assistant", "content": 3}]},
        {"messages": [{"role": ["user"], "content": "q"}, {"role": "assistant", "content": "a"}]},
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
                {"role": "tool", "content": "42"},
                {"role": "assistant", "content": "42"},
            ]
        },
    ]
    assert messages(check(jsonl(*rows))) == [
        "line 1: messages is empty; it must hold at least one message",
        "line 2: messages is a string; it must be a list of messages",
        "line 3: messages[0] is a list; a message is an object with role and content",
        "line 4: messages[0].content is missing; give a string or a list of parts",
        "line 4: messages[1].content is a number; use a string or a list of parts",
        "line 5: messages[0].role is a list; use system, user, assistant or tool",
    ]


def test_image_parts_set_the_image_flag() -> None:
    image = {"type": "image", "url": "file:///data/cat.png"}
    row = chat(
        ("user", [image, {"type": "text", "text": "What is this?"}]), ("assistant", "A cat.")
    )
    summary = check(GOOD + jsonl(row))
    assert summary.ok and summary.has_images and summary.format == "chat"


def test_parts_are_checked_and_only_users_send_images() -> None:
    rows = [
        chat(("user", [{"type": "audio"}]), ("assistant", "a")),
        chat(("user", [{"type": "text", "text": 5}]), ("assistant", "a")),
        chat(("user", "q"), ("assistant", [{"type": "image"}])),
        chat(("user", []), ("assistant", "a")),
    ]
    assert messages(check(jsonl(*rows))) == [
        "line 1: messages[0].content[0].type is 'audio'; use text or image",
        "line 2: messages[0].content[0].text is a number; it must be a string",
        "line 3: messages[1].content[0] is an image in the assistant's message; only user "
        "messages carry images",
        "line 4: messages[0].content is an empty list; give a string or at least one part",
    ]


def test_prompt_completion_rows_as_strings_or_messages() -> None:
    strings = check(jsonl({"prompt": "2+2=", "completion": "4"}, {"prompt": "", "completion": "x"}))
    assert strings.ok and strings.format == "prompt-completion" and strings.rows == 2
    lists = check(
        jsonl(
            {
                "prompt": [{"role": "user", "content": "2+2?"}],
                "completion": [{"role": "assistant", "content": "4"}],
            }
        )
    )
    assert lists.ok and lists.format == "prompt-completion"


def test_prompt_completion_problems() -> None:
    rows = [
        {"prompt": "q"},
        {"prompt": "q", "completion": [{"role": "assistant", "content": "a"}]},
        {"prompt": 1, "completion": "a"},
        {"prompt": "q", "completion": "  "},
        {
            "prompt": [{"role": "user", "content": "q"}],
            "completion": [{"role": "user", "content": "a"}],
        },
        {"messages": [{"role": "user", "content": "q"}], "prompt": "q", "completion": "a"},
    ]
    assert messages(check(jsonl(*rows))) == [
        "line 1: has no completion; a prompt-completion row needs both",
        "line 2: has a prompt that is a string and a completion that is a list; make both strings "
        "or both lists of messages",
        "line 3: prompt is a number; it must be a string or a list of messages",
        "line 4: completion is empty; give the answer to train on",
        "line 5: completion ends with a user message; training needs the assistant's answer as "
        "the last message",
        "line 6: has both messages and prompt/completion; a row is either chat (messages) or "
        "prompt-completion",
    ]


def test_every_row_shares_the_first_rows_format() -> None:
    data = GOOD + jsonl({"prompt": "q", "completion": "a"})
    assert messages(check(data)) == [
        "line 4: is a prompt-completion row, but line 1 is a chat row; all rows of a file share "
        "one format"
    ]
    styles = jsonl(
        {"prompt": "q", "completion": "a"},
        {
            "prompt": [{"role": "user", "content": "q"}],
            "completion": [{"role": "assistant", "content": "a"}],
        },
    )
    assert messages(check(styles)) == [
        "line 2: has prompt and completion as lists of messages, but line 1 has strings; all "
        "rows of a file share one format"
    ]


def test_rows_that_are_not_rows() -> None:
    rows: list[Any] = [[1, 2], "text", {"text": "hello", "label": 1}]
    assert messages(check(jsonl(*rows))) == [
        "line 1: holds a list; each line holds one row, an object with messages (chat), prompt "
        "and completion, or prompt, chosen and rejected (preference)",
        "line 2: holds a string; each line holds one row, an object with messages (chat), "
        "prompt and completion, or prompt, chosen and rejected (preference)",
        "line 3: has neither messages nor prompt and completion (keys: label, text); write chat "
        "rows, prompt-completion rows or preference rows",
    ]


def test_the_first_twenty_problems_are_listed_and_the_rest_counted() -> None:
    data = GOOD + b"not json\n" * 25
    summary = check(data, 100)
    assert summary.problem_count == 25
    assert [p.line for p in summary.problems] == list(range(4, 24))
    assert summary.rows == 28


def test_text_that_is_not_utf8_is_named() -> None:
    summary = check(GOOD + b'{"prompt": "caf\xe9", "completion": "x"}\n')
    assert messages(summary) == [
        "line 4: is not UTF-8 text (byte 0xe9 at column 16); save the file as UTF-8"
    ]


def test_what_the_fast_parser_refuses_is_worded_by_the_line_and_the_field() -> None:
    # A lone surrogate escape is JSON the standard library reads, into a string no tokenizer can
    # encode; a number of 5000 digits is JSON it refuses to read. A pair is one character.
    summary = check(
        b'{"prompt": "\\ud800", "completion": "x"}\n'
        b'{"prompt": "q", "completion": "\\ud83d\\ude00"}\n'
        b'{"prompt": "q", "completion": "a", "n": ' + b"1" * 5000 + b"}\n"
    )
    assert summary.rows == 3
    assert [(p.line, p.field, p.message) for p in summary.problems] == [
        (
            1,
            "prompt",
            "line 1: prompt holds a lone surrogate escape (such as \\ud800), which is not a "
            "character; remove it or write the character itself",
        ),
        (
            3,
            "",
            "line 3: holds a number too long to read (more than 4300 digits); a row holds "
            "text, write the number as a string or remove it",
        ),
    ]


def test_an_over_long_line_is_refused_without_being_held(block: int = 10) -> None:
    long_row = json.dumps(chat(("user", "x" * 200), ("assistant", "a"))).encode()
    data = GOOD + long_row + b"\n" + b'{"messages": [{"role": "bot", "content": "x"}]}\n'
    summary = check(data, block, max_line_bytes=150)
    assert summary.rows == 5
    assert [p.line for p in summary.problems] == [4, 5]
    assert "line 4: the row is longer than" in summary.problems[0].message
    # The same line arriving in one piece is refused the same way.
    assert [p.line for p in check(data, max_line_bytes=150).problems] == [4, 5]


@pytest.mark.parametrize("data", [b"", b"\n\n  \n"])
def test_a_file_without_rows(data: bytes) -> None:
    summary = check(data)
    assert summary.rows == 0 and summary.ok and summary.format is None


PLAIN_CHAT = json.dumps(chat(("user", "1+1?"), ("assistant", "2"))).encode()
PLAIN_TEXT = json.dumps({"prompt": "1+1?", "completion": "2"}).encode()
ANSWER = '"role": "assistant", "content": "2"'


@pytest.mark.parametrize(
    ("first", "line"),
    [
        (PLAIN_CHAT, PLAIN_CHAT + b" " + PLAIN_CHAT),  # two rows on one line
        (PLAIN_CHAT, b'{"messages": [{"role": "assistant", "content": "\\ud800"}]}'),
        (PLAIN_CHAT, b'{"messages": [{"role": "assistant", "content": "a\x01b"}]}'),
        (PLAIN_CHAT, b'{"messages": [{"role": "assistant", "content": "\xff"}]}'),
        (PLAIN_CHAT, b'{"messages": [{' + ANSWER.encode() + b', "n": ' + b"9" * 5000 + b"}]}"),
        (PLAIN_CHAT, b'{"messages": []}'),
        (PLAIN_CHAT, b'{"messages": [{"role": "user", "content": "1+1?"}]}'),
        (PLAIN_CHAT, b'{"messages": [{"role": "bot", "content": "2"}]}'),
        (PLAIN_CHAT, b'{"messages": [{"role": "assistant", "role": "bot", "content": "2"}]}'),
        (PLAIN_CHAT, b'{"messages": [{' + ANSWER.encode() + b"}], " + b'"prompt": "x"}'),
        (PLAIN_TEXT, b'{"prompt": "1+1?", "completion": "  "}'),
        (PLAIN_TEXT, b'{"prompt": "1+1?", "completion": 2}'),
        (PLAIN_TEXT, b'{"prompt": "1+1?", "completion": "2", "messages": []}'),
        (PLAIN_TEXT, b'{"prompt": "1+1?", "completion": "2"} {"prompt": "a", "completion": "b"}'),
    ],
)
def test_rows_after_a_valid_one_get_the_same_words_as_first_rows(first: bytes, line: bytes) -> None:
    # The rows after the file's first valid row go through a quicker check; it passes only rows
    # the full check passes, so every refusal keeps its words.
    alone = check(line + b"\n")
    after = check(first + b"\n" + line + b"\n")
    assert not alone.ok and alone.problem_count == 1, messages(alone)
    assert after.problem_count == 1
    assert messages(after) == [messages(alone)[0].replace("line 1:", "line 2:", 1)]


def test_a_block_of_lines_is_checked_as_line_by_line() -> None:
    # Once the file's shape is known, the lines of a block are found in place and only those the
    # quick test does not pass are checked in full: the result is the same as for a file fed a
    # byte at a time, whatever lies between good rows (blank lines, CRLF, refused rows, rows the
    # full check passes, an over-long row, a last line without a newline).
    good = json.dumps(chat(("user", "q"), ("assistant", "a"))).encode()
    lines = [
        good,
        good + b"\r",
        b"",
        b"   ",
        good,
        b"not json",
        json.dumps(chat(("user", [{"type": "text", "text": "q"}]), ("assistant", "a"))).encode(),
        b'{"messages": [{"role": "bot", "content": "x"}]}',
        good + b" " + good,
        json.dumps(chat(("user", "x" * 300), ("assistant", "a"))).encode(),
        b'{"prompt": "q", "completion": "a"}',
        b'{"messages": [{"role": "assistant", "content": "\\ud800"}]}',
        good,
    ]
    data = b"\n".join(lines * 3)  # no newline after the last line
    byte_by_byte = check(data, 1, max_line_bytes=250)
    assert byte_by_byte.rows == 33 and byte_by_byte.problem_count == 18
    for block in (None, 5, 64, 300, 1000):
        assert check(data, block, max_line_bytes=250) == byte_by_byte, block


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_preference_rows_in_openais_shape_and_trls() -> None:
    shapes = [
        {
            "input": {"messages": [user("1+1?")]},
            "preferred_output": [answer("2")],
            "non_preferred_output": [answer("3")],
        },
        {"prompt": "1+1=", "chosen": "2", "rejected": "3"},
        {"prompt": [user("1+1?")], "chosen": [answer("2")], "rejected": [answer("3")]},
        {"chosen": [user("1+1?"), answer("2")], "rejected": [user("1+1?"), answer("3")]},
        {"chosen": "1+1=2", "rejected": "1+1=3"},
    ]
    for row in shapes:
        summary = check(jsonl(row, row))
        assert (summary.ok, summary.rows, summary.format) == (True, 2, "preference"), row


def test_preference_rows_are_refused_with_their_line_and_reason() -> None:
    summary = check(
        jsonl(
            {"input": {"messages": [user("q")]}, "preferred_output": [answer("2")]},
            {"prompt": "q", "chosen": "2", "rejected": " "},
            {"prompt": "q", "chosen": "2", "rejected": "2"},
            {
                "prompt": [user("q"), answer("a")],
                "chosen": [answer("2")],
                "rejected": [answer("3")],
            },
            {"prompt": [user("q")], "chosen": [user("2")], "rejected": [answer("3"), user("4")]},
            {
                "prompt": [user("q"), {"role": "system", "content": "s"}],
                "chosen": [answer("2")],
                "rejected": [answer("3")],
            },
            {"chosen": [user("q"), answer("2")], "rejected": [user("r"), answer("3")]},
            {"prompt": [user("q")], "chosen": "2", "rejected": "3"},
        )
    )
    assert messages(summary) == [
        "line 1: has no non_preferred_output; an OpenAI preference row needs input, "
        "preferred_output and non_preferred_output",
        "line 2: rejected is an empty answer; give the answer's text",
        "line 3: has the same chosen and rejected answer; a pair needs two different answers",
        "line 4: prompt ends with an assistant message; a prompt ends with the turn the answers "
        "reply to (a user or tool message)",
        "line 5: chosen ends with a user message; training needs the assistant's answer as the "
        "last message",
        "line 5: rejected ends with a user message; training needs the assistant's answer as the "
        "last message",
        "line 6: prompt[1].role is a system message after the conversation began; the system "
        "message comes first",
        "line 7: has chosen and rejected conversations that share no opening message; without a "
        "prompt, the prompt is the messages both begin with, so begin both with it or give prompt",
        "line 8: mixes strings and lists of messages (prompt is a list, chosen is a string, "
        "rejected is a string); make prompt, chosen and rejected all strings or all lists of "
        "messages",
    ]


def test_a_preference_answer_is_the_assistants_and_differs_from_the_other() -> None:
    summary = check(
        jsonl(
            {
                "input": {"messages": [user("q")]},
                "preferred_output": [answer("2")],
                "non_preferred_output": [answer("2")],
            },
            {
                "input": {"messages": [user("q")]},
                "preferred_output": [answer("")],
                "non_preferred_output": [answer("3")],
            },
            {"prompt": [user("q")], "chosen": [answer("2")], "rejected": [user("x"), answer("3")]},
        )
    )
    assert messages(summary) == [
        "line 1: has the same preferred_output and non_preferred_output; a pair needs two "
        "different answers",
        "line 2: preferred_output is an empty answer; give the assistant's text",
        "line 3: rejected[0].role is 'user'; an answer starts with the assistant's message (the "
        "prompt holds the turns before it)",
    ]


def test_preference_rows_share_one_shape_and_images_are_flagged() -> None:
    summary = check(
        jsonl(
            {"prompt": "q", "chosen": "2", "rejected": "3"},
            {"chosen": "q2", "rejected": "q3"},
        )
    )
    assert messages(summary) == [
        "line 2: writes its pair as chosen and rejected strings without a prompt, but line 1 "
        "writes it as prompt, chosen and rejected strings; all rows of a file share one shape"
    ]
    image = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}
    pictured = check(jsonl({"prompt": [image], "chosen": [answer("a")], "rejected": [answer("b")]}))
    assert (pictured.ok, pictured.has_images) == (True, True)
