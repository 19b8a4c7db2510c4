"""The trainer API's bodies, defined once and shared by the service's routers and the client.

One module per noun, named as the noun is named in every other layer (`server/routers/runs.py`,
`server/services/runs.py`, `client/runs.py`, `cli/training/runs.py` beside `api/runs.py`):

- `base`: what every body shares (camelCase JSON keys, snake_case Python names, timestamps).
- `errors`: the one error shape, ``{"error": {"code", "message", "problems"}}``.
- `system`: health, info, logins and tokens.
- `projects`, `catalog` (base models, envelopes), `capacity`, `datasets`, `bundles`.
- `runs`: run records, their snapshots, metrics, lineage, logs and the lines of `runs wait`.
- `rollouts`: one step's rollouts.
- `pipelines`: pipelines, their dry runs and the lines of `pipelines wait`.
- `grafana`: dashboard links and the key set Grafana verifies them with.
- `jobs`: what a training job reports (the models of `core.reports`) and the answer it gets.

Every model refuses keys it does not declare, so the service cannot send an undeclared key;
the client reads answers leniently (`client.base.read_as`), keeping a key a newer service added and
dumping it back out (`base.ResponseBody` says why). Requests refuse unknown fields by name. The package
imports pydantic and `akka_training.core` only, so the client can use it without the service.

A noun's module is also imported when first reached as an attribute of the package
(``api.runs.RunRecord``), which is how the client names its answers: a program imports the
models of the nouns it calls only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        # `api.runs` imports the module on first use: the client names its answers
        # `api.runs.RunRecord` and so on, and a program (a command of the CLI) imports only the
        # nouns it calls. Each noun's models take milliseconds to define; all of them took
        # some 0.04 s of every command.
        if not name.startswith("_"):
            try:
                return importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{name}":
                    raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
