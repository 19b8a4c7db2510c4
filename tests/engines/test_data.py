"""Dataset rows as training examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from akka_training.engines.data import decode_image, preference_examples, rl_rows, sft_examples
from akka_training.engines.failures import DataError
from tests.engines.rows import data_url


def test_images_come_from_data_urls_base64_and_local_files(tmp_path: Path) -> None:
    picture = tmp_path / "red.png"
    Image.new("RGB", (3, 2), (200, 0, 0)).save(picture)
    inline = data_url((200, 0, 0))

    for source in (inline, inline.split(",", 1)[1], f"file://{picture}", str(picture)):
        image = decode_image(source)
        assert image.mode == "RGB" and image.getpixel((0, 0)) == (200, 0, 0)
    with pytest.raises(DataError, match="network"):
        decode_image("https://example.com/cat.png")


def test_image_rows_become_vision_examples_and_text_models_refuse_them(tmp_path: Path) -> None:
    picture = tmp_path / "cat.png"
    Image.new("RGB", (4, 4)).save(picture)
    rows: list[dict[str, Any]] = [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "url": f"file://{picture}"},
                        {"type": "text", "text": "What is it?"},
                    ],
                },
                {"role": "assistant", "content": "A cat."},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
            ]
        },
    ]

    examples = sft_examples(rows, image_text=True)

    assert [len(e["images"]) for e in examples] == [1, 0]
    assert examples[0]["messages"][0]["content"] == [
        {"type": "image"},
        {"type": "text", "text": "What is it?"},
    ]
    assert examples[1]["messages"][1]["content"] == [{"type": "text", "text": "Hello"}]
    with pytest.raises(DataError, match="image-text base model"):
        sft_examples(rows, image_text=False)


def test_rl_rows_split_the_prompt_from_the_expected_answer() -> None:
    rows: list[dict[str, Any]] = [
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "2 + 2?"},
                {"role": "assistant", "content": "#### 4"},
            ],
            "id": "a",
        },
        {"messages": [{"role": "user", "content": "Say hi."}]},
        {
            "prompt": [{"role": "user", "content": "3 + 3?"}],
            "completion": [{"role": "assistant", "content": "#### 6"}],
        },
    ]

    out = rl_rows(rows)

    assert [r.expected for r in out] == ["#### 4", None, "#### 6"]
    assert isinstance(out[0].prompt, list)
    assert [m["role"] for m in out[0].prompt] == ["system", "user"]
    assert [r.index for r in out] == [0, 1, 2]
    with pytest.raises(DataError, match="mixes"):
        rl_rows(
            [{"prompt": "a", "completion": "b"}, {"prompt": [{"role": "user", "content": "c"}]}]
        )


def test_preference_rows_become_trls_pairs_whatever_their_shape() -> None:
    user = {"role": "user", "content": "1+1?"}
    right, wrong = {"role": "assistant", "content": "2"}, {"role": "assistant", "content": "3"}
    openai = {
        "input": {"messages": [user]},
        "preferred_output": [right],
        "non_preferred_output": [wrong],
    }
    assert preference_examples([openai]) == [
        {"prompt": [user], "chosen": [right], "rejected": [wrong]}
    ]
    implicit = {"chosen": [user, right], "rejected": [user, wrong]}
    assert preference_examples([implicit]) == [implicit]
    text = {"prompt": "1+1=", "chosen": "2", "rejected": "3"}
    assert preference_examples([text]) == [text]
    with pytest.raises(DataError, match="mixes preference rows of different shapes"):
        preference_examples([openai, text])
