"""Building the development models: determinism, atomicity, idempotence, the catalog entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from akka_training.core.catalog import CatalogModel
from akka_training.devmodels.catalog import BUILDER_VERSION, all_built

SRC = Path(__file__).resolve().parents[2] / "src"
# Building loads the training stack and writes real weights (seconds per test): slow, as the
# models the other tests use are built once and kept.
pytestmark = pytest.mark.slow


def test_building_twice_gives_identical_files(tmp_path: Path) -> None:
    from akka_training.devmodels.build import build_dev_models, directory_revision

    # In this process's CPU seconds: the machine's load does not count.
    started = time.process_time()
    first = build_dev_models(tmp_path / "a")
    took = time.process_time() - started
    second = build_dev_models(tmp_path / "b")

    assert [e["id"] for e in first] == ["tiny-chat", "tiny-vision"]
    assert [e["revision"] for e in first] == [e["revision"] for e in second]
    for entry in first:
        a, b = Path(entry["path"]), tmp_path / "b" / entry["id"]
        files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
        for rel in files:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        assert directory_revision(a) == entry["revision"]
    # Nothing but the models is left behind (no temporary build directories).
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["tiny-chat", "tiny-vision"]
    assert took < 20


def test_a_built_model_is_kept_and_an_outdated_one_rebuilt(tmp_path: Path) -> None:
    from akka_training.devmodels.build import build_dev_models, directory_revision

    assert not all_built(tmp_path)
    build_dev_models(tmp_path)
    assert all_built(tmp_path)
    weights = tmp_path / "tiny-chat" / "model.safetensors"
    before = weights.stat().st_mtime_ns

    build_dev_models(tmp_path)
    assert weights.stat().st_mtime_ns == before

    marker = tmp_path / "tiny-chat" / "akka-devmodel.json"
    outdated = json.loads(marker.read_text()) | {"builder": BUILDER_VERSION - 1}
    marker.write_text(json.dumps(outdated))
    assert not all_built(tmp_path)
    (tmp_path / "tiny-chat" / "leftover.txt").write_text("from the old build")
    entries = build_dev_models(tmp_path)

    assert json.loads(marker.read_text())["builder"] == BUILDER_VERSION
    assert not (tmp_path / "tiny-chat" / "leftover.txt").exists()
    assert entries[0]["revision"] == directory_revision(tmp_path / "tiny-chat")


# The builder's command imports the training stack in a process of its own.
def test_the_command_prints_catalog_entries(catalog: dict[str, dict[str, Any]]) -> None:
    dest = Path(catalog["tiny-chat"]["path"]).parent
    out = subprocess.run(
        [sys.executable, "-m", "akka_training.devmodels", "build", str(dest)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )
    entries = [CatalogModel.model_validate(e) for e in json.loads(out.stdout)]

    chat, vision = entries
    assert (chat.id, chat.modality, vision.id, vision.modality) == (
        "tiny-chat",
        "text",
        "tiny-vision",
        "image-text",
    )
    assert chat.revision == catalog["tiny-chat"]["revision"]
    assert chat.methods("trl", image_text_rl=False) == ["sft", "dpo", "grpo", "gspo"]
    assert chat.qualified_gpus("grpo", "verl", image_text_rl=False) == [1, 2, 4, 8]
    sft = chat.envelope("sft", "trl", 1, image_text_rl=False)
    gspo = chat.envelope("gspo", "verl", 8, image_text_rl=False)
    assert sft is not None and sft.precision == "FP32"
    assert gspo is not None and gspo.precision == "BF16"
    # Under verl, RL over the image-text model needs the deployment's consent.
    assert vision.methods("verl", image_text_rl=False) == ["sft"]
    assert vision.methods("trl", image_text_rl=False) == ["sft", "grpo", "gspo"]
