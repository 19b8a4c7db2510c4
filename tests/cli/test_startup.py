"""The CLI starts without the training stack."""

import subprocess
import sys

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
