"""`when_imported`: a call on a module once something imports it."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from akka_training.cli.lazy import _AfterImport, when_imported


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("akka_lazy_probe")]:
            del sys.modules[name]
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterImport)]


def test_the_call_comes_once_the_module_is_imported_and_only_then(module_dir: Path) -> None:
    (module_dir / "akka_lazy_probe.py").write_text("SETTING = 'as written'\n")
    seen: list[ModuleType] = []

    def first(module: ModuleType) -> None:
        seen.append(module)
        module.__dict__["SETTING"] = "changed"

    when_imported("akka_lazy_probe", first)
    when_imported("akka_lazy_probe", seen.append)
    assert seen == [] and "akka_lazy_probe" not in sys.modules
    module = importlib.import_module("akka_lazy_probe")
    assert seen == [module, module]
    assert module.SETTING == "changed"
    # The module is as its own loader made it: its source can be read, and the finder is gone.
    assert inspect.getsource(module) == "SETTING = 'as written'\n"
    assert not any(isinstance(f, _AfterImport) for f in sys.meta_path)


def test_a_module_already_imported_gets_the_call_at_once(module_dir: Path) -> None:
    (module_dir / "akka_lazy_probe_b.py").write_text("")
    module = importlib.import_module("akka_lazy_probe_b")
    seen: list[ModuleType] = []
    when_imported("akka_lazy_probe_b", seen.append)
    assert seen == [module]
