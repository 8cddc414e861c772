"""The files envfactory itself writes into a prefix, a staging directory or a kernel
directory: where they are (no package may install a file there) and how they are written
(never through a symbolic link, nor under one: a package that installs
``conda-meta/envfactory.json`` as a link to one of its own files would otherwise make
``create`` write into that file, which is a hard link into the shared cache and so into every
environment linked from it).

Every directory between the root that envfactory made or was given and the file is checked
with ``lstat`` to be a real directory, and the file is opened with ``O_NOFOLLOW`` (an ``lstat``
check on hosts without it). A local user who can write the prefix while envfactory runs can
still race these checks: docs/security.md, "What is not protected".
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from envfactory.errors import UserInputError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# Paths inside a prefix that belong to envfactory (and conda): a package listing one of them,
# or anything under them, is refused (pkgcache.check_extracted). conda-meta/ holds the
# records, envfactory.json and state; etc/conda/envfactory/ the activation plan and core; the
# stubs in activate.d/deactivate.d are named envfactory-*; .envfactory-staging is the marker
# of a staging directory (pkgcache.MARKER); .envfactory-update-* the journal of an update in
# place (install/journal.py).
OWN_DIRECTORIES = ("conda-meta", "etc/conda/envfactory")
OWN_PREFIXES = (
    "etc/conda/activate.d/envfactory-",
    "etc/conda/deactivate.d/envfactory-",
    ".envfactory-update-",
)
OWN_FILES = (".envfactory-staging",)


def is_own_path(path: str) -> bool:
    """Whether a package path (relative, ``/``-separated) is one of envfactory's own."""
    return (
        path in OWN_FILES
        or any(path == d or path.startswith(d + "/") for d in OWN_DIRECTORIES)
        or path.startswith(OWN_PREFIXES)
    )


class LinkRefused(UserInputError):
    """A path envfactory writes is a symbolic link, or lies under one."""


def _refused(path: Path, what: str) -> LinkRefused:
    return LinkRefused(
        f"{path} is {what}; envfactory writes there only into a directory it can see is real",
        "a package or another program put a link where envfactory keeps its own files; "
        "remove it (or re-create the environment), then run the command again",
    )


def real_directories(root: Path, relative: str) -> Path:
    """``root/relative`` after making each missing directory of it and checking that each
    existing one is a real directory, not a symbolic link (``root`` itself is the caller's)."""
    current = root
    for part in Path(relative).parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            try:
                current.mkdir()
            except FileExistsError:
                st = os.lstat(current)
            else:
                continue
        if stat.S_ISLNK(st.st_mode):
            raise _refused(current, "a symbolic link")
        if not stat.S_ISDIR(st.st_mode):
            raise _refused(current, "not a directory")
    return current


def _open(path: Path, flags: int, mode: int = 0o666) -> int:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(st.st_mode):
            raise _refused(path, "a symbolic link")
        if not stat.S_ISREG(st.st_mode):
            raise _refused(path, "not a regular file")
    try:
        return os.open(path, flags | NOFOLLOW | getattr(os, "O_BINARY", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(path, "a symbolic link") from None
        raise


def write_file(root: Path, relative: str, data: bytes) -> Path:
    """Write ``data`` to ``root/relative`` in place (truncating a regular file that is there),
    never through a link; the directories on the way are made or checked."""
    rel = Path(relative)
    directory = real_directories(root, str(rel.parent)) if str(rel.parent) != "." else root
    path = directory / rel.name
    fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def replace_in_file(path: Path | str, old: bytes, new: bytes) -> bool:
    """Replace every ``old`` in the regular file ``path`` with ``new``, in place and never
    through a link (the file checked as ``write_file`` checks it; its directories are the
    caller's to check): one open, one read, and the file written again from the first ``old``
    on. False, writing nothing, when there is no such file or no ``old`` in it."""
    try:
        fd = _open(Path(path), os.O_RDWR)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "r+b") as handle:
        data = handle.read()
        at = data.find(old) if old else -1
        if at < 0:
            return False
        handle.seek(at)
        handle.write(data[at:].replace(old, new))
        handle.truncate()
    return True


def read_file(path: Path) -> bytes | None:
    """The bytes of a regular file, never read through a link; None when there is none."""
    try:
        fd = _open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def create_marker(path: Path) -> int:
    """A fresh marker file at ``path`` (an old one, or a link planted there, is removed first,
    not followed): the descriptor, opened for writing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            raise _refused(path, "a directory")
        path.unlink()
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
