"""Open a local file for a kind: only a regular file inside a root, whatever the path became.

A path accepted at submit time (it lay under a root then, or did not exist
yet) can be changed before the attempt runs: turned into a symbolic link to
/proc/self/environ, given a symlinked parent directory, replaced by a FIFO.
So `open_beneath` does not trust the path: from the root's directory it
opens one component at a time, relative to the directory opened before
(`openat` with a directory fd), never following a symbolic link (O_NOFOLLOW)
and never going up (`..` refused), then checks the opened file with fstat
(a regular file) and, where /proc shows it, that the opened file's path is
still inside the root (a directory renamed out of it mid-walk).

Not covered: a hard link made inside the root to a file elsewhere on the
same filesystem is that file (Linux's fs.protected_hardlinks stops users
linking files they could not write); platform/README.md, Security model.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path, PurePath

from jobs.kinds.base import PermanentError

# Directories are opened for the walk only (O_PATH where the OS has it: no read permission needed).
_DIR_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)
# The file: never a link, never blocking on a FIFO or device, never a controlling terminal.
_FILE_FLAGS = (
    os.O_RDONLY
    | os.O_NOFOLLOW
    | os.O_CLOEXEC
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
)


def open_beneath(path: str, roots: Sequence[str]) -> int:
    """A read-only fd of the regular file `path`, opened without leaving the root it lies under.

    `path` is absolute and lies (as written) under one of `roots`; the roots
    themselves are trusted configuration and may be symbolic links. The fd
    is blocking. Raises PermanentError naming `path` (never anything read
    from the file) when it is under no root, has a `..` component, a
    symbolic link or non-directory anywhere below the root, is missing,
    unreadable, not a regular file, or no longer inside the root once open.
    """
    root, relative = _split(path, roots)
    current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in relative.parts[:-1]:
            parent = current
            current = _open_component(path, part, parent, _DIR_FLAGS)
            os.close(parent)
        fd = _open_component(path, relative.parts[-1], current, _FILE_FLAGS)
    finally:
        os.close(current)
    try:
        _check_opened(path, fd, root)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _split(path: str, roots: Sequence[str]) -> tuple[str, PurePath]:
    """(the real path of the root `path` lies under, the rest of `path` below it)."""
    target = PurePath(path)
    if not target.is_absolute():
        raise PermanentError(f"cannot read {path}: not an absolute path")
    for configured in roots:
        root = os.path.realpath(configured)
        if target.is_relative_to(root):
            relative = target.relative_to(root)
            if not relative.parts:
                raise PermanentError(f"cannot read {path}: it is a root directory")
            if ".." in relative.parts:
                raise PermanentError(f"cannot read {path}: '..' is not followed")
            return root, relative
    raise PermanentError(f"cannot read {path}: not under any of JOBS_CSV_ROOTS")


def _open_component(path: str, part: str, parent: int, flags: int) -> int:
    try:
        return os.open(part, flags, dir_fd=parent)
    except OSError as exc:
        raise PermanentError(f"cannot read {path}: {_why(exc, part, parent)}") from None


def _why(exc: OSError, part: str, parent: int) -> str:
    """A readable reason from the failed open of `part` (a stat of the entry, never a read)."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            mode = os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):
            return f"{part!r} is a symbolic link (links are not followed at run time)"
        return f"{part!r} is not a directory"
    if exc.errno == errno.ENOENT:
        return "no such file"
    return f"{part!r}: {exc.strerror or exc}"


def _check_opened(path: str, fd: int, root: str) -> None:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise PermanentError(f"cannot read {path}: {what}; source must be a regular file")
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return  # no /proc here: the walk itself stayed below the root
    if not Path(opened).is_relative_to(root):
        raise PermanentError(f"cannot read {path}: it moved out of its root while being opened")
