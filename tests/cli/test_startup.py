"""The CLI starts without the training stack."""

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "trl", "verl", "peft", "fastapi", "sqlalchemy")


def test_help_imports_no_training_stack() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['akka', '--help']\n"
        "from akka_training.cli.main import run\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "training" in out.stdout


def test_every_cli_module_imports_no_training_stack() -> None:
    code = (
        "import sys, pkgutil, importlib, akka_training.cli as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'akka_training.cli.'):\n"
        "    if m.name != 'akka_training.cli.__main__':\n"
        "        importlib.import_module(m.name)\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# What the CLI loads only when a command needs it: the client's HTTP and models, tables, YAML,
# and each group's module.
LATER = (
    "httpx",
    "pydantic",
    "rich",
    "yaml",
    "akka_training.client.contexts",
    "akka_training.cli.auth",
    "akka_training.cli.training",
    "akka_training.cli.training.runs",
)


def _loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    code += (
        f"\nimport json, sys\nprint(json.dumps(sorted(m for m in {names!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_entry_point_imports_no_client_rich_yaml_or_command_modules() -> None:
    assert _loaded_after("from akka_training.cli.main import run", LATER) == []


def test_help_loads_no_client_yaml_or_command_modules() -> None:
    code = (
        "import sys, io, contextlib\n"
        "sys.argv = ['akka', '--help']\n"
        "from akka_training.cli.main import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    run()\n"
    )
    assert _loaded_after(code, tuple(m for m in LATER if m != "rich")) == []


def test_a_command_loads_its_own_group_only() -> None:
    code = (
        "import sys, io, contextlib\n"
        "sys.argv = ['akka', 'training', 'runs', 'list', '--help']\n"
        "from akka_training.cli.main import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    run()\n"
    )
    names = ("akka_training.cli.training.runs", "akka_training.cli.training.datasets", "httpx")
    assert _loaded_after(code, names) == ["akka_training.cli.training.runs"]


def test_a_group_lists_each_lazy_subgroup_with_its_own_help() -> None:
    """The help `akka --help` and `akka training --help` list without importing a group is the
    help of the group once imported."""
    from akka_training.cli.root import GROUPS
    from akka_training.cli.training import NOUNS

    for name, entry in [*GROUPS.items(), *NOUNS.items()]:
        loaded = entry.load(name)
        assert (loaded.name, loaded.help, loaded.hidden) == (name, entry.help, entry.hidden)
        assert entry.listing(name).get_short_help_str() == loaded.get_short_help_str()


def test_no_color_is_set_on_the_help_renderer_without_importing_it() -> None:
    code = (
        "import sys\n"
        "from akka_training.cli.root import extract_globals\n"
        "extract_globals(['--no-color', 'training', 'runs', 'list'])\n"
        "print('typer.rich_utils' in sys.modules)\n"
        "import typer.rich_utils\n"
        "print(typer.rich_utils.COLOR_SYSTEM)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "None"]


def test_the_client_is_imported_without_httpx_command_line() -> None:
    """httpx's own command line (click, pygments, rich) stays out of a command that calls the
    trainer; httpx itself is whole, and its command line can still be imported."""
    code = (
        "import sys\n"
        "from akka_training.cli.state import import_httpx\n"
        "import_httpx()\n"
        "import akka_training.client.connection\n"
        "print(sorted(m for m in ('click', 'pygments', 'rich', 'httpx._main') if m in sys.modules))\n"
        "import httpx\n"
        "assert httpx.Client and httpx.create_ssl_context\n"
        "import httpx._main\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_command_validates_answers_without_pydantic_plugins_and_then_restores_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from akka_training.cli.state import State

    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("TRAINER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AKKA_CONFIG", "/nonexistent/akka-config.yaml")
    state = State()
    state.connection()
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    state.close()
    assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
    # A value the user set is left as it is.
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "logfire")
    state = State()
    state.connection()
    state.close()
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "logfire"
