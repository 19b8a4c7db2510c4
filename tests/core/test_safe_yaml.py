"""Documents read by `core.safe_yaml`: text escapes as a JSON reader reads them."""

from __future__ import annotations

import json

import pytest

from akka_training.core.errors import InvalidRequest
from akka_training.core.safe_yaml import load_document


def test_a_pair_of_surrogate_escapes_is_one_character() -> None:
    text = json.dumps({"description": "tick \U0001f600", "tags": ["\U0001f600"]})
    assert "\\ud83d\\ude00" in text  # json.dumps writes the character as its UTF-16 pair
    assert load_document(text, "plan.json") == json.loads(text)


def test_a_lone_surrogate_in_a_list_names_its_place() -> None:
    with pytest.raises(InvalidRequest) as refused:
        load_document('{"config": {"stop": ["a", "\\udc00"]}}', "plan.json")
    assert str(refused.value).startswith(
        "plan.json line 1 (config.stop[1]): the text holds a lone surrogate"
    )
