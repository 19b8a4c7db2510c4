"""What `runs wait` (and `runs start --wait`) prints while a run trains.

A step reads ``step 12 of 30  loss 1.234  ETA 40s`` (``reward 0.41 (correct 0.25, format
0.16)`` for a reinforcement run). On a terminal the step is one line that rich updates in
place, with each event printed above it; piped, every event and every step is a line of its
own, in the order the trainer sent them."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from akka_training.cli.output import cell, duration

if TYPE_CHECKING:
    from akka_training.api.runs import RunEventLine, RunProgressLine


def step_text(line: RunProgressLine) -> str:
    """One step as a person reads it."""
    text = f"step {line.step}" + (f" of {line.total_steps}" if line.total_steps else "")
    if line.loss is not None:
        text += f"  loss {cell(line.loss)}"
    if line.reward is not None:
        text += f"  reward {line.reward:.3g}"
        if line.terms:
            text += " (" + ", ".join(f"{k} {v:.3g}" for k, v in line.terms.items()) + ")"
    if line.eta_seconds is not None and line.total_steps and line.step < line.total_steps:
        text += f"  ETA {duration(line.eta_seconds)}"
    return text


def event_text(line: RunEventLine) -> str:
    return f"{line.at.isoformat()[11:19]}  {line.message}"


class Watcher:
    """Prints a run's events and steps; `close` ends the updating line."""

    def __init__(self, quiet: bool, no_color: bool) -> None:
        self.quiet = quiet
        self.live: Any = None
        # The step on the updating line that no printed line shows yet.
        self.shown: RunProgressLine | None = None
        if not quiet and sys.stdout.isatty():
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            console = Console(no_color=no_color, highlight=False, markup=False, emoji=False)
            self.live = Live(Text(""), console=console, auto_refresh=False, transient=True)
            self.live.start()

    def event(self, line: RunEventLine) -> None:
        if self.quiet:
            return
        if self.live is not None:
            if self.shown is not None:
                # Where the step stood when this happened, above the event.
                self.live.console.print(f"          {step_text(self.shown)}")
                self.shown = None
            self.live.console.print(event_text(line))
            self.live.refresh()
        else:
            print(event_text(line), flush=True)

    def step(self, line: RunProgressLine) -> None:
        if self.quiet or not line.step:
            return
        if self.live is not None:
            from rich.text import Text

            self.live.update(Text(step_text(line)), refresh=True)
            self.shown = line
        else:
            print(f"          {step_text(line)}", flush=True)

    def close(self) -> None:
        if self.live is None:
            return
        self.live.stop()
        if self.shown is not None:
            # The updating line was transient: leave the last step on the screen.
            print(f"          {step_text(self.shown)}")
