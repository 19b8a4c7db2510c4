"""docs/settings.md is generated from the settings model and current: every `trainer.*` key
(list items and the catalog's entries included) is on it with its type, default and meaning, and
its example is a settings file the trainer reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from akka_training.config import reference
from akka_training.config.settings import load_settings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_the_settings_reference_is_current() -> None:
    assert PAGE.read_text() == reference.render(), (
        "docs/settings.md is stale: run python -m akka_training.config.reference > docs/settings.md"
    )


def test_every_key_has_a_row_with_type_default_and_meaning() -> None:
    text = PAGE.read_text()
    for key in reference.MEANINGS:
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `{key}` |")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] and cells[4], row
    for key in ("trainer.storage.s3.endpoint-url", "trainer.bootstrap.admin-token-file",
                "trainer.catalog[].path", "trainer.catalog[].envelopes[].gpus"):  # fmt: skip
        assert f"| `{key}` |" in text


def test_a_key_without_a_meaning_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(reference.MEANINGS, "trainer.storage.s3.region")
    with pytest.raises(KeyError, match=r"trainer.storage.s3.region has no meaning"):
        reference.render()


def test_the_catalog_example_is_a_settings_file(tmp_path: Path) -> None:
    (example,) = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    path = tmp_path / "settings.yaml"
    path.write_text(example)
    (model,) = load_settings(path).trainer.catalog or []
    assert model.path == "s3://akka-training/models/qwen3-8b"
    assert [e.gpu_memory_gib for e in model.envelopes] == [80, 80]
