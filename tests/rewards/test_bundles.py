"""Scoring bundles: deterministic packing, refusals, verified unpacking, isolated imports."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from akka_training.rewards.bundles import (
    BundleRefused,
    load_function,
    pack_bundle,
    unpack_bundle,
)

LIMIT = 1 << 20


def write_bundle(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


SCORING = {
    "scoring.py": "from . import helpers\n\ndef score(**kw):\n    return helpers.VALUE\n",
    "helpers.py": "VALUE = 0.25\n",
    "pkg/__init__.py": "",
    "pkg/deep.py": "from .. import helpers\n\ndef score(**kw):\n    return helpers.VALUE * 2\n",
}


def test_packing_the_same_files_twice_gives_the_same_bytes_and_hash(tmp_path: Path) -> None:
    first = pack_bundle(write_bundle(tmp_path / "a", SCORING), LIMIT)
    second = pack_bundle(write_bundle(tmp_path / "b", dict(reversed(SCORING.items()))), LIMIT)
    assert first.data == second.data
    assert first.sha256 == second.sha256 == hashlib.sha256(first.data).hexdigest()
    assert first.files == ["helpers.py", "pkg/__init__.py", "pkg/deep.py", "scoring.py"]


def test_timestamps_permissions_and_python_caches_do_not_change_the_hash(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    before = pack_bundle(root, LIMIT).sha256
    os.utime(root / "scoring.py", (1_000_000_000, 1_000_000_000))
    (root / "helpers.py").chmod(0o755)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\x00cache")
    (root / "stale.pyc").write_bytes(b"\x00")
    after = pack_bundle(root, LIMIT)
    assert after.sha256 == before
    assert "stale.pyc" not in after.files


def test_changed_content_changes_the_hash(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    before = pack_bundle(root, LIMIT).sha256
    (root / "helpers.py").write_text("VALUE = 0.5\n")
    assert pack_bundle(root, LIMIT).sha256 != before


def test_a_zip_packs_to_the_same_bundle_as_its_directory(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    archive = tmp_path / "b.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in reversed(sorted(SCORING)):
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 5, 1, 12, 0, 0)), SCORING[name])
        z.writestr("pkg/", "")  # directory entries are dropped
    assert pack_bundle(archive, LIMIT).sha256 == pack_bundle(root, LIMIT).sha256


def test_the_packed_zip_has_fixed_times_and_permissions(tmp_path: Path) -> None:
    packed = pack_bundle(write_bundle(tmp_path / "b", SCORING), LIMIT)
    with zipfile.ZipFile(io.BytesIO(packed.data)) as z:
        for info in z.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert stat.S_IMODE(info.external_attr >> 16) == 0o644
            assert not info.is_dir()


def test_a_symbolic_link_is_refused_by_name(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    (root / "data.txt").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(BundleRefused, match=r"data.txt .* is a symbolic link.*copy the file"):
        pack_bundle(root, LIMIT)


def test_a_linked_directory_is_refused(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    (tmp_path / "outside").mkdir()
    (root / "shared").symlink_to(tmp_path / "outside", target_is_directory=True)
    with pytest.raises(BundleRefused, match=r"shared .* is a symbolic link"):
        pack_bundle(root, LIMIT)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../escape.py", r"\.\./escape\.py .* unsafe path .* '\.\.'"),
        ("pkg/../../escape.py", r"unsafe path"),
        ("/etc/cron.d/job", r"/etc/cron\.d/job .* absolute path"),
        ("C:/temp/x.py", r"absolute path"),
    ],
)
def test_a_zip_with_an_unsafe_path_is_refused(tmp_path: Path, name: str, message: str) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("scoring.py", "def score(**kw): return 1\n")
        z.writestr(name, "print('hi')\n")
    with pytest.raises(BundleRefused, match=message):
        pack_bundle(archive, LIMIT)


def test_a_zip_holding_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as z:
        info = zipfile.ZipInfo("passwd")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(info, "/etc/passwd")
    with pytest.raises(BundleRefused, match=r"passwd .* is a symbolic link"):
        pack_bundle(archive, LIMIT)


def test_a_file_over_the_limit_is_refused_by_name(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    (root / "weights.bin").write_bytes(b"x" * 5000)
    with pytest.raises(BundleRefused, match=r"weights\.bin .* 5000 bytes, over .* 4096 bytes"):
        pack_bundle(root, 4096)


def test_files_that_add_up_over_the_limit_are_refused_naming_the_largest(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    (root / "a.txt").write_bytes(b"x" * 3000)
    (root / "b.txt").write_bytes(b"y" * 3000)
    with pytest.raises(BundleRefused, match=r"add up to \d+ bytes.*a\.txt \(3000 bytes\)"):
        pack_bundle(root, 4096)


def test_an_empty_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleRefused, match="holds no files"):
        pack_bundle(tmp_path / "empty", LIMIT)


def test_unpacking_verifies_the_hash_first(tmp_path: Path) -> None:
    packed = pack_bundle(write_bundle(tmp_path / "b", SCORING), LIMIT)
    dest = tmp_path / "unpacked"
    with pytest.raises(BundleRefused, match="register the bundle again"):
        unpack_bundle(packed.data + b"tampered", packed.sha256, dest)
    assert not dest.exists()
    assert unpack_bundle(packed.data, packed.sha256, dest) == dest
    assert (dest / "pkg" / "deep.py").read_text() == SCORING["pkg/deep.py"]


def test_unpacking_never_writes_outside_the_destination(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("ok.py", "")
        z.writestr("../../slipped.py", "print('escaped')\n")
    data = buffer.getvalue()
    dest = tmp_path / "deep" / "er" / "dest"
    with pytest.raises(BundleRefused, match="unsafe path"):
        unpack_bundle(data, hashlib.sha256(data).hexdigest(), dest)
    assert not (tmp_path / "deep" / "slipped.py").exists()
    assert not dest.exists()
    assert list((tmp_path / "deep" / "er").iterdir()) == []  # no staging left behind


def test_unpacking_again_reuses_the_directory(tmp_path: Path) -> None:
    packed = pack_bundle(write_bundle(tmp_path / "b", SCORING), LIMIT)
    dest = unpack_bundle(packed.data, packed.sha256, tmp_path / "u")
    (dest / "helpers.py").touch()
    mtime = (dest / "helpers.py").stat().st_mtime_ns
    unpack_bundle(packed.data, packed.sha256, dest)
    assert (dest / "helpers.py").stat().st_mtime_ns == mtime


def test_unpacking_refuses_to_overwrite_a_directory_that_is_not_a_bundle(tmp_path: Path) -> None:
    packed = pack_bundle(write_bundle(tmp_path / "b", SCORING), LIMIT)
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(BundleRefused, match="holds something other than an unpacked bundle"):
        unpack_bundle(packed.data, packed.sha256, precious)
    assert (precious / "notes.txt").read_text() == "keep me"


def test_a_new_bundle_replaces_an_older_one_in_the_same_directory(tmp_path: Path) -> None:
    old = pack_bundle(write_bundle(tmp_path / "old", SCORING), LIMIT)
    new = pack_bundle(write_bundle(tmp_path / "new", {"only.py": "X = 1\n"}), LIMIT)
    dest = unpack_bundle(old.data, old.sha256, tmp_path / "u")
    unpack_bundle(new.data, new.sha256, dest)
    assert sorted(p.name for p in dest.iterdir()) == [".akka-bundle-sha256", "only.py"]


def test_two_bundles_with_the_same_module_names_stay_apart(tmp_path: Path) -> None:
    first_files = SCORING
    second_files = {**SCORING, "helpers.py": "VALUE = 0.75\n"}
    dirs = []
    for name, files in (("one", first_files), ("two", second_files)):
        packed = pack_bundle(write_bundle(tmp_path / f"src-{name}", files), LIMIT)
        dirs.append(unpack_bundle(packed.data, packed.sha256, tmp_path / name))
    first = load_function(dirs[0], "scoring:score")
    second = load_function(dirs[1], "scoring:score")
    assert (first(), second()) == (0.25, 0.75)
    assert load_function(dirs[1], "pkg.deep:score")() == 1.5
    assert "scoring" not in sys.modules and "helpers" not in sys.modules


def test_a_missing_module_or_function_is_refused_with_the_fix(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b", SCORING)
    with pytest.raises(BundleRefused, match=r"no module 'grading' \(looked for grading\.py\)"):
        load_function(root, "grading:score")
    with pytest.raises(BundleRefused, match=r"module 'scoring' has no function 'grade'"):
        load_function(root, "scoring:grade")


def test_a_top_level_import_of_a_sibling_module_explains_relative_imports(
    tmp_path: Path,
) -> None:
    root = write_bundle(
        tmp_path / "b", {"main.py": "import util\n\ndef score(**kw): return 1\n", "util.py": ""}
    )
    with pytest.raises(BundleRefused, match=r"'from \. import util'"):
        load_function(root, "main:score")
