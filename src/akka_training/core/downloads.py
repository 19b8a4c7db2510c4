"""Where a download of a run's adapter or merged model goes by default: a directory named after
the run (its modelName, else its id), the snapshot and, for a merged model, ``-merged``. The
service names it in the manifest and the client uses it before asking for a merge, so both
spell it here."""

from __future__ import annotations

import re


def download_directory(name: str, snapshot: str | None, merged: bool) -> str:
    """``maths-grpo``, ``maths-grpo-step-4``, ``maths-grpo-merged``: `name` with what is not
    safe in a file name replaced by ``-``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "adapter"
    if snapshot:
        safe += f"-{snapshot}"
    return safe + ("-merged" if merged else "")
