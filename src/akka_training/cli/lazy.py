"""Command groups whose subgroups are imported when a command line reaches them.

`akka --help` lists `auth`, `config`, `trainer` and `training` without importing their modules
(and what those import: rich, PyYAML, the client); `akka training runs list` imports the runs
module and no other noun's. A group names each lazy subgroup with the module that holds its
`typer.Typer` (`app`, or a function returning one) and the help its parent lists; a test keeps
that help equal to the loaded group's own.

`when_imported` runs a function on a module once something imports it: a setting of a module
the CLI may never need (typer's help renderer) is made without importing it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import typer
from typer import _click
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec


@dataclass(frozen=True)
class Lazy:
    """A subgroup kept in `module`: its attribute `attr` is a `typer.Typer`, or a function that
    returns one. `help` is what the parent's help page lists for it."""

    module: str
    help: str
    attr: str = "app"
    hidden: bool = False

    def load(self, name: str) -> TyperGroup:
        found = getattr(importlib.import_module(self.module), self.attr)
        sub: typer.Typer = found if isinstance(found, typer.Typer) else found()
        group = typer.main.get_group(sub)
        group.name = name
        group.hidden = self.hidden
        return group

    def listing(self, name: str) -> _click.Command:
        """What a help page or a completion lists for the subgroup: its name and help."""
        return TyperCommand(name, help=self.help, hidden=self.hidden)


class LazyCommands(MutableMapping[str, _click.Command]):
    """A group's commands: those built with it, then the lazy ones, loaded when looked up."""

    def __init__(self, built: Mapping[str, _click.Command], lazy: Mapping[str, Lazy]) -> None:
        self.built = dict(built)
        self.lazy = {name: entry for name, entry in lazy.items() if name not in self.built}
        self.loaded: dict[str, _click.Command] = {}

    def __getitem__(self, name: str) -> _click.Command:
        if name in self.built:
            return self.built[name]
        if name not in self.loaded:
            self.loaded[name] = self.lazy[name].load(name)  # KeyError: no such command
        return self.loaded[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        self.built.pop(name, None)
        self.loaded.pop(name, None)
        self.lazy.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from self.built
        yield from self.lazy

    def __len__(self) -> int:
        return len(self.built) + len(self.lazy)

    def __contains__(self, name: object) -> bool:
        return name in self.built or name in self.lazy

    def listing(self, name: str) -> _click.Command | None:
        """The command as a listing shows it, without loading a lazy one."""
        if name in self.built:
            return self.built[name]
        if name in self.loaded:
            return self.loaded[name]
        entry = self.lazy.get(name)
        return entry.listing(name) if entry is not None else None


class LazyGroup(TyperGroup):
    """A typer group with lazy subgroups (`LAZY`, set by `lazy_group`). Its help page and its
    completions list them by name and help; resolving a command line loads the one named."""

    LAZY: Mapping[str, Lazy] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = LazyCommands(self.commands, self.LAZY)
        self._listing = False

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        commands = self.commands
        if self._listing and isinstance(commands, LazyCommands):
            return commands.listing(cmd_name)
        return commands.get(cmd_name)

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: _click.Context, incomplete: str) -> list[Any]:
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False


def lazy_group(lazy: Mapping[str, Lazy]) -> type[LazyGroup]:
    """A `LazyGroup` class for `typer.Typer(cls=...)` with these lazy subgroups, in this
    order after the group's own commands."""
    return type("LazyGroup", (LazyGroup,), {"LAZY": dict(lazy)})


def when_imported(name: str, then: Callable[[ModuleType], None]) -> None:
    """Call `then(module)` once module `name` is imported: now if it already is, else right
    after it is first executed (whoever imports it)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _AfterImport) and finder.name == name:
            finder.then.append(then)
            return
    sys.meta_path.insert(0, _AfterImport(name, [then]))


class _AfterImport:
    """A finder of `sys.meta_path`: finds `name` as the other finders do, and has its loader
    call `then` after it. (Neither it nor `_Then` derives from `importlib.abc`, whose import
    would cost each command some 2 ms.)"""

    def __init__(self, name: str, then: list[Callable[[ModuleType], None]]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = cast("Loader", _Then(spec.loader, self.then))
        return spec


class _Then:
    """A module's own loader, then the calls waiting for the module."""

    def __init__(self, loader: Loader, then: list[Callable[[ModuleType], None]]) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        for then in self.then:
            then(module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, is_package...: the module's own loader answers.
        return getattr(self.loader, name)
