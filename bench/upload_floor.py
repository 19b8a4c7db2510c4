"""The floor under any dataset upload on this machine: what the least an upload must do (receive the
bytes over loopback, hash them with sha256, write them and sync them) takes against the synced copy
`bench/upload.py` compares with, with no HTTP, no row checks and no service at all.

A bare receiver in its own process reads a socket in 1 MiB blocks; the sender hands the file to
the kernel with `sendfile`, so it costs next to nothing. Each round times one copy, then each way
of receiving, and prints each way's median ratio (copy time / its time) with the spread:

- `hash+write`: one thread hashes and writes each block as it arrives;
- `pipelined`: one thread receives, another hashes and writes (stages overlapping);
- `write only` and `hash only`: one of the two stages left out, to show what each costs.

`hash+write` and `pipelined` are what an upload cannot do without (a dataset is stored under its
sha256 and must survive a crash): if they are under 0.8, so is any upload through any service on
this machine, and `bench/upload.py`'s goal is out of reach here.

    python bench/upload_floor.py [--mib 256] [--repeat 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import queue
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from upload import MIB, copy_seconds, generate

WAYS = ("hash+write", "pipelined", "write only", "hash only")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="size of the generated file")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (the median counts)")
    parser.add_argument(
        "--dir", type=Path, default=None, help="work directory (default: a temp dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="akka-bench-") as tmp:
        work = Path(tmp)
        data = work / "train.jsonl"
        generate(data, args.mib * MIB)
        size = data.stat().st_size
        ratios = measure(data, work, args.repeat)
    print(f"file: {size / MIB:.0f} MiB; {os.cpu_count()} cores")
    for way in WAYS:
        values = ratios[way]
        print(
            f"{way:<11} copy time / its time, median of {args.repeat}: "
            f"{statistics.median(values):.2f} (spread {min(values):.2f}-{max(values):.2f})"
        )
    floor = max(statistics.median(ratios["hash+write"]), statistics.median(ratios["pipelined"]))
    verdict = "within reach" if floor >= 0.8 else "out of reach on this machine"
    print(f"the floor of an upload: {floor:.2f}; bench/upload.py's goal (>= 0.8): {verdict}")


def measure(data: Path, work: Path, repeat: int) -> dict[str, list[float]]:
    ratios: dict[str, list[float]] = {way: [] for way in WAYS}
    ports: multiprocessing.Queue[int] = multiprocessing.Queue()
    receiver = multiprocessing.Process(
        target=_receive, args=(ports, str(work / "received")), daemon=True
    )
    receiver.start()
    try:
        port = ports.get(timeout=30)
        _send(port, data, WAYS[0])  # warm the page cache and the receiver
        for _ in range(repeat):
            # Over the same file each round, as the receiver writes over one: a new file each
            # round, after a deleted one, made this disk's sync take 0.15-0.55 s.
            copy = copy_seconds(data, work / "copy", remove=False)
            for way in WAYS:
                ratios[way].append(copy / _send(port, data, way))
    finally:
        receiver.kill()
        receiver.join()
    return ratios


def _send(port: int, data: Path, way: str) -> float:
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as conn, open(data, "rb") as f:
        conn.sendall(way.encode().ljust(16))
        conn.sendfile(f)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(128)  # the receiver's digest, once the bytes are synced
    return time.perf_counter() - started


def _receive(ports: Any, out: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        ports.put(server.getsockname()[1])
        while True:
            conn, _ = server.accept()
            with conn:
                way = conn.recv(16, socket.MSG_WAITALL).decode().strip()
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    digest = _take(conn, fd, way)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                conn.sendall(digest.encode())


def _take(conn: socket.socket, fd: int, way: str) -> str:
    sha = hashlib.sha256()
    if way == "pipelined":
        blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)

        def store() -> None:
            while (block := blocks.get()) is not None:
                sha.update(block)
                os.write(fd, block)

        thread = threading.Thread(target=store)
        thread.start()
        while block := conn.recv(MIB):
            blocks.put(block)
        blocks.put(None)
        thread.join()
        return sha.hexdigest()
    buffer = bytearray(MIB)
    view = memoryview(buffer)
    while size := conn.recv_into(buffer):
        if way != "write only":
            sha.update(view[:size])
        if way != "hash only":
            os.write(fd, view[:size])
    return sha.hexdigest()


if __name__ == "__main__":
    main()
