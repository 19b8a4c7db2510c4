"""Every `akka` command the README and the guide show is a real command with real options: each
is parsed by the CLI (with `--help` appended, so nothing runs) and must be accepted. A renamed
command or flag breaks this test, not the reader. (The README's quickstart also runs for real:
`test_readme.py`.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from akka_training.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
# Commands of other tools whose arguments may hold the word akka (a namespace, a release).
OTHER_TOOLS = {"kubectl", "helm", "docker"}
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def shown_commands() -> list[tuple[str, str]]:
    """(page, command line) for each `akka` invocation inside a fenced block."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        text = page.read_text()
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
            for line in block.splitlines():
                match = re.search(r"(?:^|[\s(])(?:\$ )?akka (.*)$", line)
                if match is None or line.lstrip().startswith(("#", "{", "-", "|")):
                    continue
                if "import " in line or "akka_training" in line:
                    continue
                if line.split()[0] in OTHER_TOOLS:
                    continue  # `kubectl -n akka …`: another tool's command naming the namespace
                # A value the shell fills in (`--token "$(cat FILE)"`) stands for one argument.
                command = re.sub(r"\$\([^)]*\)", "VALUE", match.group(1))
                if not re.match(r"(-|[a-z])", command):
                    continue  # prose or a diagram ("akka CLI ──HTTP──▶ …"), not a command
                for cut in (" # ", "  #", " | ", " < ", ")"):
                    command = command.split(cut)[0]
                found.append((page.relative_to(ROOT).as_posix(), command.strip()))
    return found


COMMANDS = shown_commands()


def test_the_pages_show_commands() -> None:
    assert len(COMMANDS) > 40


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_a_shown_command_is_one_the_cli_accepts(
    page: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = shlex.split(command.replace("[", " ").replace("]", " ").replace("&", " "))
    code = cli_main.main([*args, "--help"])
    out = capsys.readouterr()
    assert code == 0, f"{page}: `akka {command}` is refused:\n{out.err}"
