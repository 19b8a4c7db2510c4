"""Datasets through the real service and the real CLI: streamed registration, the upload limit,
broken uploads, row validation, versions, aliases, references and project access."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from akka_training.core.errors import Forbidden, NotFound, PayloadTooLarge
from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until

# Every test here talks to a trainer process this module starts.
pytestmark = pytest.mark.slow

LIMIT = 256 * 1024
LIMIT_MESSAGE = (
    "error: The upload is larger than this trainer's limit of 256 KiB (trainer.datasets.max-bytes); "
    "split the file or ask the operator to raise trainer.datasets.max-bytes."
)
CATALOG = [
    {
        "id": "tiny",
        "path": "/models/tiny",
        "envelopes": [{"method": "sft", "engine": "trl", "gpus": 1}],
    }
]


def settings(**datasets: Any) -> dict[str, Any]:
    return {
        "trainer": {
            "catalog": CATALOG,
            "pools": [{"name": "training", "accelerator": "cpu", "devices": 2}],
            "datasets": datasets,
        }
    }


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    trainer = TrainerProcess(
        tmp_path_factory.mktemp("datasets"), settings(**{"max-bytes": LIMIT})
    ).start()
    with trainer.client() as admin:
        admin.create_project("maths", quota=None)
        admin.create_project("physics", quota=None)
    yield trainer
    trainer.close()
    assert "Traceback" not in trainer.log()


def rows(n: int, answer: str = "4", **extra: Any) -> str:
    row = {
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": answer}],
        **extra,
    }
    return "".join(json.dumps({**row, "id": i}) + "\n" for i in range(n))


def write(tmp_path: Path, text: str, name: str = "train.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def blob_files(trainer: TrainerProcess) -> set[str]:
    """Every file in the blob directory, temporary and staged ones included."""
    root = trainer.home / "blobs"
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_register_shows_the_new_version(trainer: TrainerProcess, tmp_path: Path) -> None:
    path = write(tmp_path, rows(3))
    out = trainer.cli("training", "datasets", "register", "maths/train", "-f", str(path)).stdout
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert out.startswith(
        f"Registered maths/train:v1 (3 rows, {path.stat().st_size} B, chat, sha256:{digest[:12]})."
    )
    got = trainer.cli_json("training", "datasets", "get", "maths/train")
    assert {
        k: got[k] for k in ("ref", "rows", "bytes", "format", "sha256", "hasImages", "latest")
    } == {
        "ref": "maths/train:v1",
        "rows": 3,
        "bytes": path.stat().st_size,
        "format": "chat",
        "sha256": digest,
        "hasImages": False,
        "latest": True,
    }
    assert [v["version"] for v in got["versions"]] == [1]
    # The content is stored once, under its hash.
    assert (
        trainer.home / "blobs" / f"datasets/sha256/{digest}.jsonl"
    ).read_bytes() == path.read_bytes()
    text = trainer.cli("training", "datasets", "get", "maths/train:v1").stdout
    assert "Format    chat" in text and f"SHA256    {digest}" in text and "Images    no" in text
    assert "Versions:" in text


def test_the_same_content_registers_once(trainer: TrainerProcess, tmp_path: Path) -> None:
    path = write(tmp_path, rows(4))
    first = trainer.cli_json("training", "datasets", "register", "maths/once", "-f", str(path))
    assert first["created"] and first["ref"] == "maths/once:v1"
    again = trainer.cli("training", "datasets", "register", "maths/once", "-f", str(path)).stdout
    assert "already registered as maths/once:v1" in again
    versions = trainer.cli_json("training", "datasets", "versions", "maths/once")
    assert [v["ref"] for v in versions] == ["maths/once:v1"]


def test_stdin_upload(trainer: TrainerProcess) -> None:
    result = trainer.cli_json(
        "training", "datasets", "register", "maths/piped", "-f", "-", input=rows(5)
    )
    assert result["rows"] == 5 and result["ref"] == "maths/piped:v1"
    assert result["sha256"] == hashlib.sha256(rows(5).encode()).hexdigest()


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_an_upload_over_the_limit_is_refused_and_leaves_nothing(
    trainer: TrainerProcess, tmp_path: Path, how: str
) -> None:
    text = rows(100_000)  # 9 MiB: more than the socket buffers hold, so the CLI is still sending
    assert len(text) > 32 * LIMIT
    before = blob_files(trainer)
    if how == "file":
        # The file's size travels as Content-Length: refused before any byte is read.
        args = ["-f", str(write(tmp_path, text))]
        result = trainer.cli("training", "datasets", "register", "maths/big", *args, check=False)
    else:
        # A pipe has no size: refused once the count passes the limit, while the CLI still sends.
        result = trainer.cli(
            "training", "datasets", "register", "maths/big", "-f", "-", input=text, check=False
        )
    assert result.returncode == 1
    assert result.stderr.strip() == LIMIT_MESSAGE
    assert blob_files(trainer) == before
    with trainer.client() as admin, pytest.raises(NotFound):
        admin.dataset_versions("maths/big")


def test_the_refusal_reaches_a_client_that_is_still_sending(trainer: TrainerProcess) -> None:
    chunk = rows(10_000).encode()
    sent = 0

    def body() -> Any:
        nonlocal sent
        for _ in range(64):
            yield chunk
            sent += len(chunk)

    with trainer.client() as admin, pytest.raises(PayloadTooLarge) as refused:
        admin.register_dataset("maths/endless", body())
    assert "limit of 256 KiB (trainer.datasets.max-bytes)" in refused.value.message
    # The service answered and closed long before the body ended; the client read the answer.
    assert sent < 64 * len(chunk) // 2


def test_a_client_that_goes_away_midway_leaves_nothing(trainer: TrainerProcess) -> None:
    body = rows(1500).encode()
    assert len(body) < LIMIT
    before = blob_files(trainer)
    temp = trainer.home / "blobs" / ".tmp"
    head = (
        "POST /v1/datasets/maths/cut HTTP/1.1\r\nHost: trainer\r\n"
        f"Authorization: Bearer {trainer.admin_token}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", trainer.port)) as sock:
        sock.sendall(head.encode() + body[: len(body) // 2])
        # The service has begun to store the upload...
        until(lambda: any(temp.iterdir()), what="the upload to begin", timeout=10, interval=0.02)
    # ...and drops it when the connection goes.
    until(lambda: not any(temp.iterdir()), what="the upload to go", timeout=10, interval=0.02)
    until(
        lambda: "an upload to maths/cut stopped before its end" in trainer.log(),
        what="the log to say the upload stopped",
        timeout=10,
        interval=0.02,
    )
    assert blob_files(trainer) == before
    with trainer.client() as admin:
        with pytest.raises(NotFound):
            admin.dataset_versions("maths/cut")
        # The service is fine afterwards.
        assert admin.register_dataset("maths/cut", iter([body])).ref == "maths/cut:v1"


def test_a_malformed_line_is_refused_with_its_number(
    trainer: TrainerProcess, tmp_path: Path
) -> None:
    path = write(tmp_path, rows(2) + '{"messages": [}\n' + rows(1))
    before = blob_files(trainer)
    result = trainer.cli(
        "training", "datasets", "register", "maths/bad", "-f", str(path), check=False
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: The file was refused (1 problem):",
        "  - line 3: is not valid JSON: Expecting value (column 15)",
    ]
    assert blob_files(trainer) == before
    with trainer.client() as admin, pytest.raises(NotFound):
        admin.dataset_versions("maths/bad")


def test_more_than_twenty_problems_lists_twenty_and_counts_the_rest(
    trainer: TrainerProcess, tmp_path: Path
) -> None:
    bad = json.dumps(
        {"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "a"}]}
    )
    path = write(tmp_path, rows(1) + (bad + "\n") * 26)
    result = trainer.cli(
        "training", "datasets", "register", "maths/bots", "-f", str(path), check=False
    )
    lines = result.stderr.splitlines()
    assert lines[0] == "error: The file was refused (26 problems):"
    assert lines[1] == "  - line 2: messages[0].role is 'bot'; use system, user, assistant or tool"
    assert len([line for line in lines if line.startswith("  - line ")]) == 20
    assert lines[-1] == "  … and 6 more"
    body = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-c",
                _RAW_POST,
                trainer.url,
                trainer.admin_token,
                "/v1/datasets/maths/bots",
            ],
            input=path.read_bytes(),
            capture_output=True,
            check=True,
        ).stdout
    )
    assert body["status"] == 422 and body["error"]["code"] == "invalid"
    assert len(body["error"]["problems"]) == 20


# Posts stdin as a raw body and prints the status and JSON answer (the client would raise).
_RAW_POST = """
import json, sys, httpx
url, token, path = sys.argv[1:]
r = httpx.post(url + path, content=sys.stdin.buffer.read(), headers={"Authorization": "Bearer " + token})
print(json.dumps({"status": r.status_code, **r.json()}))
"""


def test_an_image_row_sets_the_image_flag(trainer: TrainerProcess, tmp_path: Path) -> None:
    image = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "url": "file:///data/cat.png"},
                    {"type": "text", "text": "What is it?"},
                ],
            },
            {"role": "assistant", "content": "A cat."},
        ]
    }
    path = write(tmp_path, rows(2) + json.dumps(image) + "\n")
    result = trainer.cli_json("training", "datasets", "register", "maths/pictures", "-f", str(path))
    assert result["hasImages"] is True and result["rows"] == 3
    assert "Images    yes" in trainer.cli("training", "datasets", "get", "maths/pictures").stdout


def test_versions_aliases_and_references(trainer: TrainerProcess, tmp_path: Path) -> None:
    v1 = write(tmp_path, rows(2, "four"), "v1.jsonl")
    v2 = write(tmp_path, rows(3, "4"), "v2.jsonl")
    out = trainer.cli(
        "training", "datasets", "register", "maths/ref", "-f", str(v1), "--alias", "prod"
    ).stdout
    assert "Alias prod now points at maths/ref:v1." in out
    second = trainer.cli_json("training", "datasets", "register", "maths/ref", "-f", str(v2))
    assert second["ref"] == "maths/ref:v2"

    def ref_of(ref: str) -> str:
        return str(trainer.cli_json("training", "datasets", "get", ref)["ref"])

    assert ref_of("maths/ref") == "maths/ref:v2"  # the newest
    assert ref_of("maths/ref:v1") == "maths/ref:v1"
    assert ref_of("maths/ref:prod") == "maths/ref:v1"
    digest = hashlib.sha256(v2.read_bytes()).hexdigest()
    assert ref_of(f"maths/ref@sha256:{digest[:6]}") == "maths/ref:v2"
    assert ref_of(f"maths/ref@sha256:{digest}") == "maths/ref:v2"

    moved = trainer.cli("training", "datasets", "alias", "maths/ref:v2", "prod").stdout
    assert moved.strip() == "Alias prod moved from v1 to maths/ref:v2."
    assert ref_of("maths/ref:prod") == "maths/ref:v2"
    # Registering existing content with --alias moves the alias to the existing version.
    again = trainer.cli_json(
        "training", "datasets", "register", "maths/ref", "-f", str(v1), "--alias", "prod"
    )
    assert again["created"] is False and again["ref"] == "maths/ref:v1" and again["previous"] == 2
    assert ref_of("maths/ref:prod") == "maths/ref:v1"

    listed = {
        d["dataset"]: d
        for d in trainer.cli_json("training", "datasets", "list", "--project", "maths")
    }
    assert listed["maths/ref"]["latest"] == 2 and listed["maths/ref"]["versions"] == 2
    assert listed["maths/ref"]["aliases"] == {"prod": 1}
    table = trainer.cli("training", "datasets", "versions", "maths/ref").stdout.splitlines()
    assert table[0].split()[:4] == ["VERSION", "ROWS", "BYTES", "FORMAT"]
    assert [line.split()[0] for line in table[1:]] == ["v1", "v2"]
    assert "prod" in table[1] and "prod" not in table[2]


def test_unknown_references_say_what_exists(trainer: TrainerProcess, tmp_path: Path) -> None:
    trainer.cli(
        "training", "datasets", "register", "maths/known", "-f", str(write(tmp_path, rows(1)))
    )

    def error(ref: str) -> str:
        result = trainer.cli("training", "datasets", "get", ref, check=False)
        assert result.returncode == 4 and "Traceback" not in result.stderr  # not found
        return result.stderr.strip()

    assert error("maths/known:v7") == "error: maths/known has no v7; its versions: v1."
    assert error("maths/known:best") == (
        "error: maths/known has no alias 'best'; it has none; set one with "
        "`akka training datasets alias maths/known:vN best`."
    )
    assert error("maths/known@sha256:000000").startswith(
        "error: No version of maths/known has a hash starting 000000; its versions: v1 sha256:"
    )
    assert error("maths/unknown").startswith(
        "error: There is no dataset maths/unknown; datasets in maths: "
    )
    assert error("nowhere/train") == (
        "error: There is no project 'nowhere'; create it with `akka training projects create nowhere`."
    )
    result = trainer.cli(
        "training", "datasets", "register", "nowhere/x", "-f", "-", input=rows(1), check=False
    )
    assert "create it with `akka training projects create nowhere`" in result.stderr


def test_another_projects_token_is_refused(trainer: TrainerProcess, tmp_path: Path) -> None:
    with trainer.client() as admin:
        secret = admin.create_token("physics-ci", ["physics"]).token
    env = {"AKKA_ACCESS_TOKEN": secret}
    path = write(tmp_path, rows(2))
    result = trainer.cli(
        "training", "datasets", "register", "maths/theirs", "-f", str(path), env=env, check=False
    )
    assert result.returncode == 5
    assert "no access to project 'maths'" in result.stderr
    own = trainer.cli_json(
        "training", "datasets", "register", "physics/mine", "-f", str(path), env=env
    )
    assert own["ref"] == "physics/mine:v1"
    with trainer.client(secret) as physics:
        with pytest.raises(Forbidden):
            physics.dataset("maths/train")
        assert {d.project for d in physics.datasets()} == {"physics"}


def test_a_progress_bar_on_a_terminal_only(trainer_factory: Any, tmp_path: Path) -> None:
    roomy = trainer_factory(settings())
    with roomy.client() as admin:
        admin.create_project("maths", quota=None)
    path = write(tmp_path, rows(60_000))
    assert path.stat().st_size > 4 * 1024 * 1024
    primary, secondary = pty.openpty()
    command = [
        sys.executable,
        "-m",
        "akka_training.cli",
        "training",
        "datasets",
        "register",
        "maths/big",
        "-f",
        str(path),
    ]
    with subprocess.Popen(command, env=roomy.env, stdout=subprocess.PIPE, stderr=secondary) as proc:
        os.close(secondary)
        terminal = _read_all(primary)
        stdout = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.returncode == 0, terminal
    assert stdout.startswith("Registered maths/big:v1")
    assert "uploading" in terminal and "MiB" in terminal
    # Not with -q, and never on a stderr that is not a terminal.
    quiet = roomy.cli("training", "datasets", "register", "maths/big", "-f", str(path), "-q")
    # -q answers with the reference only.
    assert quiet.stderr == "" and quiet.stdout == "maths/big:v1\n"


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # the other end closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")
