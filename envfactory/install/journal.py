"""The rollback journal of an update in place (``create --update``, ``update.py``).

An update changes an environment where it is, so it keeps a journal inside it: a directory
``PREFIX/.envfactory-update-<random>/`` (one of envfactory's own paths: no package may install
a file there) holding

* a marker whose ``flock`` lives as long as the updating process (``staging.Staging``);
* ``new/``: the packages the update links, laid out as the prefix will hold them (rattler
  links into it with the final prefix patched into files; the pip files and the activation
  files are written there too); nothing of the prefix is written while it is filled;
* ``journal.json``, written (and flushed to disk) before the first change: the prefix's paths
  the update takes away (``aside``), the paths it brings in from ``new/`` (``incoming``) and the
  directories it makes for them (``made``), and its state, ``applying`` or ``committed``;
* ``old/``: each path of ``aside``, *renamed* there (never copied, never written through).

Applying is renames only: every ``aside`` path into ``old/``, then every ``incoming`` path out
of ``new/`` into the prefix; a path the prefix already holds is never replaced. A rename either
happened or did not, so undoing is exact whatever point a process died at: every ``incoming``
path that is no longer in ``new/`` is removed from the prefix, every path still in ``old/`` is
renamed back, the directories the update made are removed when empty, and the journal goes.
``commit`` records ``committed`` first; the journal is then only removed.

A failure or an interrupt undoes the update at once (``Journal.rollback``). A kill -9 or a power
cut leaves the journal with its lock released: the next ``create --update`` on that prefix
undoes it before anything else (``recover``), and ``verify`` refuses to vouch for the
environment until then (``interrupted``). The journal is read back as untrusted input: each
path in it must be relative, inside the prefix, and under no symbolic link.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from envfactory import host, ownfiles
from envfactory.cache import filelock
from envfactory.cache.pathcheck import UnsafePackage, check_relative
from envfactory.cache.staging import MARKER, Staging
from envfactory.errors import UserInputError

JOURNAL = ".envfactory-update-"  # PREFIX/.envfactory-update-<random>/ (ownfiles.OWN_PREFIXES)
PLAN = "journal.json"
OLD, NEW = "old", "new"


def lexists(path: Path) -> bool:
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    return True


def _real_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def parent_state(prefix: Path, rel: str) -> bool:
    """Whether every directory above ``prefix/rel`` exists as a real directory (False: one is
    missing); a symbolic link or a file on the way is refused (a rename there would follow
    it)."""
    current = prefix
    for part in Path(rel).parts[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise ownfiles.LinkRefused(
                f"{current} is {what}; an update moves files only inside real directories",
                f"rebuild the environment: envfactory create --force -p {prefix}",
            )
    return True


class Journal:
    """The journal of one update of ``prefix``, held by this process."""

    def __init__(self, prefix: Path, staging: Staging) -> None:
        self.prefix = prefix
        self.staging = staging
        self.plan: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        return self.staging.path

    @property
    def new(self) -> Path:
        return self.staging.path / NEW

    @classmethod
    def start(cls, prefix: Path, say: Callable[[str], None]) -> Journal:
        """A fresh journal in ``prefix``, after undoing one a dead update left there."""
        recover(prefix, say)
        staging = Staging.make(prefix, JOURNAL, mode=0o700)
        try:
            others = [j for j in _journals(prefix) if j != staging.path]
            if others:  # another update started meanwhile: neither goes on alone
                raise _busy(prefix, others[0])
            (staging.path / NEW).mkdir()
        except BaseException:
            staging.remove()
            raise
        return cls(prefix, staging)

    def apply(self, aside: Sequence[str], incoming: Sequence[str]) -> None:
        """Move ``aside`` out of the prefix into ``old/`` and ``incoming`` out of ``new/`` into
        the prefix. Every path is checked before the first rename: nothing is moved when one
        of them would replace a file the update does not take away, or lies under a link."""
        leaving = set(aside)
        made: list[str] = []
        seen: set[str] = set()
        for rel in aside:
            check_relative("the update", rel)
            parent_state(self.prefix, rel)
        moving: list[str] = []
        for rel in incoming:
            check_relative("the update", rel)
            target = self.prefix / rel
            if _real_directory(self.new / rel) and _real_directory(target):
                continue  # an empty directory a package lists, there already
            moving.append(rel)
            if not parent_state(self.prefix, rel):
                parts = Path(rel).parts[:-1]
                for i in range(1, len(parts) + 1):
                    directory = "/".join(parts[:i])
                    if directory not in seen and not lexists(self.prefix / directory):
                        seen.add(directory)
                        made.append(directory)
            elif lexists(target) and rel not in leaving:
                kind = "directory" if target.is_dir() else "file"
                raise UserInputError(
                    f"{self.prefix}: the new lock installs {rel}, where the environment has a "
                    f"{kind} that no package it removes owns; nothing was changed",
                    f"build the environment anew instead: envfactory create --force -p "
                    f"{self.prefix}",
                )
        self.plan = {"state": "applying", "aside": list(aside), "incoming": moving,
                     "made": made}  # fmt: skip
        self._write_plan()
        old = self.path / OLD
        for rel in aside:
            source = self.prefix / rel
            if not lexists(source):
                continue  # gone already (removed by hand): nothing to keep
            destination = old / rel
            ownfiles.real_directories(self.path, f"{OLD}/{rel}".rpartition("/")[0])
            source.rename(destination)
        for rel in moving:
            parent = rel.rpartition("/")[0]
            if parent:
                ownfiles.real_directories(self.prefix, parent)
            target = self.prefix / rel
            if lexists(target):  # checked above: only a race puts one there
                raise ownfiles.LinkRefused(
                    f"{target} appeared while the update ran", "run the update again"
                )
            (self.new / rel).rename(target)

    def commit(self) -> None:
        """The update is done: recorded, then the journal (the old files) removed, and the
        directories the removed packages leave empty."""
        if self.plan is not None:
            self.plan["state"] = "committed"
            self._write_plan()
            _remove_emptied(self.prefix, self.plan["aside"])
        self.staging.remove()

    def rollback(self) -> None:
        """Undo whatever was applied; the journal removed."""
        _undo(self.prefix, self.path)
        self.staging.remove()

    def _write_plan(self) -> None:
        data = (json.dumps(self.plan, indent=0) + "\n").encode()
        temporary = ownfiles.write_file(self.path, f"{PLAN}.tmp", data)
        # a handle open for writing: Windows flushes no other (FlushFileBuffers wants
        # GENERIC_WRITE, learn.microsoft.com/en-us/windows/win32/api/fileapi/
        # nf-fileapi-flushfilebuffers)
        fd = os.open(temporary, os.O_WRONLY | ownfiles.NOFOLLOW | getattr(os, "O_BINARY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        temporary.replace(self.path / PLAN)
        if host.WINDOWS:
            return  # os.open refuses a directory there: only the file is flushed
        directory = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself on disk
        finally:
            os.close(directory)


def _read_plan(journal: Path) -> dict[str, Any] | None:
    """The journal's plan (None: it was never written, so nothing was moved), its paths
    checked: a journal is read from a prefix, which is untrusted input."""
    data = ownfiles.read_file(journal / PLAN)
    if data is None:
        return None
    try:
        plan = json.loads(data)
    except ValueError:
        plan = None
    keys = ("aside", "incoming", "made")
    if (
        not isinstance(plan, dict)
        or plan.get("state") not in ("applying", "committed")
        or not all(isinstance(plan.get(k), list) for k in keys)
        or not all(isinstance(p, str) for k in keys for p in plan[k])
    ):
        raise UserInputError(
            f"{journal / PLAN} is not a journal envfactory wrote",
            f"the environment cannot be restored from it; rebuild it: envfactory create --force "
            f"-p {journal.parent}",
        )
    for key in keys:
        for rel in plan[key]:
            try:
                check_relative("the update's journal", rel)
            except UnsafePackage as exc:
                raise UserInputError(
                    exc.message, f"rebuild the environment with --force; {exc.hint}"
                ) from None
    return plan


def _undo(prefix: Path, journal: Path) -> str:
    """Undo the update whose journal is ``journal``; what it found (``applying``,
    ``committed``, or ``unstarted``). The journal itself is left to the caller."""
    plan = _read_plan(journal)
    if plan is None:
        return "unstarted"
    if plan["state"] == "committed":
        _remove_emptied(prefix, plan["aside"])
        return "committed"
    new, old = journal / NEW, journal / OLD
    for rel in reversed(plan["incoming"]):
        if not parent_state(prefix, rel) or lexists(new / rel):
            continue  # never moved in
        target = prefix / rel
        if _real_directory(target):
            target.rmdir()  # an empty directory a package lists
        elif lexists(target):
            target.unlink()  # moved in by the update: a link of the cache, or a file it wrote
    for rel in plan["aside"]:
        source = old / rel
        if not lexists(source):
            continue
        parent = rel.rpartition("/")[0]
        if parent:
            ownfiles.real_directories(prefix, parent)
        if lexists(prefix / rel):
            continue  # cannot be: the update removed what it moved in above
        source.rename(prefix / rel)
    for directory in reversed(plan["made"]):
        with contextlib.suppress(OSError):  # not empty, or not there
            (prefix / directory).rmdir()
    return "applying"


def _remove_emptied(prefix: Path, removed: Iterable[str]) -> None:
    """The directories that removing ``removed`` left empty (never the prefix itself)."""
    parents = {rel.rpartition("/")[0] for rel in removed}
    for directory in sorted((p for p in parents if p), key=lambda p: -p.count("/")):
        current = directory
        while current:
            try:
                (prefix / current).rmdir()
            except OSError:
                break
            current = current.rpartition("/")[0]


def _journals(prefix: Path) -> list[Path]:
    if not prefix.is_dir():
        return []
    out = []
    for candidate in sorted(prefix.glob(f"{JOURNAL}*")):
        try:
            if stat.S_ISDIR(os.lstat(candidate).st_mode):
                out.append(candidate)
        except OSError:
            continue
    return out


def _busy(prefix: Path, journal: Path) -> UserInputError:
    return UserInputError(
        f"another envfactory is updating {prefix} ({journal.name} is held)",
        "wait until it is done, then run the command again",
    )


def recover(prefix: Path, say: Callable[[str], None]) -> None:
    """Undo each update of ``prefix`` that died before it was done (its journal's lock is
    free); an update still running is refused."""
    for journal in _journals(prefix):
        marker = journal / MARKER
        if not lexists(marker):  # died between making the directory and its marker
            shutil.rmtree(journal, ignore_errors=True)
            continue
        with filelock.open_lock_file(os.fspath(marker)) as handle:
            if not filelock.try_lock(handle, shared=False):
                raise _busy(prefix, journal)
            state = _undo(prefix, journal)
            shutil.rmtree(journal, ignore_errors=True)
        if state == "applying":
            say(f"rolled back an update of {prefix} that was cut short; it is as it was before")
        elif state == "committed":
            say(f"finished the clean-up of an update of {prefix} that was cut short after it "
                "was done")  # fmt: skip


def interrupted(prefix: Path) -> None:
    """Refuse to vouch for ``prefix`` while an update is running or a dead one is not undone."""
    for journal in _journals(prefix):
        marker = journal / MARKER
        if lexists(marker):
            with filelock.open_lock_file(os.fspath(marker)) as handle:
                if not filelock.try_lock(handle, shared=False):
                    raise _busy(prefix, journal)
        plan = _read_plan(journal)
        if plan is None or plan["state"] == "committed":
            continue  # nothing of the prefix was changed yet, or the update is done
        raise UserInputError(
            f"an update of {prefix} was cut short (killed, or the machine stopped): "
            f"{journal.name} holds its journal",
            f"'envfactory create --update -p {prefix} LOCK' undoes it first, then updates; "
            "or 'envfactory create --force' builds the environment anew",
        )
