"""jobs.kinds.localfiles.open_beneath: only a regular file inside a root, whatever the path became."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.kinds import PermanentError
from jobs.kinds.localfiles import open_beneath

SECRET_MARKERS = ("root:x:0:0", "DJANGO_SECRET_KEY", "PATH=")


def _read(path: Path | str, roots: list[str]) -> str:
    fd = open_beneath(str(path), roots)
    with open(fd, encoding="utf-8") as handle:
        return handle.read()


def _refused(path: Path | str, roots: list[str], match: str) -> str:
    with pytest.raises(PermanentError, match=match) as info:
        _read(path, roots)
    message = str(info.value)
    assert str(path) in message
    assert not any(marker in message for marker in SECRET_MARKERS), message
    return message


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "sub").mkdir(parents=True)
    return tmp_path / "root"


def test_regular_file_under_a_root_is_read(root: Path) -> None:
    (root / "sub" / "data.csv").write_text("a,b\n1,2\n")

    assert _read(root / "sub" / "data.csv", [str(root)]) == "a,b\n1,2\n"


def test_root_given_through_a_symbolic_link_is_followed(root: Path, tmp_path: Path) -> None:
    # The roots are configuration: a link there is the operator's.
    (tmp_path / "root-link").symlink_to(root)
    (root / "data.csv").write_text("x\n")

    assert _read(root / "data.csv", [str(tmp_path / "root-link")]) == "x\n"


@pytest.mark.parametrize(
    "target", ["/proc/self/environ", "/etc/passwd", "/etc", "inside.csv"], ids=str
)
def test_symbolic_link_as_the_file_is_refused(root: Path, target: str) -> None:
    # given a link, even one to a regular file inside the root
    (root / "inside.csv").write_text("x\n")
    (root / "data.csv").symlink_to(target if target.startswith("/") else root / target)

    _refused(root / "data.csv", [str(root)], "symbolic link")


def test_symbolic_link_as_a_parent_directory_is_refused(root: Path) -> None:
    (root / "etc").symlink_to("/etc")

    _refused(root / "etc" / "passwd", [str(root)], "'etc' is a symbolic link")


def test_symbolic_link_deeper_in_the_path_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.csv").write_text("secret\n")
    (root / "sub" / "deeper").symlink_to(outside)

    _refused(root / "sub" / "deeper" / "data.csv", [str(root)], "symbolic link")


def test_directory_is_refused(root: Path) -> None:
    _refused(root / "sub", [str(root)], "a directory")


def test_fifo_is_refused_without_blocking(root: Path) -> None:
    os.mkfifo(root / "data.csv")

    _refused(root / "data.csv", [str(root)], "not a regular file")


def test_device_is_refused(root: Path) -> None:
    _refused("/dev/null", ["/dev"], "not a regular file")


@pytest.mark.parametrize(
    "relative", ["../outside.csv", "sub/../../outside.csv", "sub/./../data.csv"], ids=str
)
def test_dot_components_are_refused(root: Path, relative: str) -> None:
    (root.parent / "outside.csv").write_text("secret\n")
    (root / "data.csv").write_text("x\n")

    _refused(f"{root}/{relative}", [str(root)], r"'\.\.' is not followed|not under")


@pytest.mark.parametrize(
    "path_of",
    [lambda root: "/etc/passwd", lambda root: f"{root}-sibling/data.csv", lambda root: "data.csv"],
    ids=["outside", "sibling-prefix", "relative"],
)
def test_path_outside_every_root_is_refused(root: Path, path_of: Callable[[Path], str]) -> None:
    _refused(path_of(root), [str(root)], "not under any|not an absolute")


def test_missing_file_is_refused(root: Path) -> None:
    _refused(root / "nothing.csv", [str(root)], "no such file")


def test_root_itself_is_refused(root: Path) -> None:
    _refused(root, [str(root)], "root directory")
