"""Tools a reinforcement run's policy may call, from the run's scoring bundles.

TRL's GRPOTrainer runs a completion's tool calls and feeds the results back. It has no time
limit for a tool, and a tool's exception silently becomes an ``{"error": ...}`` message to the
model; each tool is therefore wrapped: it runs in a worker thread with the plan's
``timeoutSeconds``, a timeout or an exception raises (TRL passes the error to the model and
counts the failure), and `ToolCounters` keeps calls, failures and timeouts per tool.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from akka_training.core.plans import Tool
from akka_training.engines.bundles import BundleResolver
from akka_training.engines.failures import RewardError, out_of_memory
from akka_training.rewards.bundles import load_function


class ToolTimeout(Exception):
    """A tool did not answer within its ``timeoutSeconds``."""


class ToolCounters:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.timeouts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count(self, name: str, *, failed: bool = False, timed_out: bool = False) -> None:
        with self._lock:
            self.calls[name] += 1
            self.failures[name] += int(failed)
            self.timeouts[name] += int(timed_out)


def load_tools(
    tools: list[Tool], resolver: BundleResolver | None, counters: ToolCounters
) -> list[Callable[..., Any]]:
    """The plan's tools as functions TRL can call (named as the plan names them)."""
    if not tools:
        return []
    if resolver is None:
        raise RewardError("tools need their scoring bundles, and none can be resolved here")
    workers = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tool")
    out = []
    for tool in tools:
        try:
            function = load_function(resolver(tool.bundle), tool.function)
        except Exception as exc:  # importing user code can raise anything
            if out_of_memory(exc):
                raise  # reported as the memory that ran out
            raise RewardError(
                f"tool {tool.name!r}: the function {tool.function!r} of bundle {tool.bundle!r} "
                f"could not be loaded: {exc}"
            ) from exc
        out.append(_limited(tool, function, workers, counters))
    return out


def _limited(
    tool: Tool,
    function: Callable[..., Any],
    workers: ThreadPoolExecutor,
    counters: ToolCounters,
) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        future = workers.submit(function, *args, **kwargs)
        try:
            result = future.result(timeout=tool.timeout_seconds)
        except FutureTimeout:
            counters.count(tool.name, failed=True, timed_out=True)
            raise ToolTimeout(
                f"tool {tool.name} did not answer within {tool.timeout_seconds:g} s"
            ) from None
        except Exception:
            counters.count(tool.name, failed=True)
            raise
        counters.count(tool.name)
        return result

    # TRL keys tools by __name__: the plan's name, whatever the function is called.
    call.__name__ = tool.name
    call.__qualname__ = tool.name
    return call
