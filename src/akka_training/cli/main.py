"""`akka`: the root command, its global flags and the one error boundary."""

from __future__ import annotations

import os
import sys

import typer

from akka_training.cli import auth, config, trainer
from akka_training.cli.state import state
from akka_training.cli.training import app as training_app
from akka_training.core.errors import AkkaError

app = typer.Typer(
    name="akka",
    help="akka training: fine-tune LoRA adapters with SFT, GRPO and GSPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(auth.app, name="auth")
app.add_typer(config.app, name="config")
app.add_typer(trainer.app, name="trainer")
app.add_typer(training_app, name="training")

GLOBAL_HELP = """
Global flags (anywhere on the line): --context NAME (or AKKA_CONTEXT), -o text|json|yaml,
--trainer-url URL (or TRAINER_URL), --no-color (or NO_COLOR), --force, -q.
"""

_VALUED = {
    "--context": "context",
    "-o": "output",
    "--output": "output",
    "--trainer-url": "trainer_url",
}
_FLAGS = {"--no-color": "no_color", "--force": "force", "-q": "quiet", "--quiet": "quiet"}


class UsageProblem(Exception):
    """A command line the CLI cannot read: printed as ``Error: ...``, exit status 2."""


def extract_globals(argv: list[str]) -> list[str]:
    """Take the global flags out of `argv` (wherever they stand) into `state`."""
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name, eq, value = arg.partition("=")
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageProblem(f"{name} needs a value.")
                value = argv[i + 1]
                i += 1
            setattr(state, _VALUED[name], value)
        elif arg in _FLAGS:
            setattr(state, _FLAGS[arg], True)
        else:
            rest.append(arg)
        i += 1
    if state.output not in ("text", "json", "yaml"):
        raise UsageProblem(f"-o takes text, json or yaml, not {state.output!r}.")
    if os.environ.get("NO_COLOR"):
        state.no_color = True
    return rest


def run() -> None:
    try:
        args = extract_globals(sys.argv[1:])
        command = typer.main.get_command(app)
        if not args or args in (["--help"], ["-h"]):
            args = ["--help"]
            print(GLOBAL_HELP.strip())
        # Without standalone mode click returns a command's exit code instead of exiting.
        code = command.main(args=args, prog_name="akka", standalone_mode=False)
        if isinstance(code, int) and code != 0:
            sys.exit(code)
    except AkkaError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(1)
    except UsageProblem as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        sys.exit(1)
    except typer.TyperException as exc:
        # typer's own usage errors (a missing argument, an unknown command): its message and
        # exit status, without a traceback.
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print(f"Error: {exc}", file=sys.stderr)
        sys.exit(int(getattr(exc, "exit_code", 2)))
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        if state._client is not None:
            state._client.close()


if __name__ == "__main__":
    run()
