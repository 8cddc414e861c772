"""Reading a conda-lock file (``conda-lock.yml``, format version 1, or conda-lock's internal
version 2) without conda-lock.

conda-lock's models still write the lock (``condalock_adapter.render_lock``); this module reads
it back for ``create``, ``verify``, ``mirror``, ``kernel`` and ``audit``. Importing conda-lock's
reader costs ~0.5 s and its pydantic validation another ~0.3 ms per package, which made a warm
``create`` several times slower than installing the same packages (benchmarks/bench_create.py).
py-rattler's reader
(``rattler.LockFile``) is no substitute: it refuses envfactory's own locks (their
``custom_metadata``) and normalizes URLs (``<TOKEN>`` becomes ``%3CTOKEN%3E``, ``%2e%2e``
segments are resolved away), so the checks below would no longer see what the file says.

The document is read by ``yamlio.load_plain`` (libyaml, bounded), then held to the shape
conda-lock's pydantic models accept (``conda_lock.lockfile.v1.models`` ``Lockfile``: the same
required fields, types, forbidden extra keys, and "conda package hashes must use MD5"),
merged as ``lockfile_v1_to_v2`` merges it and ordered as its ``toposort_inplace`` orders it.
tests/test_lockfile.py compares the result with conda-lock's own reading, field by field, on
real third-party locks and on fuzzed ones. Two deliberate differences: a package listed twice
for one category, or listed again with another URL or hash, is refused (conda-lock fails with an
``AssertionError``, or keeps the first silently), and a channel URL is kept as written (conda-lock
swaps credentials that equal an environment variable's value for ``${VARIABLE}``).

Then every string that reaches a file name, a download, pip's requirements file or conda's state
file is validated (``_validated``, with ``envfactory.untrusted``). Whatever is wrong is a
``UserInputError`` naming the file and the entry.

Every reader of a lock (``create``, ``update``, ``verify``, ``mirror``, ``kernel``, ``diff``,
``audit``, ``lock --check``) gets a ``LockFile`` (``models.py``) whose ``metadata``, envfactory's
record, was parsed here, once; ``write.py`` writes what this module reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast
from urllib.parse import unquote

from envfactory.catalog.platforms import Platform
from envfactory.errors import UserInputError
from envfactory.lockfile.models import LOCK_HINT, LockedPackage, LockFile, dependency_name
from envfactory.lockfile.record import LockMetadata


def read_lock(path: Path, memo: Path | None = None, *, text: str | None = None) -> LockFile:
    """Read a conda-lock file (v1 or v2), its YAML bounded (``yamlio.load_plain``), and
    validate every string that later reaches a file name, a download, pip's requirements file or
    conda's state file (``_validated``). ``memo``: a directory where the parsed document is kept
    by the sha256 of the file's text (``load_document``); the checks below run every time.
    ``text``: the file's text as the caller has read it already (``lock --check``)."""
    content = load_document(path, memo) if text is None else _parse_yaml(path, text)
    version = content.pop("version", None)
    if version == 1 and not isinstance(version, bool):
        fmt = 1
    elif version == 2 and not isinstance(version, bool):
        fmt = 2
    else:
        raise UserInputError(
            f"{path} is not a conda-lock file of version 1 or 2 (version: {version!r})",
            LOCK_HINT,
        )
    try:
        lock = parse_document(content, fmt)
    except Invalid as exc:
        raise UserInputError(f"{path} is not a conda-lock file: {exc}", LOCK_HINT) from None
    return _validated(lock, path)


def read_lock_for_review(path: Path, header: LockHeader) -> tuple[LockFile, list[LockedPackage]]:
    """``read_lock`` for ``lock --check``, which reports rather than refuses: the lock, and the
    packages no recorded spec reaches (``unreachable``), which ``read_lock`` refuses. The text
    is the one ``header`` was read from: the check judges one version of the file."""
    try:
        return read_lock(path, text=header.text), []
    except Unreachable as exc:
        return exc.lock, exc.stray


MEMO_FORMAT = 2  # 2: read by yamlio (YAML 1.1 and 1.2 agree), 1: by PyYAML (YAML 1.1)
MEMO_KEEP = 64  # documents kept in a memo directory; the least recently used go first


def load_document(path: Path, memo: Path | None = None) -> dict[Any, Any]:
    """The YAML mapping of ``path``, read by ``yamlio.load_plain`` (libyaml, bounded, typed by
    yamlio's one rule: as conda-lock's own PyYAML reading types whatever conda-lock writes).

    With ``memo``, the document is first looked up there as JSON by the sha256 of the text
    (``<sha256>-<MEMO_FORMAT>.json``) and, when it is not, kept there after reading, if JSON
    holds it exactly (no NaN, no non-string keys). A warm ``create`` then skips importing
    PyYAML and parsing (~40 ms of a 72 KB lock; benchmarks/bench_create.py). The text is read
    every time, so an edited lock is a new key; the memo directory is as trusted as the package
    cache it lives in."""
    from envfactory.fsio import read_text

    try:
        text = read_text(path, "the lockfile", LOCK_HINT)
    except FileNotFoundError:
        raise UserInputError(
            f"no lockfile at {path}", "run 'envfactory lock COMBO' first, or pass the path"
        ) from None
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror}", LOCK_HINT) from None
    if memo is None:
        return _parse_yaml(path, text)
    import hashlib

    key = f"{hashlib.sha256(text.encode('utf-8')).hexdigest()}-{MEMO_FORMAT}.json"
    kept = _recall(memo / key)
    if kept is not None:
        return kept
    content = _parse_yaml(path, text)
    _remember(memo, key, content)
    return content


def _parse_yaml(path: Path, text: str) -> dict[Any, Any]:
    from envfactory.yamlio import load_plain

    content = load_plain(str(path), text, LOCK_HINT)
    if content is None:
        raise UserInputError(f"{path} is empty", LOCK_HINT)
    if not isinstance(content, dict):
        raise UserInputError(
            f"{path} is not a conda-lock file (the top level is a {type(content).__name__}, "
            "not a mapping)",
            LOCK_HINT,
        )
    return content


def _recall(kept: Path) -> dict[Any, Any] | None:
    """The document kept at ``kept``, if this user's own: a memo another user could have
    written (or could write: group/other write bits, or a directory in that state) is not
    read, whatever the cache's directory checks say later (a planted parsed lock once made a
    genuine lock install a planted sdist; docs/security.md)."""
    import json
    import os
    import stat

    from envfactory.host import owned_privately

    try:
        st, folder = kept.lstat(), kept.parent.stat()
        if not (stat.S_ISREG(st.st_mode) and owned_privately(st) and owned_privately(folder)):
            return None
        content = json.loads(kept.read_bytes())
        os.utime(kept)  # recently used: kept longer
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def _remember(memo: Path, key: str, content: dict[Any, Any]) -> None:
    """Keep ``content`` as ``memo/key`` when JSON gives it back exactly; drop the least
    recently used beyond ``MEMO_KEEP``. A memo that cannot be written is gone without."""
    import json

    from envfactory.fsio import write_cached

    try:
        data = json.dumps(content, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return  # a date or a set, say: not JSON
    if json.loads(data) != content:
        return  # non-string keys would come back as strings
    if not write_cached(memo / key, data):
        return
    try:
        kept = sorted(memo.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in kept[MEMO_KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # another create pruned it meanwhile


# --------------------------------------------------------------------------------------------
# The shape conda-lock's models accept (pydantic v2, lax mode, extra keys forbidden).


class Invalid(Exception):
    """Where the document differs from conda-lock's models, and how (pydantic's wording)."""

    def __init__(self, loc: Sequence[object], msg: str) -> None:
        super().__init__(f"{'.'.join(str(p) for p in loc) or 'top level'}: {msg}")


class Dependency(NamedTuple):
    """One entry of the lock's package list, as conda-lock's v2 ``LockedDependency`` holds it."""

    name: str
    version: str
    manager: str
    platform: str
    dependencies: Mapping[str, str]
    url: str
    md5: str | None
    sha256: str | None
    build: str | None
    categories: frozenset[str]
    source_url: str | None = None


class Document(NamedTuple):
    """A lock as conda-lock's v2 ``Lockfile`` holds it after ``toposort_inplace``."""

    package: tuple[Dependency, ...]
    platforms: tuple[str, ...]
    channels: tuple[str, ...]
    content_hash: Mapping[str, str]
    sources: tuple[str, ...]
    custom_metadata: Mapping[str, str] | None


def _string(value: object, loc: Sequence[object]) -> str:
    if not isinstance(value, str):
        raise Invalid(loc, "Input should be a valid string")
    return value


def _optional_string(value: object, loc: Sequence[object]) -> str | None:
    return None if value is None else _string(value, loc)


def _mapping(value: object, loc: Sequence[object], what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise Invalid(loc, f"Input should be a valid {what}")
    return value


def _strings(value: object, loc: Sequence[object]) -> list[str]:
    if not isinstance(value, list | tuple | set | frozenset):
        raise Invalid(loc, "Input should be a valid list")
    return [_string(v, (*loc, i)) for i, v in enumerate(value)]


def _string_map(value: object, loc: Sequence[object]) -> dict[str, str]:
    out = {}
    for key, item in _mapping(value, loc, "dictionary").items():
        out[_string(key, (*loc, f"{key}", "[key]"))] = _string(item, (*loc, key))
    return out


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _boolean(value: object, loc: Sequence[object]) -> bool:
    """pydantic's lax bool: a bool, 0/1, or one of its true/false words."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise Invalid(loc, "Input should be a valid boolean")


def _fields(
    value: object,
    loc: Sequence[object],
    required: Sequence[str],
    optional: Sequence[str],
    model: str,
    *,
    extra: bool = False,
) -> dict[str, Any]:
    """The fields of a model given as a mapping: required ones present, no others (unless
    ``extra``, for conda-lock's ``Channel``, which ignores them)."""
    fields = _mapping(value, loc, f"dictionary or instance of {model}")
    for name in required:
        if name not in fields:
            raise Invalid((*loc, name), "Field required")
    if not extra:
        for name in fields:
            if name not in required and name not in optional:
                raise Invalid((*loc, f"{name}"), "Extra inputs are not permitted")
    return fields


def _dependency(value: object, loc: Sequence[object], fmt: int) -> tuple[Dependency, str | None]:
    """One package entry, and its v1 ``category`` (None in a v2 document)."""
    base = ("name", "version", "manager", "platform", "url", "hash")
    more = ("dependencies", "source", "build")
    if fmt == 1:
        fields = _fields(value, loc, (*base, "optional"), (*more, "category"), "LockedDependency")
    else:
        fields = _fields(value, loc, base, (*more, "categories"), "LockedDependency")
    name = _string(fields["name"], (*loc, "name"))
    version = _string(fields["version"], (*loc, "version"))
    manager = fields["manager"]
    if manager not in ("conda", "pip") or not isinstance(manager, str):
        raise Invalid((*loc, "manager"), "Input should be 'conda' or 'pip'")
    platform = _string(fields["platform"], (*loc, "platform"))
    dependencies = _string_map(fields.get("dependencies", {}), (*loc, "dependencies"))
    url = _string(fields["url"], (*loc, "url"))
    if not url:
        raise Invalid((*loc, "url"), "Value error, URL cannot be empty")
    hashes = _fields(fields["hash"], (*loc, "hash"), (), ("md5", "sha256"), "HashModel")
    md5 = _optional_string(hashes.get("md5"), (*loc, "hash", "md5"))
    sha256 = _optional_string(hashes.get("sha256"), (*loc, "hash", "sha256"))
    if manager == "conda" and md5 is None:
        raise Invalid((*loc, "hash"), "Value error, conda package hashes must use MD5")
    source_url = None
    if fields.get("source") is not None:
        src = _fields(fields["source"], (*loc, "source"), ("type", "url"), (), "DependencySource")
        if src["type"] != "url" or not isinstance(src["type"], str):
            raise Invalid((*loc, "source", "type"), "Input should be 'url'")
        source_url = _string(src["url"], (*loc, "source", "url"))
    build = _optional_string(fields.get("build"), (*loc, "build"))
    category: str | None = None
    categories: frozenset[str] = frozenset()
    if fmt == 1:
        category = _string(fields.get("category", "main"), (*loc, "category"))
        _boolean(fields["optional"], (*loc, "optional"))
    else:
        categories = frozenset(_strings(fields.get("categories", []), (*loc, "categories")))
    dep = Dependency(
        name, version, manager, platform, dependencies, url, md5, sha256, build, categories,
        source_url,
    )  # fmt: skip
    return dep, category


def _channel(value: object, loc: Sequence[object]) -> str:
    if isinstance(value, str):
        return value  # conda-lock's Channel.from_string (see the module's docstring)
    fields = _fields(value, loc, ("url", "used_env_vars"), (), "Channel", extra=True)
    _strings(fields["used_env_vars"], (*loc, "used_env_vars"))
    return _string(fields["url"], (*loc, "url"))


def _metadata(value: object) -> dict[str, Any]:
    loc = ("metadata",)
    required = ("content_hash", "channels", "platforms", "sources")
    optional = ("time_metadata", "git_metadata", "inputs_metadata", "custom_metadata")
    fields = _fields(value, loc, required, optional, "LockMeta")
    out: dict[str, Any] = {
        "content_hash": _string_map(fields["content_hash"], (*loc, "content_hash")),
        "platforms": _strings(fields["platforms"], (*loc, "platforms")),
        "sources": _strings(fields["sources"], (*loc, "sources")),
    }
    channels = fields["channels"]
    if not isinstance(channels, list | tuple | set | frozenset):
        raise Invalid((*loc, "channels"), "Input should be a valid list")
    out["channels"] = [_channel(c, (*loc, "channels", i)) for i, c in enumerate(channels)]
    if fields.get("time_metadata") is not None:
        where = (*loc, "time_metadata")
        time = _fields(fields["time_metadata"], where, ("created_at",), (), "TimeMeta")
        _string(time["created_at"], (*where, "created_at"))
    if fields.get("git_metadata") is not None:
        where = (*loc, "git_metadata")
        keys = ("git_user_name", "git_user_email", "git_sha")
        git = _fields(fields["git_metadata"], where, (), keys, "GitMeta")
        for key in keys:
            _optional_string(git.get(key), (*where, key))
    if fields.get("inputs_metadata") is not None:
        where = (*loc, "inputs_metadata")
        for key, item in _mapping(fields["inputs_metadata"], where, "dictionary").items():
            _string(key, (*where, f"{key}", "[key]"))
            inputs = _fields(item, (*where, key), ("md5", "sha256"), (), "InputMeta")
            for name in ("md5", "sha256"):
                _optional_string(inputs[name], (*where, key, name))
    custom = fields.get("custom_metadata")
    out["custom_metadata"] = (
        None if custom is None else _string_map(custom, (*loc, "custom_metadata"))
    )
    return out


def parse_document(content: Mapping[Any, Any], fmt: int) -> Document:
    """``content`` (the top-level mapping, ``version`` removed) as conda-lock's models read a
    document of format ``fmt``: validated, its v1 per-category entries merged into one per
    (manager, name, platform), and sorted as ``Lockfile.toposort_inplace`` sorts it."""
    fields = _fields(content, (), ("package", "metadata"), (), "Lockfile")
    entries = fields["package"]
    if not isinstance(entries, list | tuple):
        raise Invalid(("package",), "Input should be a valid list")
    parsed = [_dependency(entry, ("package", i), fmt) for i, entry in enumerate(entries)]
    meta = _metadata(fields["metadata"])
    merged: dict[tuple[str, str, str], tuple[Dependency, set[str]]] = {}
    for index, (dep, category) in enumerate(parsed):
        key = (dep.manager, dep.name, dep.platform)
        if key not in merged:
            merged[key] = (dep, set() if category is None else {category})
            continue
        first, categories = merged[key]
        if category is None or category in categories:
            raise Invalid(
                ("package", index),
                f"{dep.manager} package {dep.name!r} for {dep.platform} is listed twice"
                + ("" if category is None else f" in category {category!r}"),
            )
        if (first.url, first.md5, first.sha256) != (dep.url, dep.md5, dep.sha256):
            raise Invalid(
                ("package", index),
                f"{dep.manager} package {dep.name!r} for {dep.platform} is listed again, "
                "with another url or hash",
            )
        categories.add(category)
    package = [dep if not extra else _with_categories(dep, extra) for dep, extra in merged.values()]
    return Document(
        package=tuple(_toposorted(package)),
        platforms=tuple(meta["platforms"]),
        channels=tuple(meta["channels"]),
        content_hash=meta["content_hash"],
        sources=tuple(meta["sources"]),
        custom_metadata=meta["custom_metadata"],
    )


def _with_categories(dep: Dependency, categories: set[str]) -> Dependency:
    return dep._replace(categories=frozenset(categories))


def _toposorted(package: Sequence[Dependency]) -> list[Dependency]:
    """conda-lock's ``Lockfile._toposort``: per platform (sorted), the conda packages then the
    pip ones, each in conda's topological order."""
    out: list[Dependency] = []
    for platform in sorted({d.platform for d in package}):
        for manager in ("conda", "pip"):
            lookup: dict[str, set[str]] = {}
            packages: dict[str, Dependency] = {}
            for d in package:
                if d.platform == platform and d.manager == manager:
                    lookup[d.name] = set(d.dependencies)
                    packages[d.name] = d
            out += [packages[name] for name in toposort(lookup) if name in packages]
    return out


def toposort(data: Mapping[str, set[str]]) -> list[str]:
    """conda's ``toposort(data, safe=True)`` (conda/common/toposort.py, BSD-3-Clause, as
    vendored by conda-lock): names in dependency order, ties alphabetical; a cycle is broken at
    the name with the fewest dependencies left (ties alphabetical), and ``python`` never waits
    for ``pip``.

    conda's version rescans every remaining name on each round, so a chain of n packages costs
    n**2 steps (a 16,000-package lock took over a minute). The same rounds here:
    each name counts its unmet dependencies and knows its dependants, so a round visits only
    the names it releases; a heap of (unmet count, name) finds where to break a cycle."""
    import heapq

    graph = {k: set(v) for k, v in data.items()}
    if "python" in graph:
        graph["python"].discard("pip")
    for name, deps in graph.items():
        deps.discard(name)
    for item in {d for deps in graph.values() for d in deps} - graph.keys():
        graph[item] = set()
    unmet = {name: len(deps) for name, deps in graph.items()}
    dependants: dict[str, list[str]] = {name: [] for name in graph}
    for name, deps in graph.items():
        for dep in deps:
            dependants[dep].append(name)
    fewest = [(count, name) for name, count in unmet.items()]
    heapq.heapify(fewest)
    out: list[str] = []
    ready = sorted(name for name, count in unmet.items() if count == 0)
    while unmet:
        if not ready:
            # a cycle: conda's _safe_toposort pops the name with the fewest dependencies left
            while True:
                count, name = heapq.heappop(fewest)
                if unmet.get(name) == count:
                    break
            ready = [name]
        released = []
        for name in ready:
            out.append(name)
            del unmet[name]
        for name in ready:
            for dependant in dependants[name]:
                if dependant in unmet:
                    unmet[dependant] -= 1
                    heapq.heappush(fewest, (unmet[dependant], dependant))
                    if unmet[dependant] == 0:
                        released.append(dependant)
        ready = sorted(released)
    return out


# --------------------------------------------------------------------------------------------
# What envfactory requires beyond conda-lock: every string safe where it goes.


def _validated(lock: Document, path: Path) -> LockFile:
    from envfactory import untrusted

    for platform in lock.platforms:
        if platform not in untrusted.KNOWN_SUBDIRS or platform == "noarch":
            raise UserInputError(f"{path}: unknown platform {platform!r}", LOCK_HINT)
    for channel in lock.channels:
        problem = untrusted.channel_problem(channel)
        if problem:
            raise UserInputError(f"{path}: channel {channel!r}: {problem}", LOCK_HINT)
    meta = _record(lock.custom_metadata, str(path))
    packages = []
    for index, dep in enumerate(lock.package):
        pkg = _package(dep)
        problem = _package_problem(pkg, lock.platforms)
        if problem:
            raise UserInputError(
                f"{path}: package {index + 1} ({pkg.manager} {pkg.name!r} {pkg.platform}): "
                f"{problem}",
                LOCK_HINT,
            )
        packages.append(pkg)
    collision = case_collision(packages)
    if collision:
        raise UserInputError(f"{path}: {collision}", LOCK_HINT)
    contents = LockFile(
        packages=tuple(packages),
        platforms=tuple(cast(Platform, p) for p in lock.platforms),
        channels=lock.channels,
        content_hash=dict(lock.content_hash),
        metadata=meta,
    )
    # a lock made before envfactory recorded pip dependencies (no packages_sha256, no pip
    # package with any) has none: its pip packages count as required (lock --check calls such
    # a lock stale, and create builds no sdist it has not vetted)
    edges = bool(meta.packages_sha256) or any(p.depends for p in packages if p.manager == "pip")
    stray = unreachable(packages, meta.inputs, str(path), pip_edges=edges)
    if stray:
        raise Unreachable(f"{path}: {describe_unreachable(stray)}", contents, stray)
    return contents


class Unreachable(UserInputError):
    """A lock names packages that none of its recorded specs requires."""

    def __init__(self, message: str, lock: LockFile, stray: list[LockedPackage]) -> None:
        super().__init__(
            message,
            "a package nothing requires was added to the lock by hand (an sdist there would "
            "run its build backend at create); " + LOCK_HINT,
        )
        self.lock = lock
        self.stray = stray


def _package(dep: Dependency) -> LockedPackage:
    subdir = dep.url.rsplit("/", 2)[-2] if dep.manager == "conda" and "/" in dep.url else ""
    depends = tuple(f"{k} {v}".strip() for k, v in sorted(dep.dependencies.items()))
    return LockedPackage(
        manager=cast(Any, dep.manager),
        name=dep.name,
        version=dep.version,
        platform=cast(Platform, dep.platform),
        url=dep.url,
        build=dep.build or _build_from_url(dep.url, dep.manager),
        subdir=subdir,
        channel=dep.url.rsplit("/", 2)[0] if dep.manager == "conda" else "",
        md5=dep.md5,
        sha256=dep.sha256,
        depends=depends,
    )


def _package_problem(pkg: LockedPackage, platforms: Sequence[str]) -> str | None:
    """What makes a locked package unsafe to download, name a file after, or hand to pip."""
    from envfactory import untrusted as u

    if pkg.platform not in platforms:
        return f"its platform is not one of the lock's ({', '.join(platforms)})"
    problem = u.url_problem(pkg.url)
    if problem:
        return f"url {pkg.url!r}: {problem}"
    if pkg.md5 is not None and not u.MD5.fullmatch(pkg.md5):
        return f"md5 {pkg.md5!r} is not 32 lowercase hex digits"
    if pkg.sha256 is not None and not u.SHA256.fullmatch(pkg.sha256):
        return f"sha256 {pkg.sha256!r} is not 64 lowercase hex digits"
    for dep in pkg.depends:
        if not dep.isprintable():
            return f"dependency {dep!r} contains a control character"
    if pkg.manager == "pip":
        if not u.PIP_NAME.fullmatch(pkg.name):
            return "the name is not a PyPI project name"
        if not u.PIP_VERSION.fullmatch(pkg.version):
            return f"version {pkg.version!r} is not a pip version"
        if pkg.sha256 is None:
            return "it has no sha256, so the wheel could not be checked"
        return None
    if not u.CONDA_NAME.fullmatch(pkg.name):
        return "the name is not a conda package name (0-9, a-z, A-Z, '-', '_', '.')"
    if not u.CONDA_VERSION.fullmatch(pkg.version):
        return f"version {pkg.version!r} is not a conda version"
    if not u.CONDA_BUILD.fullmatch(pkg.build):
        return f"build {pkg.build!r} is not a conda build string (letters, digits, '_', '.', '+')"
    if "?" in pkg.url:
        return "a conda package URL has a query ('?'); the file name must end the URL"
    if pkg.subdir not in u.KNOWN_SUBDIRS:
        return f"the url's subdir {pkg.subdir!r} is not a conda platform"
    if pkg.subdir not in (pkg.platform, "noarch"):
        return f"the url's subdir {pkg.subdir!r} is neither {pkg.platform} nor noarch"
    stem = f"{pkg.name}-{pkg.version}-{pkg.build}"
    # conda-lock percent-encodes the epoch's '!' in URLs (x264-1%21164.3095-h8bd6ef3_1.tar.bz2)
    if unquote(pkg.filename) not in (f"{stem}.tar.bz2", f"{stem}.conda"):
        return f"the url's file name is not {stem}.tar.bz2 or {stem}.conda"
    return None


def _record(custom: Mapping[str, str] | None, where: str) -> LockMetadata:
    """envfactory's record in the lock, parsed once (``LockMetadata``: its JSON parses), then
    held to where its values go (``check_record``)."""
    meta = LockMetadata.from_custom_metadata(custom, where=where)
    check_record(meta, where)
    return meta


def _key(name: str) -> str:
    """One name for a conda package and the PyPI project it packages (PEP 503's rule)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def case_collision(packages: Sequence[LockedPackage]) -> str | None:
    """Two packages of one platform and manager whose names differ only in case (conda: rattler
    lower-cases names and panicked on ``Foo`` beside ``foo``) or, for pip, in PEP 503's
    normalization (``Foo_Bar`` and ``foo-bar`` are one project)."""
    seen: dict[tuple[str, str, str], str] = {}
    for pkg in packages:
        folded = pkg.name.lower() if pkg.manager == "conda" else _key(pkg.name)
        first = seen.setdefault((pkg.platform, pkg.manager, folded), pkg.name)
        if first != pkg.name:
            return (
                f"{pkg.manager} packages {first!r} and {pkg.name!r} for {pkg.platform} are one "
                f"name to {'conda' if pkg.manager == 'conda' else 'pip'} (names are compared "
                "case-insensitively), so the lock names the same package twice"
            )
    return None


def unreachable(
    packages: Sequence[LockedPackage],
    inputs: Mapping[Platform, Mapping[str, Any]],
    where: str,
    *,
    pip_edges: bool = True,
) -> list[LockedPackage]:
    """The packages no recorded spec reaches through the lock's own dependencies, per platform:
    the roots are the names of the conda specs and pip requirements envfactory recorded
    (``inputs``), the edges every package's ``dependencies`` (a conda package's ``depends``;
    for pip, the edges ``pipdeps`` recorded). A lock that records no inputs for a platform (a
    third party's conda-lock file) is not checked there; ``lock --check`` calls it stale.
    Without ``pip_edges`` (a lock older than the pip edges) every pip package is a root. One
    pass over packages and edges."""
    by_platform: dict[str, list[LockedPackage]] = {}
    for pkg in packages:
        by_platform.setdefault(pkg.platform, []).append(pkg)
    out: list[LockedPackage] = []
    for platform, members in by_platform.items():
        recorded = inputs.get(cast(Platform, platform))
        if recorded is None:
            continue
        roots = _root_names(recorded, where, platform)
        if not pip_edges:
            roots |= {_key(p.name) for p in members if p.manager == "pip"}
        edges: dict[str, list[str]] = {}
        for pkg in members:
            edges.setdefault(_key(pkg.name), []).extend(
                _key(dependency_name(d)) for d in pkg.depends
            )
        reached: set[str] = set()
        todo = [r for r in roots if r in edges]
        while todo:
            name = todo.pop()
            if name in reached:
                continue
            reached.add(name)
            todo += [d for d in edges.get(name, ()) if d not in reached]
        out += [p for p in members if _key(p.name) not in reached]
    return out


def _root_names(recorded: Mapping[str, Any], where: str, platform: str) -> set[str]:
    conda, pip = recorded.get("conda", []), recorded.get("pip", [])
    if not (isinstance(conda, list) and isinstance(pip, list)) or not all(
        isinstance(s, str) for s in (*conda, *pip)
    ):
        raise UserInputError(
            f"{where}: the recorded inputs for {platform} do not list the specs as strings",
            LOCK_HINT,
        )
    names = {_key(dependency_name(s.rsplit("::", 1)[-1])) for s in conda}
    names |= {_key(m.group(0)) for s in pip if (m := _PEP508_NAME.match(s.strip()))}
    return names


_PEP508_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def describe_package(pkg: LockedPackage) -> str:
    sdist = ", an sdist" if _sdist(pkg) else ""
    return f"{pkg.manager} package {pkg.name} {pkg.version} ({pkg.platform}{sdist})"


def describe_unreachable(stray: Sequence[LockedPackage]) -> str:
    """One line naming what nothing requires (the first five, then a count)."""
    shown = ", ".join(describe_package(p) for p in stray[:5])
    more = f" and {len(stray) - 5} more" if len(stray) > 5 else ""
    return (
        f"{shown}{more}: no spec the lock records reaches "
        f"{'it' if len(stray) == 1 else 'them'} through the lock's own dependencies"
    )


def _sdist(pkg: LockedPackage) -> bool:
    return pkg.manager == "pip" and not pkg.filename.endswith(".whl")


def _build_from_url(url: str, manager: str) -> str:
    """conda-lock's own files have no ``build`` key; the build is in the file name."""
    if manager != "conda":
        return ""
    stem = url.rsplit("/", 1)[-1].removesuffix(".tar.bz2").removesuffix(".conda")
    return stem.rsplit("-", 2)[-1]


# --------------------------------------------------------------------------------------------
# The metadata block alone: ``lock --check`` reads only it (libyaml, stopping before the package
# list) when the package list's digest shows the list is the one the lock was written with.


class LockHeader(NamedTuple):
    """The metadata block of a conda-lock.yml: its platforms and envfactory's record, and the
    ``file_digest`` of the text outside the block (``package_block``)."""

    platforms: tuple[str, ...]
    metadata: LockMetadata
    packages_digest: str | None = None
    #: the file's text, for the rest of the read when it is needed (``read_lock_for_review``)
    text: str = ""


def read_lock_header(path: Path) -> LockHeader:
    """Read ``path``'s ``metadata`` block only: the package list, most of the file, is never
    parsed (create, verify and mirror, which use it, validate it), and conda-lock (~0.5 s to
    import) is not imported. What is read is validated as ``read_lock`` validates it."""
    from envfactory import untrusted
    from envfactory.errors import CatalogError
    from envfactory.fsio import read_text
    from envfactory.lockfile.record import file_digest, package_block
    from envfactory.yamlio import load_yaml_keys

    where = str(path)
    try:
        text = read_text(path, "the lockfile", LOCK_HINT)
    except OSError as exc:
        raise UserInputError(f"cannot read {where}: {exc.strerror}", LOCK_HINT) from None
    if not text.strip():
        raise UserInputError(f"{where} is empty", LOCK_HINT)
    try:
        top = load_yaml_keys(where, text, ("metadata",), LOCK_HINT)
    except CatalogError as exc:
        raise UserInputError(exc.message, exc.hint) from None
    block = top.get("metadata") if top is not None else None
    if top is None or not isinstance(block, dict):
        raise UserInputError(
            f"{where} is not a conda-lock file: it has no 'metadata' mapping", LOCK_HINT
        )
    line = top.key_line("metadata")
    platforms = block.get("platforms")
    if not isinstance(platforms, list) or not all(isinstance(p, str) for p in platforms):
        raise UserInputError(
            f"{where}:{line}: metadata.platforms is not a list of names", LOCK_HINT
        )
    for platform in platforms:
        if platform not in untrusted.KNOWN_SUBDIRS or platform == "noarch":
            raise UserInputError(f"{where}: unknown platform {platform!r}", LOCK_HINT)
    custom = block.get("custom_metadata") or {}
    if not isinstance(custom, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in custom.items()
    ):
        raise UserInputError(
            f"{where}:{line}: metadata.custom_metadata does not map names to strings", LOCK_HINT
        )
    meta = _record(custom, where)
    block = package_block(text)
    digest = None if block is None else file_digest(block.encode("utf-8"))
    return LockHeader(tuple(platforms), meta, digest, text)


def check_record(meta: LockMetadata, where: str) -> None:
    """envfactory's record, held to where its values go: names are plain names, channel URLs
    are one-line http(s)/file URLs, and project variables can be carried by conda's activators
    (``untrusted.check_state_variables``, as the manifest reader does)."""
    from envfactory import untrusted

    for label, name in (("combo", meta.combo), ("environment", meta.environment)):
        if name is not None and not untrusted.PLAIN_NAME.fullmatch(name):
            raise UserInputError(
                f"{where}: the lock's {label} {name!r} is not a plain name", LOCK_HINT
            )
    for channel, url in meta.channels.items():
        problem = untrusted.channel_problem(url)
        if problem:
            raise UserInputError(
                f"{where}: the lock's channel {channel} ({url!r}): {problem}", LOCK_HINT
            )
    untrusted.check_state_variables(meta.variables, f"{where}: the lock's variables")


# --------------------------------------------------------------------------------------------
# The explicit files of a lock set (``write.explicit_text``), for ``lock --check``'s comparison
# with conda-lock.yml's package list.

# (manager, name) -> what identifies the file: URL and hashes
Listed = dict[tuple[str, str], tuple[str, str]]


def conda_key(filename: str) -> str:
    """The package name of a conda archive's file name (``name-version-build.conda``)."""
    stem = filename.removesuffix(".tar.bz2").removesuffix(".conda")
    return stem.rsplit("-", 2)[0]


def explicit_entries(text: str) -> Listed:
    """An explicit file as ``write.explicit_text`` writes it: ``URL#md5`` lines and
    ``# pip NAME @ URL#sha256=HASH`` comments."""
    out: Listed = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("# pip ") and " @ " in line:
            name, _, rest = line.removeprefix("# pip ").partition(" @ ")
            url, _, digest = rest.partition("#sha256=")
            out[("pip", name.strip())] = (url, digest)
        elif line and not line.startswith(("#", "@")):
            url, _, digest = line.partition("#")
            out[("conda", conda_key(url.rsplit("/", 1)[-1]))] = (url, digest)
    return out
