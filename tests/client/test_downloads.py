"""The client's downloads through the real app in this process: every file checked against the
manifest's sha256, a mismatch refused with nothing left behind, a non-empty directory refused
unless overwrite, and the service streaming a file a chunk at a time."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from akka_training.client import TrainerClient
from akka_training.core.errors import AkkaError, InvalidRequest
from akka_training.server.auth import Principal
from akka_training.server.services import adapters
from akka_training.testing.app import BASE_URL, InProcessTrainer
from tests.server.routers.helpers import chat_rows, register
from tests.server.routers.test_adapters import completed_run

MIB = 1 << 20
ADMIN = Principal("t", "admin", "admin", None)


@pytest.fixture
def trainer(in_process_factory: Callable[..., InProcessTrainer]) -> InProcessTrainer:
    trainer = in_process_factory({"trainer": {"projects": [{"name": "maths"}]}})
    register(trainer.client(), "maths/train", chat_rows(12))
    return trainer


def client_of(trainer: InProcessTrainer) -> TrainerClient:
    client = TrainerClient(BASE_URL, trainer.admin_token)
    client._http = trainer.client()  # the real client, over the app in this process
    return client


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_download_writes_every_file_checked_and_refuses_a_full_directory(
    trainer: InProcessTrainer, tmp_path: Path
) -> None:
    run_id = completed_run(trainer.client(), trainer, modelName="maths-sft")
    client = client_of(trainer)
    seen: list[int] = []

    written = client.download_adapter(run_id, tmp_path / "out", progress=seen.append)

    assert written.directory == str(tmp_path / "out")
    for entry in written.files:
        data = (tmp_path / "out" / entry.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry.sha256
    assert sum(seen) == written.total_bytes
    assert not list((tmp_path / "out").glob("*.part"))
    with pytest.raises(InvalidRequest) as refused:
        client.download_adapter(run_id, tmp_path / "out")
    assert refused.value.message == (
        f"{tmp_path / 'out'} is not empty; download into a new or empty directory, or pass "
        "overwrite=True to write over the files of the same names."
    )
    again = client.download_adapter(run_id, tmp_path / "out", overwrite=True)
    assert again.files == written.files


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_file_that_does_not_match_its_checksum_leaves_nothing_behind(
    trainer: InProcessTrainer, tmp_path: Path
) -> None:
    run_id = completed_run(trainer.client(), trainer)
    client = client_of(trainer)
    manifest = client.adapter_manifest(run_id)
    entry = manifest.files[1]
    entry.sha256 = "0" * 64

    with pytest.raises(AkkaError) as refused:
        client.download_manifest(manifest, tmp_path / "out")

    real = hashlib.sha256(trainer.ctx.blobs.get_bytes(f"runs/{run_id}/adapter/{entry.path}"))
    assert refused.value.message == (
        f"{entry.path} arrived with {entry.bytes} bytes and sha256 {real.hexdigest()}; the "
        f"trainer's manifest says {entry.bytes} bytes and sha256 {'0' * 64}. Nothing of this "
        "download was kept: download it again."
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_the_service_streams_a_file_a_chunk_at_a_time(trainer: InProcessTrainer) -> None:
    run_id = completed_run(trainer.client(), trainer)
    weights = bytes(range(256)) * (3 * MIB // 256) + b"tail"
    trainer.ctx.blobs.put_bytes(f"runs/{run_id}/adapter/adapter_model.safetensors", weights)

    chunks, size = adapters.open_file(
        trainer.ctx, ADMIN, run_id, None, "adapter", "adapter_model.safetensors"
    )

    assert size == len(weights)
    assert [len(c) for c in chunks] == [MIB, MIB, MIB, 4]
    manifest = adapters.manifest(trainer.ctx, ADMIN, run_id, None, "adapter")
    listed = next(f for f in manifest.files if f.path == "adapter_model.safetensors")
    assert listed.to_json() == {
        "path": "adapter_model.safetensors",
        "bytes": len(weights),
        "sha256": hashlib.sha256(weights).hexdigest(),
    }
