"""``lock --check`` on a lock from a pull request: what a hand edit added or changed.

``check_lock`` compares the recorded inputs with the current ones and the files of the set with
their recorded digests; a pull request that only appended a package to conda-lock.yml's list
passed both. Here, without solving:

* every package must be reached from the recorded specs through the lock's own dependencies
  (``lockfile.unreachable``, which ``create`` refuses too);
* conda-lock.yml's package list must be the one the explicit files of the set
  (``conda-<platform>.lock``, digests recorded) list: what only one of them names, or names
  with another URL or hash, is reported.

A forger who rewrites the list, the explicit files and their digests consistently passes both;
``--resolve`` solves again (py-rattler for conda, uv for pip) with every locked version as a
constraint, and reports any difference from the lock: that is the check for a lock from someone
you do not trust (docs/security.md).

On a stale lock, ``relock_preview`` solves as ``lock`` would (sticky, nothing written) so that
``lock --check`` prints the change ``lock`` would print; an up-to-date lock is never solved.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envfactory.catalog.platforms import Platform
from envfactory.lockfile.diff import LockDiff
from envfactory.lockfile.models import LOCK_FILE, LockedPackage, LockFile
from envfactory.lockfile.read import (
    Listed,
    LockHeader,
    conda_key,
    explicit_entries,
    read_lock_header,
)
from envfactory.lockfile.record import stale_files
from envfactory.lockfile.write import explicit_name
from envfactory.progress import Progress
from envfactory.solve.inputs import inputs_hash
from envfactory.solve.lock import LockRequest, pip_target
from envfactory.untrusted import redact_url, safe_text


def hand_edits(
    path: Path, header: LockHeader, directory: Path, explicit: Mapping[Platform, tuple[str, str]]
) -> tuple[LockFile, list[str]]:
    """The lock at ``path`` and what in its package list no lock run wrote: packages nothing
    requires, and differences from the explicit files (``explicit``: platform -> the file's
    name and recorded digest; a file that does not match its digest is not compared, the
    caller has said so already)."""
    from envfactory.lockfile.read import describe_package, read_lock_for_review
    from envfactory.lockfile.record import file_digest

    lock, stray = read_lock_for_review(path, header)
    reasons = [
        f"{p.platform}: {describe_package(p)} is in the package list, but no spec the lock "
        "records requires it (added by hand?)"
        for p in stray
    ]
    for platform in lock.platforms:
        name, digest = explicit.get(platform, ("", ""))
        try:
            data = (directory / name).read_bytes() if name else b""
            text = data.decode("utf-8")
        except (OSError, UnicodeError):
            continue  # stale_files has said that it is missing or unreadable
        if not name or file_digest(data) != digest:
            continue
        listed = _from_yml(p for p in lock.packages if p.platform == platform)
        reasons += _differences(platform, name, listed, explicit_entries(text))
    return lock, reasons


def _from_yml(packages: Iterable[LockedPackage]) -> Listed:
    out: Listed = {}
    for p in packages:
        digest = (p.md5 or f"sha256:{p.sha256}") if p.manager == "conda" else f"{p.sha256}"
        out[(p.manager, conda_key(p.filename) if p.manager == "conda" else p.name)] = (
            p.url,
            digest,
        )
    return out


def _differences(platform: str, name: str, yml: Listed, explicit: Listed) -> list[str]:
    out = []
    for key in sorted(yml.keys() | explicit.keys()):
        manager, package = key
        if key not in explicit:
            out.append(
                f"{platform}: {manager} package {package} ({yml[key][0]}) is in conda-lock.yml "
                f"but not in {name} (added by hand?)"
            )
        elif key not in yml:
            out.append(
                f"{platform}: {manager} package {package} is in {name} but not in "
                "conda-lock.yml (removed by hand?)"
            )
        elif yml[key] != explicit[key]:
            out.append(
                f"{platform}: {manager} package {package} has another URL or hash in "
                f"conda-lock.yml ({yml[key][0]}) than in {name} ({explicit[key][0]}) "
                "(changed by hand?)"
            )
    return [safe_text(line) for line in out]


# --------------------------------------------------------------------------------------------
# --resolve


def resolve_differences(request: LockRequest, lock: LockFile) -> list[str]:
    """Solve ``request`` again, every locked version and build a constraint (so a genuine lock
    comes back unchanged even when the channels have newer packages, and a package nothing
    requires is not brought back), and list every difference from ``lock``: a package added,
    missing, or with another version, build, URL or hash. py-rattler solves the conda part, uv
    the pip part, as ``lock`` does."""
    from envfactory.errors import ToolError
    from envfactory.solve import rattler_adapter

    out: list[str] = []
    for platform in request.platforms:
        locked = [p for p in lock.packages if p.platform == platform]
        conda = [p for p in locked if p.manager == "conda"]
        pins = [f"{p.name}=={p.version}={p.build}" for p in conda]
        inputs = request.inputs[platform]
        try:
            fresh = rattler_adapter.solve(
                list(inputs.conda),
                list(inputs.channel_urls),
                platform,
                dict(inputs.virtual_packages),
                constraints=[*inputs.conda_constraints, *pins],
            )
        except rattler_adapter.Unsatisfiable as exc:
            first = str(exc).strip().splitlines()[:6]
            out.append(
                f"{platform}: the conda specs do not solve to the locked versions: "
                + " / ".join(line.strip() for line in first)
            )
            continue
        fresh = [_public(p) for p in fresh]
        try:
            fresh += _pip_again(request, platform, fresh, locked)
        except ToolError as exc:
            out.append(f"{platform}: the pip requirements do not resolve to the locked "
                       f"versions: {exc.message.splitlines()[0]}")  # fmt: skip
        out += compare(platform, locked, fresh)
    return [safe_text(line) for line in out]


def _public(pkg: LockedPackage) -> LockedPackage:
    return pkg._replace(url=redact_url(pkg.url), channel=redact_url(pkg.channel))


def _pip_again(
    request: LockRequest,
    platform: Platform,
    conda: Sequence[LockedPackage],
    locked: Sequence[LockedPackage],
) -> list[LockedPackage]:
    from envfactory.solve import pypi

    @dataclasses.dataclass(frozen=True)
    class PinnedTarget(pypi.PipTarget):
        """A pip resolution with every locked version as a constraint."""

        pins: tuple[str, ...] = ()

        def constraint_lines(self) -> list[str]:
            return [*super().constraint_lines(), *self.pins]

    base = pip_target(request, platform, conda)
    if base is None:
        return []
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    pins = tuple(f"{p.name}=={p.version}" for p in locked if p.manager == "pip")
    target = PinnedTarget(**fields, pins=pins)
    pypi.uv_binary()
    return [_public(p) for p in pypi.lock_target(target)]


def _identity(pkg: LockedPackage) -> tuple[str, ...]:
    if pkg.manager == "conda":
        return (pkg.version, pkg.build, pkg.url, pkg.md5 or "", pkg.sha256 or "")
    return (pkg.version, pkg.url, pkg.sha256 or "")


def compare(
    platform: str, locked: Sequence[LockedPackage], fresh: Sequence[LockedPackage]
) -> list[str]:
    """``+`` what the solve gives and the lock lacks, ``-`` what the lock has and the solve
    does not give, ``~`` the same package with another version, build, URL or hash."""
    mine = {(p.manager, p.name.lower()): p for p in locked}
    theirs = {(p.manager, p.name.lower()): p for p in fresh}
    out = []
    for key in sorted(mine.keys() | theirs.keys()):
        a, b = mine.get(key), theirs.get(key)
        if a is None and b is not None:
            out.append(f"{platform}: + {_show(b)} (the solve gives it; the lock lacks it)")
        elif b is None and a is not None:
            out.append(f"{platform}: - {_show(a)} (in the lock; the solve does not give it)")
        elif a is not None and b is not None and _identity(a) != _identity(b):
            changed = [
                f"{field} {x} -> {y}"
                for field, x, y in zip(
                    ("version", "build", "url", "md5", "sha256")
                    if a.manager == "conda"
                    else ("version", "url", "sha256"),
                    _identity(a),
                    _identity(b),
                    strict=True,
                )
                if x != y
            ]
            out.append(f"{platform}: ~ {a.manager} {a.name}: {'; '.join(changed)} "
                       "(the lock's, then the solve's)")  # fmt: skip
    return out


def _show(pkg: LockedPackage) -> str:
    what = f"{pkg.version} {pkg.build}" if pkg.manager == "conda" else pkg.version
    return f"{pkg.manager} {pkg.name} {what} ({pkg.url})"


# --------------------------------------------------------------------------------------------
# --check: no solve, only the recorded inputs against the current ones.


@dataclass(frozen=True)
class CheckResult:
    fresh: bool
    reasons: tuple[str, ...]


def check_lock(request: LockRequest, directory: Path, *, resolve: bool = False) -> CheckResult:
    """Whether the lock in ``directory`` is the lock of ``request`` as it is now: the recorded
    inputs against the current ones, every file of the set against the digest conda-lock.yml
    recorded for it, and the package list against what a lock run writes (``lockreview``:
    nothing unrequired, the same packages as the explicit files). ``resolve``: also solve again
    against the locked versions and report any difference (``lockreview.resolve_differences``).
    conda-lock is never imported."""
    path = directory / LOCK_FILE
    if not path.is_file():
        return CheckResult(False, (f"{path} does not exist",))
    header = read_lock_header(path)
    meta = header.metadata
    reasons: list[str] = []
    if header.platforms != request.platforms:
        reasons.append(
            f"the lock covers {', '.join(header.platforms)}, "
            f"the request {', '.join(request.platforms)}"
        )
    # the current inputs in the form the lock records them (PlatformInputs.record)
    current_inputs = request.records()
    for platform in request.platforms:
        recorded = meta.inputs.get(platform)
        if recorded is None:
            reasons.append(f"{platform}: the lock records no envfactory inputs")
            continue
        current = current_inputs[platform]
        if recorded != current:
            reasons += [
                f"{platform}: {key} changed: {_change(recorded.get(key), current.get(key))}"
                for key in sorted(set(recorded) | set(current))
                if recorded.get(key) != current.get(key)
            ]
        if meta.files and explicit_name(platform) not in meta.files:
            reasons.append(f"{platform}: the lock records no {explicit_name(platform)}")
    if not meta.files:
        reasons.append(
            "the lock records no digests of its other files (written by envfactory 0.1), so "
            "a mixed set cannot be told from a whole one"
        )
    reasons += stale_files(directory, meta.files)
    if not reasons and meta.inputs_sha256 != inputs_hash(current_inputs):
        reasons.append("the recorded inputs hash does not match the inputs")
    listed = meta.packages_sha256 is not None and header.packages_digest == meta.packages_sha256
    if listed and not resolve:
        # the package list is the one the lock was written with (a forger who recomputes the
        # digest is caught by --resolve): no need to parse it
        return CheckResult(not reasons, tuple(reasons))
    explicit = {
        p: (explicit_name(p), meta.files[explicit_name(p)])
        for p in request.platforms
        if explicit_name(p) in meta.files
    }
    lock, edits = hand_edits(path, header, directory, explicit)
    if not listed and not edits:
        edits = [
            "the package list is not the one this lock was written with (edited by hand?)"
            if meta.packages_sha256
            else "the lock records no digest of its package list (made by an older envfactory)"
        ]
    reasons += edits
    if resolve and not reasons:
        reasons += resolve_differences(request, lock)
    return CheckResult(not reasons, tuple(reasons))


# --------------------------------------------------------------------------------------------
# --check on a stale lock: what a re-lock would change.


@dataclass(frozen=True)
class RelockPreview:
    """What ``lock`` would change if run now (a sticky solve that writes nothing), or why that
    cannot be shown: ``change`` or ``unavailable`` (with its ``hint``) is set."""

    change: LockDiff | None = None
    unavailable: str | None = None
    hint: str | None = None


def relock_preview(
    request: LockRequest, directory: Path, progress: Progress | None = None
) -> RelockPreview | None:
    """``lock --check`` on a stale lock: solve as ``lock`` would (the lock's packages
    preferred, nothing written) and compare, as ``lock`` does. None when there is no lock to
    compare with (``lock`` prints no change either). A solve that fails (channels or pip index
    out of reach, no solution) is said, never raised: the check's reasons stand without it."""
    from envfactory.errors import EnvfactoryError
    from envfactory.solve import relock
    from envfactory.solve.lock import lock_combo

    previous = relock.previous_lock(directory / LOCK_FILE)
    if previous.unreadable:
        return RelockPreview(unavailable=f"the lock cannot be read: {previous.unreadable}")
    if not previous.packages:
        return None
    if request.solver == "conda-lock":
        return RelockPreview(
            unavailable="--solver conda-lock re-locks only from scratch (--update-all), which "
            "this check does not run",
            hint="see what the default solver, which keeps the lock, would change: "
            f"envfactory lock {request.name} --dry-run (without --solver conda-lock)",
        )
    if progress is not None:
        progress(f"solving {request.name} (dry run) to show what a re-lock would change")
    try:
        result = lock_combo(request, directory, prefer=relock.preferred(previous, []), write=False)
    except EnvfactoryError as exc:
        return RelockPreview(unavailable=safe_text(exc.message), hint=exc.hint)
    change = relock.change_of(previous, "new lock", result.packages, request.records())
    return RelockPreview(change=change)


def _change(old: object, new: object) -> str:
    """``-removed +added`` for lists of specs (the common case: one pin or addition edited),
    else ``old -> new``."""
    if (
        isinstance(old, list)
        and isinstance(new, list)
        and all(isinstance(v, str) for v in (*old, *new))
    ):
        gone = [f"-{v}" for v in old if v not in new]
        came = [f"+{v}" for v in new if v not in old]
        if gone or came:
            return " ".join(gone + came)
    return f"{_short(old)} -> {_short(new)}"


def _short(value: object) -> str:
    if isinstance(value, list) and value and isinstance(value[0], str):
        return " ".join(value)
    return json.dumps(value, sort_keys=True)
