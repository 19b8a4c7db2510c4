"""A job's log keeps the trainer's INFO lines and drops the per-request INFO lines of the HTTP
and storage libraries (httpx logs every report the job posts)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_library_request_logs_stay_at_warning_in_a_job(server: str) -> None:
    script = textwrap.dedent(
        f"""
        import logging, httpx
        from akka_training.engines.logs import configure_logging
        configure_logging()
        logging.getLogger("akka_training.job").info("training started")
        for step in range(3):
            httpx.post("{server}/v1/jobs/r/attempts/1/steps", json={{"step": step}})
        logging.getLogger("httpx").warning("a library warning still shows")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 0, done.stderr
    log = done.stderr
    assert "INFO akka_training.job: training started" in log
    assert "HTTP Request" not in log
    assert "WARNING httpx: a library warning still shows" in log
