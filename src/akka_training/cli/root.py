"""`akka`: the root command (typer), its global flags and the one error boundary.

`cli/main.py`, the entry point, prints the root help page itself (`cli/roothelp.py`) and imports
this module for every other command line."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import typer

from akka_training.cli import exits, roothelp
from akka_training.cli.lazy import Lazy, lazy_group, when_imported
from akka_training.cli.state import state
from akka_training.core.errors import AkkaError

# The groups, imported when a command line names one (`akka --help` lists them from roothelp).
GROUPS = {name: Lazy(module, help) for name, (module, help) in roothelp.GROUPS.items()}

app = typer.Typer(
    name="akka",
    help=roothelp.ROOT_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=lazy_group(GROUPS),
)

_VALUED = {
    "--context": "context",
    "-o": "output",
    "--output": "output",
    "--trainer-url": "trainer_url",
}
_FLAGS = {
    "--no-color": "no_color",
    "--force": "force",
    "-q": "quiet",
    "--quiet": "quiet",
    "--debug": "debug",
}


class UsageProblem(Exception):
    """A command line the CLI cannot read: printed as ``Error: ...``, exit status 2."""


SHELLS = ("bash", "zsh", "fish")


@app.command("completion")
def completion(
    shell: str = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish."),
) -> None:
    """Print the shell completion script for bash, zsh or fish.

    bash: `source <(akka completion bash)` in ~/.bashrc; zsh: `source <(akka completion zsh)`
    after compinit; fish: `akka completion fish | source`."""
    if shell not in SHELLS:
        raise UsageProblem(f"completion takes bash, zsh or fish, not {shell!r}.")
    # Imported from where typer defines it: `typer.completion` uses it without exporting it.
    from typer._completion_shared import get_completion_script

    print(get_completion_script(prog_name="akka", complete_var=COMPLETE_VAR, shell=shell))


COMPLETE_VAR = roothelp.COMPLETE_VAR


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
        bad, state.output = state.output, "text"
        raise UsageProblem(f"-o takes text, json or yaml, not {bad!r}.")
    if os.environ.get("NO_COLOR"):
        state.no_color = True
    if state.no_color:
        # rich (tables, progress) reads the variable when it starts a console; help pages
        # take no styling at all (bold and dim included).
        os.environ["NO_COLOR"] = "1"
        # typer renders help pages with `typer.rich_utils`, imported only to render one (it
        # imports rich's console, markdown and tracebacks: about 0.05 s a command would pay).
        when_imported("typer.rich_utils", _no_help_colors)
    if os.environ.get("AKKA_DEBUG"):
        state.debug = True
    return rest


def _no_help_colors(rich_utils: Any) -> None:
    # typer.rich_utils: its help pages (and rich's errors) take no styling, bold included.
    rich_utils.COLOR_SYSTEM = None


def _plain_usage_names() -> None:
    """Usage lines name a required argument as RUN, as the help and the docs write it; typer
    would write {RUN}."""
    from typer.core import TyperArgument

    braced = TyperArgument._usage_display_name
    if getattr(braced, "plain", False):
        return

    def plain(self: TyperArgument) -> str:
        name = braced(self)
        if self.required and name.startswith("{"):
            name = name[1:].replace("}", "", 1)
        return name

    plain.plain = True  # type: ignore[attr-defined]
    TyperArgument._usage_display_name = plain  # type: ignore[method-assign]


_plain_usage_names()


def main(argv: list[str]) -> int:
    """Run one command line; the exit status (see `exits`). Nothing escapes as a traceback
    unless --debug (or AKKA_DEBUG) asks for it."""
    state.reset()
    try:
        args = extract_globals(argv)
        command = typer.main.get_group(app)
        if os.environ.get(COMPLETE_VAR):
            # A shell asks for completions (the script of `akka completion SHELL` does).
            from typer._completion_classes import completion_init

            completion_init()
        elif not args or args in (["--help"], ["-h"]):
            args = ["--help"]
            print(roothelp.GLOBAL_HELP.strip())
        # Without standalone mode click returns a command's exit code instead of exiting.
        code = command.main(
            args=args, prog_name="akka", complete_var=COMPLETE_VAR, standalone_mode=False
        )
        return code if isinstance(code, int) else exits.OK
    except AkkaError as exc:
        return _refusal(exc)
    except UsageProblem as exc:
        return _usage(str(exc), None)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        return exits.FAILED
    except typer.TyperException as exc:
        # typer's own usage errors (a missing argument, an unknown command or option, a bad
        # value): the usage line and one sentence, exit status 2.
        return _usage(_sentence(exc), exc)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of a pipe went away (`akka ... | head`): nothing more to say.
        _silence_stdout()
        return exits.OK
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else exits.FAILED
    except Exception as exc:
        if state.debug:
            import traceback

            traceback.print_exc()
        message = f"akka failed unexpectedly: {type(exc).__name__}: {str(exc).rstrip('.')}."
        hint = "" if state.debug else " Run the command again with --debug for the traceback."
        _error_out("internal", message, [], hint)
        return exits.FAILED
    finally:
        state.close()


def _refusal(exc: AkkaError) -> int:
    if state.debug:
        import traceback

        traceback.print_exc()
    message = exc.message
    problems = [p.to_json() for p in exc.problems]
    _error_out(exc.code, message, problems, "")
    return exits.status_of(exc)


def _usage(sentence: str, exc: BaseException | None) -> int:
    """A command line the CLI cannot read: the usage line, one sentence, exit status 2."""
    show = getattr(exc, "show", None)
    if callable(show):
        show()  # click's usage line, hint and ``Error: ...`` on stderr
    else:
        print(f"Error: {sentence}", file=sys.stderr)
    code = int(getattr(exc, "exit_code", exits.USAGE))
    if state.output != "text":
        _structured("usage" if code == exits.USAGE else "invalid", sentence, [])
    return code


def _sentence(exc: BaseException) -> str:
    formatted = getattr(exc, "format_message", None)
    return str(formatted()) if callable(formatted) else str(exc)


def _error_out(code: str, message: str, problems: list[dict[str, str]], hint: str) -> None:
    """An error as the chosen output reads it: ``error: ...`` on stderr for people, one error
    object (code, message, problems) on stdout for programs (-o json|yaml)."""
    if state.output == "text":
        print(f"error: {message}{hint}", file=sys.stderr)
    else:
        _structured(code, message + hint, problems)


def _structured(code: str, message: str, problems: list[dict[str, str]]) -> None:
    body = {"error": {"code": code, "message": message, "problems": problems}}
    if state.output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(body, sort_keys=False))
    else:
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    sys.stdout.flush()


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
