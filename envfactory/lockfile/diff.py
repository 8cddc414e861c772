"""What changed between two locks, per platform: packages added, removed and changed (version,
build, channel, manager, file), with the packages the lock's inputs name marked (``pinned``:
the combo or envfactory.yaml fixes the version; ``requested``: named without a version).

A side of the comparison is a lock file, the same file at a git revision (``git show
REV:path``, through ``git_adapter``), or nothing (a lock that does not exist there: every
package is added or removed). ``lock`` and ``lock --dry-run`` compare the lock they replace with
the packages they solved, through the same ``compare``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from envfactory.catalog.platforms import Platform
from envfactory.errors import UserInputError
from envfactory.lockfile.models import LOCK_FILE, LockedPackage, dependency_name

ChangeKind = Literal["added", "removed", "changed"]
Mark = Literal["pinned", "requested", ""]
FIELDS = ("manager", "version", "build", "channel", "file")


class LockSide(NamedTuple):
    """One side of a comparison: a label for people, and the lock's packages per platform."""

    label: str
    packages: Mapping[Platform, tuple[LockedPackage, ...]]
    #: package name -> mark, per platform, from the lock's recorded inputs
    marks: Mapping[Platform, Mapping[str, Mark]]
    exists: bool = True


class Change(NamedTuple):
    kind: ChangeKind
    name: str
    old: LockedPackage | None
    new: LockedPackage | None
    fields: tuple[str, ...]  # what differs, for a changed package (FIELDS)
    mark: Mark

    def describe(self) -> str:
        mark = f" [{self.mark}]" if self.mark else ""
        if self.kind == "added" and self.new is not None:
            return f"+ {_show(self.new)}{mark}"
        if self.kind == "removed" and self.old is not None:
            return f"- {_show(self.old)}{mark}"
        assert self.old is not None and self.new is not None
        return f"~ {self.name} {_arrow(self.old, self.new, self.fields)}{mark}"


class PlatformDiff(NamedTuple):
    platform: Platform
    changes: tuple[Change, ...]
    unchanged: int

    def count(self, kind: ChangeKind) -> int:
        return sum(1 for c in self.changes if c.kind == kind)

    def summary(self) -> str:
        if not self.changes:
            return f"{self.platform}: no changes ({self.unchanged} packages)"
        return (
            f"{self.platform}: {self.count('added')} added, {self.count('removed')} removed, "
            f"{self.count('changed')} changed, {self.unchanged} unchanged"
        )


class LockDiff(NamedTuple):
    old: str
    new: str
    platforms: tuple[PlatformDiff, ...]

    @property
    def empty(self) -> bool:
        return not any(p.changes for p in self.platforms)

    def changed_names(self) -> set[str]:
        return {c.name for p in self.platforms for c in p.changes}


# --------------------------------------------------------------------------------------------
# Comparing.


def compare(old: LockSide, new: LockSide) -> LockDiff:
    """Package by package, per platform of either side (a platform only one side has: all its
    packages added or removed). A package is known by its name on a platform, so one that moves
    from conda to pip is a change of manager."""
    platforms = list(dict.fromkeys([*old.packages, *new.packages]))
    out = []
    for platform in platforms:
        before = _by_name(old.packages.get(platform, ()))
        after = _by_name(new.packages.get(platform, ()))
        marks = {**old.marks.get(platform, {}), **new.marks.get(platform, {})}
        changes: list[Change] = []
        unchanged = 0
        for name in sorted(set(before) | set(after)):
            a, b = before.get(name), after.get(name)
            mark = marks.get(name, "")
            if a is None and b is not None:
                changes.append(Change("added", name, None, b, (), mark))
            elif b is None and a is not None:
                changes.append(Change("removed", name, a, None, (), mark))
            elif a is not None and b is not None:
                fields = _differences(a, b)
                if fields:
                    changes.append(Change("changed", name, a, b, fields, mark))
                else:
                    unchanged += 1
        out.append(PlatformDiff(platform, tuple(changes), unchanged))
    return LockDiff(old.label, new.label, tuple(out))


def _by_name(packages: Sequence[LockedPackage]) -> dict[str, LockedPackage]:
    return {p.name: p for p in packages}


def _differences(a: LockedPackage, b: LockedPackage) -> tuple[str, ...]:
    found = []
    if a.manager != b.manager:
        found.append("manager")
    if a.version != b.version:
        found.append("version")
    if a.build != b.build:
        found.append("build")
    if _channel(a) != _channel(b):
        found.append("channel")
    replaced = (a.sha256 or a.md5) != (b.sha256 or b.md5) or a.filename != b.filename
    if replaced and not found:  # same name, version, build, channel: another file
        found.append("file")
    return tuple(found)


def _channel(pkg: LockedPackage) -> str:
    """Where the file comes from: the conda channel, or the directory of a pip file's URL."""
    if pkg.manager == "conda":
        return pkg.url.rsplit("/", 2)[0]  # as the lock file holds it: the URL less subdir/file
    return pkg.url.rsplit("/", 1)[0]


def _show(pkg: LockedPackage) -> str:
    where = f"pip, {_channel(pkg)}" if pkg.manager == "pip" else _channel(pkg)
    build = f" {pkg.build}" if pkg.build else ""
    return f"{pkg.name} {pkg.version}{build} ({where})"


def _arrow(a: LockedPackage, b: LockedPackage, fields: Sequence[str]) -> str:
    def side(p: LockedPackage) -> str:
        parts = [p.version]
        if "build" in fields or "version" in fields:
            parts += [p.build] if p.build else []
        if "manager" in fields:
            parts.append(f"({p.manager})")
        if "channel" in fields:
            parts.append(f"({_channel(p)})")
        if fields == ("file",):
            parts.append(f"sha256:{(p.sha256 or p.md5 or '')[:12]}")
        return " ".join(parts)

    return f"{side(a)} -> {side(b)}"


# --------------------------------------------------------------------------------------------
# The sides: a file, a file at a git revision, or packages in hand.


def side_from_packages(
    label: str,
    packages: Mapping[Platform, Sequence[LockedPackage]],
    inputs: Mapping[Platform, Mapping[str, Any]] | None = None,
) -> LockSide:
    return LockSide(
        label,
        {p: tuple(v) for p, v in packages.items()},
        {p: marks_of(i) for p, i in (inputs or {}).items()},
    )


def side_from_file(path: Path, label: str | None = None) -> LockSide:
    """A lock file as it is on disk; a missing one is an empty side."""
    if not path.is_file():
        return LockSide(label or f"{path} (missing)", {}, {}, exists=False)
    return _side_from_lock(path, label or str(path))


def side_from_revision(path: Path, revision: str) -> LockSide:
    """``path`` as committed at ``revision`` (``HEAD``, ``origin/main``, a hash); a lock that
    does not exist at that revision is an empty side."""
    import tempfile

    from envfactory.lockfile import git_adapter

    text = git_adapter.show_file(path, revision)
    label = f"{revision}:{path}"
    if text is None:
        return LockSide(f"{label} (not in {revision})", {}, {}, exists=False)
    with tempfile.TemporaryDirectory(prefix="envfactory-diff-") as tmp:
        copy = Path(tmp) / LOCK_FILE
        copy.write_text(text, encoding="utf-8")
        return _side_from_lock(copy, label, shown=label)


def _side_from_lock(path: Path, label: str, shown: str | None = None) -> LockSide:
    from envfactory.lockfile.read import read_lock

    try:
        contents = read_lock(path)
    except UserInputError as exc:
        if shown is None:
            raise
        raise UserInputError(
            exc.message.replace(str(path), shown), exc.hint
        ) from None  # name the revision, not the temporary copy
    by_platform: dict[Platform, list[LockedPackage]] = {p: [] for p in contents.platforms}
    for pkg in contents.packages:
        by_platform.setdefault(pkg.platform, []).append(pkg)
    return side_from_packages(label, by_platform, contents.metadata.inputs)


def marks_of(inputs: Mapping[str, Any]) -> dict[str, Mark]:
    """Which names a platform's recorded inputs ask for: conda specs (``numpy=1.16.4``,
    ``pandas``, ``URL::cudnn=7.6.5=cuda10.0_0``) and pip requirements (``tensorflow-gpu==1.14.0``);
    ``pinned`` when the spec fixes a version."""
    out: dict[str, Mark] = {}
    for spec in inputs.get("conda") or ():
        text = str(spec).rsplit("::", 1)[-1].strip()
        name = dependency_name(text)
        rest = text[len(name) :].strip()
        exact = re.match(r"(==?)?\s*[0-9]", rest) is not None
        out[name] = "pinned" if exact else out.get(name, "requested")
    for req in inputs.get("pip") or ():
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        try:
            parsed = Requirement(str(req))
        except InvalidRequirement:
            continue
        name = canonicalize_name(parsed.name)
        exact = any(s.operator in ("==", "===") and "*" not in s.version for s in parsed.specifier)
        out[name] = "pinned" if exact else out.get(name, "requested")
    return out


# --------------------------------------------------------------------------------------------
# Rendering: text for people, JSON for scripts, Markdown for a pull-request comment.


def to_text(diff: LockDiff, *, header: bool = True) -> list[str]:
    lines = [f"{diff.old} -> {diff.new}"] if header else []
    for platform in diff.platforms:
        lines.append(platform.summary())
        lines += [f"  {change.describe()}" for change in platform.changes]
    return lines


def to_json(diff: LockDiff) -> dict[str, Any]:
    def package(p: LockedPackage | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {
            "manager": p.manager,
            "version": p.version,
            "build": p.build,
            "channel": _channel(p),
            "url": p.url,
            "sha256": p.sha256,
        }

    return {
        "old": diff.old,
        "new": diff.new,
        "changed": not diff.empty,
        "platforms": {
            pd.platform: {
                "added": pd.count("added"),
                "removed": pd.count("removed"),
                "changed": pd.count("changed"),
                "unchanged": pd.unchanged,
                "changes": [
                    {
                        "kind": c.kind,
                        "name": c.name,
                        "fields": list(c.fields),
                        "mark": c.mark or None,
                        "old": package(c.old),
                        "new": package(c.new),
                    }
                    for c in pd.changes
                ],
            }
            for pd in diff.platforms
        },
    }


def to_markdown(diff: LockDiff) -> list[str]:
    lines = [f"#### `{_md(diff.old)}` → `{_md(diff.new)}`", ""]
    for pd in diff.platforms:
        lines.append(f"**{pd.platform}**: {pd.summary().split(': ', 1)[1]}")
        lines.append("")
        if not pd.changes:
            continue
        lines += ["| | package | old | new | |", "| --- | --- | --- | --- | --- |"]
        for c in pd.changes:
            sign = {"added": "+", "removed": "-", "changed": "~"}[c.kind]
            old = _cell(c.old, c.fields)
            new = _cell(c.new, c.fields)
            lines.append(f"| {sign} | `{_md(c.name)}` | {old} | {new} | {c.mark} |")
        lines.append("")
    return lines


def _cell(pkg: LockedPackage | None, fields: Sequence[str]) -> str:
    if pkg is None:
        return ""
    parts = [pkg.version]
    if pkg.build:
        parts.append(pkg.build)
    if pkg.manager == "pip" or "manager" in fields:
        parts.append(f"({pkg.manager})")
    if "channel" in fields:
        parts.append(_channel(pkg))
    if fields == ("file",):
        parts.append(f"sha256:{(pkg.sha256 or pkg.md5 or '')[:12]}")
    return _md(" ".join(parts))


def _md(text: str) -> str:
    """A table cell's text: no pipe or backtick can end the cell or the code span early."""
    return text.replace("|", "\\|").replace("`", "'")
