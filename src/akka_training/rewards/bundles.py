"""Scoring bundles: a directory of Python code that ``rule`` terms (and tools) call into.

A bundle travels as a zip whose bytes are its identity: `pack_bundle` makes the same zip from
the same files whatever their timestamps, permissions or the order the file system lists them
in, so the same content always has the same sha256 and registers once. The zip is stored
uncompressed, because deflate output may differ between zlib builds and with it the hash.

Packing refuses (`BundleRefused`) symbolic links, absolute paths, ``..`` components,
special files and anything over the size limit, naming the file and what to do. Python caches
(``__pycache__``, ``*.pyc``) and ``.git`` are left out: they change without the code changing.

`unpack_bundle` checks the hash before writing anything and writes only inside its
destination. `load_function` imports a function from an unpacked bundle under a module
namespace of its own (``_akka_bundle_<hash>_<location>``), so two bundles that both hold a
``scoring.py`` never see each other's module. Inside a bundle, modules import each other
relatively (``from . import helpers``): the bundle's root is a package.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import io
import os
import shutil
import stat
import sys
import threading
import types
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from akka_training.core.errors import InvalidRequest

# Written beside the unpacked files: the hash the directory was verified against.
MARKER = ".akka-bundle-sha256"
_SKIPPED_DIRS = {"__pycache__", ".git"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can hold
_FILE_MODE = 0o100644  # regular file, rw-r--r--
_import_lock = threading.Lock()


class BundleRefused(InvalidRequest):
    """A bundle that cannot be packed, unpacked or loaded; the message names the file and the
    remedy."""


@dataclass(frozen=True)
class PackedBundle:
    data: bytes  # the deterministic zip
    sha256: str  # hex digest of `data`
    files: list[str]  # the zip's entries, sorted, slash-separated


def pack_bundle(path: Path, max_bytes: int) -> PackedBundle:
    """Pack the directory or ``.zip`` at `path` into a deterministic zip.

    `max_bytes` bounds the files' total size and the zip's size."""
    path = Path(path)
    if path.is_symlink():
        raise BundleRefused(f"{path} is a symbolic link; pass the directory or zip it points to")
    if path.is_dir():
        entries = list(_directory_entries(path))
    elif path.is_file() and zipfile.is_zipfile(path):
        entries = list(_zip_entries(path))
    else:
        raise BundleRefused(f"{path} is neither a directory nor a .zip file; pass one of them")
    entries.sort(key=lambda e: e[0])
    if not entries:
        raise BundleRefused(f"{path} holds no files to bundle; add the module with your function")
    _check_size(path, entries, max_bytes)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.external_attr = _FILE_MODE << 16
            info.create_system = 3  # unix, so the mode bits mean the same everywhere
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data)
    data = buffer.getvalue()
    if len(data) > max_bytes:
        raise BundleRefused(
            f"the bundle from {path} packs to {len(data)} bytes, over the limit of {max_bytes} "
            "bytes; remove files the rule does not need"
        )
    return PackedBundle(data, hashlib.sha256(data).hexdigest(), [name for name, _ in entries])


def unpack_bundle(data: bytes, sha256: str, dest: Path) -> Path:
    """Verify `data` against `sha256` and unpack it into `dest`, which it creates (atomically:
    a crash leaves no half-written `dest`). A `dest` already holding this bundle is reused.
    Returns `dest`."""
    dest = Path(dest)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256.lower().removeprefix("sha256:"):
        raise BundleRefused(
            f"the bundle's content has hash sha256:{actual}, not the registered sha256:"
            f"{sha256}; the stored copy is damaged or was replaced: register the bundle again"
        )
    if _unpacked_hash(dest) == actual:
        return dest
    if dest.exists() and _unpacked_hash(dest) is None and any(dest.iterdir()):
        raise BundleRefused(
            f"{dest} exists and holds something other than an unpacked bundle; unpack into a "
            "new or empty directory"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.{uuid.uuid4().hex}.partial"
    staging.mkdir()
    try:
        _extract(data, staging)
        (staging / MARKER).write_text(actual + "\n")
        if _unpacked_hash(dest) == actual:  # another process unpacked it meanwhile
            return dest
        if dest.exists():  # empty, or another bundle unpacked here before
            shutil.rmtree(dest)
        try:
            staging.rename(dest)
        except OSError:
            if _unpacked_hash(dest) != actual:
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def load_function(bundle_dir: Path, target: str) -> Callable[..., Any]:
    """Import ``module.path:function`` from the bundle unpacked at `bundle_dir`.

    Raises `BundleRefused` when the module or the function is missing; an exception raised by
    the module's own code at import propagates unchanged."""
    bundle_dir = Path(bundle_dir).resolve()
    module_path, _, function_name = target.partition(":")
    if not module_path or not function_name:
        raise BundleRefused(f"{target!r} is not of the form module:function")
    namespace = _namespace(bundle_dir)
    with _import_lock:
        if namespace not in sys.modules:
            sys.modules[namespace] = _package(namespace, bundle_dir)
        try:
            module = importlib.import_module(f"{namespace}.{module_path}")
        except ModuleNotFoundError as exc:
            message = _missing_module_message(exc, namespace, module_path, bundle_dir)
            raise BundleRefused(message) from exc
    function: object = getattr(module, function_name, None)
    if not callable(function):
        raise BundleRefused(
            f"the bundle's module {module_path!r} has no function {function_name!r}; define it "
            "there or fix the term's function"
        )
    return function


def _directory_entries(root: Path) -> Iterator[tuple[str, bytes]]:
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(directory)
        for name in sorted(dirnames):
            if (here / name).is_symlink():
                raise BundleRefused(_symlink_message(root, here / name))
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        for name in sorted(filenames):
            full = here / name
            relative = full.relative_to(root).as_posix()
            if full.is_symlink():
                raise BundleRefused(_symlink_message(root, full))
            if not stat.S_ISREG(full.lstat().st_mode):
                raise BundleRefused(
                    f"{relative} in {root} is not a regular file (a device, socket or pipe); "
                    "remove it from the bundle"
                )
            if name.endswith(_SKIPPED_SUFFIXES):
                continue
            _check_name(relative, root)
            yield relative, full.read_bytes()


def _zip_entries(path: Path) -> Iterator[tuple[str, bytes]]:
    seen: set[str] = set()
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename
            if _is_symlink(info):
                raise BundleRefused(
                    f"{name} in {path} is a symbolic link; zip the file it points to instead"
                )
            _check_name(name, path)
            if info.is_dir():
                continue
            parts = PurePosixPath(name).parts
            if set(parts[:-1]) & _SKIPPED_DIRS or name.endswith(_SKIPPED_SUFFIXES):
                continue
            if name in seen:
                raise BundleRefused(f"{name} appears twice in {path}; keep one copy")
            seen.add(name)
            yield name, archive.read(info)


def _check_name(name: str, source: Path) -> None:
    """Refuse a path that could land outside the bundle's directory when unpacked."""
    pure = PurePosixPath(name)
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise BundleRefused(
            f"{name} in {source} is an absolute path; bundle files must use paths relative to "
            "the bundle's root"
        )
    if "\\" in name or ".." in pure.parts or "\x00" in name:
        raise BundleRefused(
            f"{name} in {source} has an unsafe path (a '..' component, a backslash or a NUL); "
            "rename it to a plain relative path inside the bundle"
        )


def _check_size(source: Path, entries: list[tuple[str, bytes]], max_bytes: int) -> None:
    total = 0
    for name, data in entries:
        if len(data) > max_bytes:
            raise BundleRefused(
                f"{name} in {source} is {len(data)} bytes, over the bundle limit of {max_bytes} "
                "bytes; leave it out of the bundle"
            )
        total += len(data)
    if total > max_bytes:
        largest = sorted(entries, key=lambda e: -len(e[1]))[:3]
        shown = ", ".join(f"{n} ({len(d)} bytes)" for n, d in largest)
        raise BundleRefused(
            f"the files in {source} add up to {total} bytes, over the bundle limit of "
            f"{max_bytes} bytes; the largest are {shown}: leave out what the rule does not need"
        )


def _extract(data: bytes, staging: Path) -> None:
    root = staging.resolve()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            if _is_symlink(info):
                raise BundleRefused(f"{info.filename} in the bundle is a symbolic link")
            _check_name(info.filename, Path("the bundle"))
            if info.is_dir():
                continue
            target = (root / info.filename).resolve()
            if not target.is_relative_to(root):
                raise BundleRefused(f"{info.filename} would unpack outside the bundle")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _unpacked_hash(directory: Path) -> str | None:
    try:
        return (directory / MARKER).read_text().strip()
    except OSError:
        return None


def _namespace(bundle_dir: Path) -> str:
    """``_akka_bundle_<content hash>_<location hash>``: the location keeps two copies of one
    bundle apart, so deleting one never breaks imports from the other."""
    content = _unpacked_hash(bundle_dir) or "unverified"
    location = hashlib.sha256(str(bundle_dir).encode()).hexdigest()
    return f"_akka_bundle_{content[:16]}_{location[:8]}"


def _package(namespace: str, bundle_dir: Path) -> types.ModuleType:
    spec = importlib.machinery.ModuleSpec(namespace, None, is_package=True)
    spec.submodule_search_locations = [str(bundle_dir)]
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(bundle_dir)]
    return package


def _symlink_message(root: Path, link: Path) -> str:
    return (
        f"{link.relative_to(root).as_posix()} in {root} is a symbolic link; bundles hold "
        "regular files only: copy the file it points to into the bundle"
    )


def _missing_module_message(
    exc: ModuleNotFoundError, namespace: str, module_path: str, bundle_dir: Path
) -> str:
    missing = exc.name or ""
    if missing.startswith(namespace + "."):
        shown = missing.removeprefix(namespace + ".")
        return (
            f"the bundle has no module {shown!r} (looked for {shown.replace('.', '/')}.py); "
            "fix the term's function or add the module"
        )
    top = missing.split(".")[0]
    if (bundle_dir / f"{top}.py").exists() or (bundle_dir / top).is_dir():
        return (
            f"the bundle's module {module_path!r} imports {missing!r} as a top-level module; "
            "modules of a bundle import each other relatively: write 'from . import "
            f"{top}' (or 'from .. import {top}' one package down)"
        )
    return (
        f"the bundle's module {module_path!r} imports {missing!r}, which the training job's "
        "environment does not have; use the standard library or packages the job has"
    )
