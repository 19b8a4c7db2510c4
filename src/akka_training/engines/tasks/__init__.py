"""Tasks on the cluster that are not training runs (`akka_training.core.tasks`): the entry
point every task's job runs (`job`), its reporter, and one module per kind of task (`merge`,
`regrade`, `preview`, `evaluate`, `verify`).

Register a kind in `TASKS` as ``"module:function"``; the function takes a `TaskContext` and
returns the task's result (a JSON mapping), or raises `TaskError` with the sentence the user
reads.
"""

from __future__ import annotations

TASKS: dict[str, str] = {
    "merge": "akka_training.engines.tasks.merge:merge",
    "regrade": "akka_training.engines.tasks.regrade:regrade",
    "preview": "akka_training.engines.tasks.preview:preview",
    "evaluate": "akka_training.engines.tasks.evaluate:evaluate",
    "verify": "akka_training.engines.tasks.verify:verify",
    "serve": "akka_training.engines.tasks.serve:serve",
}
