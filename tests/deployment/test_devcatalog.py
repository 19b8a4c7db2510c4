"""Serving the development models on an installation without the training stack: one sentence
that names the extra, before anything is built."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from akka_training.core.errors import ServiceUnavailable
from akka_training.deployment.devcatalog import load_dev_catalog


def test_without_the_training_stack_the_development_models_name_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on `pip install -e .`: the service and the CLI, no transformers.
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ServiceUnavailable) as refused:
        load_dev_catalog(tmp_path / "dev-models")
    assert refused.value.message == (
        "With no trainer.catalog in its settings the trainer serves the development models "
        "(tiny-chat, tiny-vision), and building them needs the training stack, which this "
        "installation lacks (no module 'transformers'): install it with pip install "
        "'akka-training[train]', or name your base models in trainer.catalog."
    )
    assert not (tmp_path / "dev-models").exists()
