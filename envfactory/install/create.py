"""Create stage: build an environment from a lock, exactly as locked.

1. check the target: an existing prefix is replaced only with ``--force`` and only when it is a
   conda environment (a ``conda-meta/`` directory) that is neither the current directory nor
   one of its parents; pip URLs are one-line http(s)/file URLs;
2. bring every conda package into the shared package cache (``pkgcache``): the archive's
   sha256 (or md5) checked against the lock's while it is extracted, ``file://`` ones included
   (py-rattler 0.28's ``install`` checks no hash of a ``file://`` package), every ``paths.json``
   entry checked to stay inside the prefix and every file against its sha256 and size;
3. check the packages together (no file under another package's symlink), link them with
   py-rattler from the cache into a staging directory next to the prefix (the final prefix
   patched into the files), and check every installed file against ``paths.json``; then the
   pip files, fetched into the same cache and checked before anything was linked
   (``pipside``: sha256, each wheel's METADATA, vetted sdists built offline), installed as pip
   would install them into the environment's own interpreter (``wheelinstall``);
4. install the combo's activation scripts, and a project environment's variables into
   ``conda-meta/state`` (where conda and micromamba read ``env config vars``);
5. move the staging directory into place; a replaced environment is swapped out in one
   ``renameat2(RENAME_EXCHANGE)`` where Linux has it, and then removed.

Any failure or interrupt (SIGINT, SIGTERM, SIGHUP) waits for the threads that write into the
staging directory and removes it. A kill -9 cannot be caught: the staging directory carries a
marker whose ``flock`` dies with the process, and the next create next to the same prefix
removes it (``staging.sweep_stale``).

Files and directories get the modes the umask gives (0644/0755 under umask 022), the
``conda-meta`` records and activation scripts included.

An air-gapped machine creates from a mirror (``envfactory mirror``): ``channel_map`` points the
lock's channels elsewhere (the lock records which URL each channel name had) and ``wheel_dir``
is a local pip index (a folder of the locked files, or the mirror's PEP 503 index; found through
the mirror's marker when a channel is mapped to a mirror). The hashes checked are always the
lock's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NamedTuple

from envfactory import host, ownfiles
from envfactory.cache.pathcheck import OWN_RECORD, Linked, check_installed, check_links_across
from envfactory.cache.pkgcache import CacheProgress, PackageCache, saying_waits
from envfactory.cache.staging import INTERRUPTS, Staging, handling, sweep_stale
from envfactory.catalog.platforms import Platform, host_platform
from envfactory.errors import UserInputError
from envfactory.lockfile.models import LockedPackage, LockFile
from envfactory.lockfile.record import LockMetadata
from envfactory.progress import Progress, Transfer
from envfactory.solve.channels import ChannelMap
from envfactory.untrusted import PIP_NAME, SHA256, TOKEN_PLACEHOLDER, redact_url

if TYPE_CHECKING:
    from envfactory.install.pipside import Prepared

MARKER = OWN_RECORD  # conda-meta/envfactory.json: which lock built this prefix
_PIP_URL = re.compile(r"\A(?:https?|file)://[^\s\x00-\x1f\x7f]+\Z")


class CreateResult(NamedTuple):
    prefix: Path
    platform: Platform
    conda: int
    pip: int
    activation: tuple[Path, ...]
    activation_note: str | None
    replaced: Path | None = None  # the environment --force replaced
    from_cache: int = 0  # conda packages that were in the package cache already
    pip_downloaded: int = 0  # bytes of pip files downloaded (0 when all were cached)
    pip_cached: int = 0  # pip files that were in the package cache already
    built: tuple[str, ...] = ()  # sdists built into wheels

    @classmethod
    def of(
        cls,
        prefix: Path,
        platform: Platform,
        counts: tuple[int, int],
        activation: tuple[Path, ...],
        note: str | None,
        replaced: Path | None,
        from_cache: int,
        pip_files: Prepared | None,
    ) -> CreateResult:
        """The result of a create or an update: ``counts`` are its conda and pip packages; the
        pip files' figures come from what ``pipside.prepare`` did (none without wheels)."""
        return cls(
            prefix,
            platform,
            *counts,
            activation,
            note,
            replaced,
            from_cache,
            pip_files.downloaded if pip_files else 0,
            pip_files.cached if pip_files else 0,
            pip_files.built if pip_files else (),
        )


def relocate(
    packages: Sequence[LockedPackage],
    recorded_channels: dict[str, str],
    channel_map: ChannelMap | None,
    wheels: Path | None,
) -> list[LockedPackage]:
    """The packages with their URLs pointed at a mirror: a conda URL under the URL a channel
    had at lock time moves under the URL ``channel_map`` gives that channel name now; a wheel
    is taken from the local index ``wheels`` (``pipside.locate``). Names, versions and hashes
    stay the lock's."""
    out = []
    for pkg in packages:
        url = pkg.url
        if pkg.manager == "conda" and channel_map is not None:
            for name, old in recorded_channels.items():
                new = channel_map.overrides.get(name)
                if new and new != old and url.startswith(old.rstrip("/") + "/"):
                    url = new.rstrip("/") + url[len(old.rstrip("/")) :]
                    break
        elif pkg.manager == "pip" and wheels is not None:
            from envfactory.install.pipside import locate

            url = locate(wheels, pkg).resolve().as_uri()
        out.append(pkg._replace(url=url) if url != pkg.url else pkg)
    return out


def check_pip_packages(wheels: Sequence[LockedPackage]) -> None:
    """Each pip file's name, URL and sha256 as a lock may hold them: a package name, one
    http(s)/file URL without spaces or control characters, a sha256."""
    for pkg in wheels:
        if not PIP_NAME.fullmatch(pkg.name):
            raise UserInputError(
                f"the lock's pip package name {pkg.name!r} is not a package name",
                "the lock is damaged or crafted; re-lock it",
            )
        if not _PIP_URL.match(pkg.url):
            raise UserInputError(
                f"{pkg.describe()}: url {pkg.url!r} is not one http(s):// or file:// URL "
                "without spaces or control characters",
                "the lock is damaged or crafted; re-lock it",
            )
        if not pkg.sha256 or not SHA256.fullmatch(pkg.sha256):
            raise UserInputError(
                f"{pkg.describe()}: the lock has no valid sha256 for it",
                "every pip file is checked against it; re-lock it",
            )


def check_target(prefix: Path, force: bool) -> Path | None:
    """What creating at ``prefix`` replaces: None for a new or empty directory, the prefix for
    a conda environment under ``--force``; everything else is refused."""
    if prefix.is_symlink():
        raise UserInputError(
            f"{prefix} is a symbolic link", "pass the directory it points to, or another prefix"
        )
    if not prefix.exists():
        return None
    if not prefix.is_dir():
        raise UserInputError(f"{prefix} exists and is not a directory", "choose another prefix")
    if not any(prefix.iterdir()):
        return None
    if not force:
        raise UserInputError(
            f"{prefix} exists and is not empty",
            "choose another prefix, or pass --force to replace the conda environment there",
        )
    if not (prefix / "conda-meta").is_dir() or (prefix / "conda-meta").is_symlink():
        raise UserInputError(
            f"--force replaces only a conda environment; {prefix} has no conda-meta/ directory",
            "choose another prefix; envfactory never deletes a directory that is not an "
            "environment",
        )
    here = Path.cwd().resolve()
    real = prefix.resolve()
    if real == here or real in here.parents:
        raise UserInputError(
            f"--force would remove {prefix}, which holds the current directory",
            "run from outside the environment, or choose another prefix",
        )
    return prefix


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP during create: handled like Ctrl-C (clean up, exit 130)."""


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _to_the_end(work: Callable[[], None], meanwhile: Callable[[], None] | None = None) -> None:
    """Run ``work`` in a thread and wait for it even when interrupted, so nothing writes into
    a directory after the caller removed it; the interrupt is raised afterwards. ``meanwhile``
    runs in this thread while ``work`` does (rattler links without holding the GIL); when it
    fails, ``work`` is still waited for before its error is raised.

    The thread blocks SIGINT, SIGTERM and SIGHUP (rattler's threads, started from it, inherit
    that), so they reach this thread, whose handler raises. The end of ``work`` is an event the
    thread sets, not ``Thread.join()``/``is_alive()``: a signal that lands in ``join()`` makes
    CPython 3.11 mark the thread stopped while it still runs (python/cpython#90882)."""
    failure: list[BaseException] = []
    finished = threading.Event()

    def target() -> None:
        try:
            host.block_interrupts()
            work()
        except BaseException as exc:
            failure.append(exc)
        finally:
            finished.set()

    thread = threading.Thread(target=target, name="envfactory-link")
    interrupted: BaseException | None = None
    try:
        thread.start()  # waits until the thread runs: an interrupt can land here too
    except KeyboardInterrupt as exc:
        interrupted = exc
    if meanwhile is not None and interrupted is None:
        try:
            meanwhile()
        except BaseException as exc:
            interrupted = exc
    while not finished.is_set():
        try:
            finished.wait()
        except KeyboardInterrupt as exc:
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted
    if failure:
        raise failure[0]


class LockPackages(NamedTuple):
    conda: list[LockedPackage]  # relocated: where the cache fetches them from
    locked: list[LockedPackage]  # as the lock has them, without credentials: conda-meta's
    wheels: list[LockedPackage]  # the pip files, relocated and checked
    wheel_dir: Path | None  # the local pip index (given, or the mirror's)


def lock_packages(
    lock: LockFile,
    lock_path: Path,
    target_platform: Platform,
    channel_map: ChannelMap | None,
    wheel_dir: Path | None,
) -> LockPackages:
    """The lock's packages for ``target_platform`` as create links them, every check of the
    lock's own fields done (it is untrusted input)."""
    meta = lock.metadata
    if target_platform not in lock.platforms:
        raise UserInputError(
            f"{lock_path} has no packages for {target_platform} (it covers "
            f"{', '.join(lock.platforms)})",
            f"lock for this platform: envfactory lock COMBO --platform {target_platform}",
        )
    has_pip = any(p.platform == target_platform and p.manager == "pip" for p in lock.packages)
    if wheel_dir is None and channel_map is not None and has_pip:
        # mirror imports the pip side's readers (packaging): only when the lock has wheels
        from envfactory.install.mirror import pip_index_of

        wheel_dir = pip_index_of(channel_map)
    packages = relocate(
        [p for p in lock.packages if p.platform == target_platform],
        dict(meta.channels),
        channel_map,
        wheel_dir,
    )
    masked = next((p for p in packages if f"/t/{TOKEN_PLACEHOLDER}/" in p.url), None)
    if masked is not None:
        channel = next((n for n, u in meta.channels.items() if masked.url.startswith(u)), "NAME")
        raise UserInputError(
            f"{masked.describe()}: the lock's URL {masked.url} holds conda's "
            f"{TOKEN_PLACEHOLDER} placeholder: the channel wants a token the lock does not keep",
            f"give the channel with your token: --channel-map {channel}=URL, the URL with "
            f"/t/YOUR-TOKEN/ in place of /t/{TOKEN_PLACEHOLDER}/ (or ENVFACTORY_CHANNEL_MAP); "
            "see docs/security.md, 'Credentials'",
        )
    conda = [p for p in packages if p.manager == "conda"]
    # conda-meta records the lock's URLs, without credentials (world-readable files);
    # the cache was filled from the relocated ones
    locked = [
        p._replace(url=redact_url(p.url), channel=redact_url(p.channel))
        for p in lock.packages
        if p.platform == target_platform and p.manager == "conda"
    ]
    wheels = [p for p in packages if p.manager == "pip"]
    check_pip_packages(wheels)
    return LockPackages(conda, locked, wheels, wheel_dir)


def create_environment(
    lock_path: Path,
    prefix: Path,
    *,
    force: bool = False,
    platform: Platform | None = None,
    cache: PackageCache | None = None,
    progress: Progress | None = None,
    channel_map: ChannelMap | None = None,
    wheel_dir: Path | None = None,
    cache_progress: CacheProgress | None = None,
    pip_transfer: Transfer | None = None,
    allow_build: Sequence[str] = (),
    compile_bytecode: bool = False,
) -> CreateResult:
    from envfactory.lockfile.read import read_lock
    from envfactory.solve import rattler_adapter

    say = progress or (lambda _m: None)
    target_platform = platform or host_platform()
    cache = cache or PackageCache()
    lock = read_lock(lock_path, memo=cache.memo)
    meta = lock.metadata
    if compile_bytecode:
        from envfactory.install.bytecode import check_can_compile

        check_can_compile(target_platform)
    conda, locked, wheels, wheel_dir = lock_packages(
        lock, lock_path, target_platform, channel_map, wheel_dir
    )
    prefix = prefix.expanduser().absolute()
    replacing = check_target(prefix, force)
    pip_files = None
    if wheels:
        from envfactory.install import pipside  # it imports packaging: only when there are wheels

        # fetched, hash-checked, sdists vetted and built, metadata checked: before anything
        # is installed
        say(f"{len(wheels)} pip files: checking them into the cache {cache.root}")
        pip_files = pipside.prepare(
            wheels,
            cache.root,
            platform=target_platform,
            allow_build=allow_build,
            say=say,
            index=wheel_dir,
            transfer=pip_transfer,
        )
    if replacing is not None:
        records = len(list((prefix / "conda-meta").glob("*.json")))
        say(
            f"--force: the conda environment {prefix} ({records} records in conda-meta/) is "
            "removed once the new one is in place"
        )
    python = meta.python or _python_of(conda)
    umask = _umask()

    staging_prefix = f".{prefix.name}.envfactory-"
    with handling(INTERRUPTS - {signal.SIGINT}, _interrupt):
        prefix.parent.mkdir(parents=True, exist_ok=True)
        for stale in sweep_stale(prefix.parent, staging_prefix):
            say(f"removed {stale}, left by an interrupted create")
        staging = Staging.make(prefix.parent, staging_prefix, mode=0o777 & ~umask)
        try:
            say(f"{len(conda)} conda packages: checking them into the cache {cache.root}")
            with cache.acquire(conda, saying_waits(cache_progress, say)) as lease:
                check_links_across(
                    {
                        pkg.describe(): (c.directory, c.summary)
                        for pkg, c in zip(conda, lease, strict=True)
                    }
                )
                from envfactory.install import longpaths  # Windows' path limit, before linking

                longpaths.check_create(
                    staging.path,
                    prefix,
                    (c.directory for c in lease),
                    (tree.manifest for _pkg, tree in (pip_files.wheels if pip_files else ())),
                )
                hits = sum(1 for c in lease if c.outcome == "cached")
                say(f"linking {len(conda)} conda packages ({hits} were cached already)")
                # what the post-link check holds each record in conda-meta/ to
                linked = {c.name: Linked(str(c.directory), c.summary) for c in lease}
                _to_the_end(
                    lambda: rattler_adapter.install(
                        locked, staging.path, target_platform, lease.view, final_prefix=prefix
                    ),
                    # what comes after the link, imported while rattler links
                    meanwhile=_import_the_rest if meta.activation or meta.combo else None,
                )
                _point_records_at_entries(
                    staging.path, {c.name: (lease.source(c), str(c.directory)) for c in lease}
                )
                check_installed(staging.path, linked)
            if pip_files is not None:
                say(f"installing {len(wheels)} pip packages")
                requirements = meta.inputs.get(target_platform, {}).get("pip") or []
                pipside.install(
                    pip_files,
                    staging.path,
                    prefix,
                    target_platform,
                    python,
                    pipside.requested([str(r) for r in requirements]),
                )
            activation, note = _activation(meta, str(lock_path), staging.path, target_platform)
            if meta.variables:
                _write_state(staging.path, dict(meta.variables))
            write_marker(staging.path, meta, lock_path, target_platform)
            _apply_umask(staging.path, activation, umask)
            staging.release_marker()
            _move_into_place(staging, prefix, staging_prefix)
        except BaseException:
            staging.remove()
            raise
    say(f"created {prefix}")
    if compile_bytecode:  # the one program of the environment create runs, and only when asked
        from envfactory.install.bytecode import compile_site_packages

        say(f"compiled {compile_site_packages(prefix, target_platform, python)} (--compile)")
    moved = tuple(prefix / p.relative_to(staging.path) for p in activation)
    return CreateResult.of(
        prefix, target_platform, (len(conda), len(wheels)), moved, note, replacing, hits, pip_files
    )


def write_marker(prefix: Path, meta: LockMetadata, lock_path: Path, platform: Platform) -> None:
    """``conda-meta/envfactory.json``: which lock (and combo, project environment) built the
    prefix, for which platform."""
    marker = {"lock": str(lock_path.resolve()), "platform": platform}
    if meta.combo:
        marker["combo"] = meta.combo
    if meta.environment:
        marker["environment"] = meta.environment
    ownfiles.write_file(
        prefix, f"conda-meta/{MARKER}", (json.dumps(marker, indent=1) + "\n").encode()
    )


def _point_records_at_entries(prefix: Path, sources: Mapping[str, tuple[str, str]]) -> None:
    """rattler records where it linked each package from (``extracted_package_dir``,
    ``link.source``): the lease's view, removed once the create is done. Each record is
    pointed at the cache entry itself (``<cache>/sha256/<sha256>/pkg``), which outlives it;
    the path is replaced as the JSON text holds it (a record of a TF stack is megabytes), in
    place: one open and one write per record (a read and a rewrite of each, through pathlib,
    took ~30 ms of a warm create of 210 packages)."""
    meta = ownfiles.real_directories(prefix, "conda-meta")
    for name, (view, entry) in sources.items():
        # a record that is missing is named by check_installed
        ownfiles.replace_in_file(
            meta / f"{name}.json",
            json.dumps(view, ensure_ascii=False)[1:-1].encode(),
            json.dumps(entry, ensure_ascii=False)[1:-1].encode(),
        )


def _import_the_rest() -> None:
    """What installs the activation scripts, made ready while rattler links (without the GIL):
    the plan's module and the Jinja environment that renders the scripts (~30 ms of imports)."""
    import envfactory.activation.plan  # noqa: F401
    from envfactory.activation.templating import environment

    environment()


def _apply_umask(prefix: Path, written: Sequence[Path], umask: int) -> None:
    """The modes the umask gives, on what envfactory and rattler wrote themselves (rattler
    writes conda-meta records 0600; mkdtemp makes 0700). Linked package files are left alone:
    they are the cache's inodes."""
    dir_mode, file_mode = 0o777 & ~umask, 0o666 & ~umask
    prefix.chmod(dir_mode)
    meta = prefix / "conda-meta"
    meta.chmod(dir_mode)
    # conda-meta/ holds a record per package: its listing's kinds, not an lstat of each
    with os.scandir(meta) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                os.chmod(entry.path, file_mode)  # noqa: PTH101
            elif entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, dir_mode)  # noqa: PTH101
    own = list(written)
    for path in written:
        for parent in path.parents:
            if parent == prefix:
                break
            own.append(parent)
    for path in own:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o100:
            path.chmod(dir_mode)
        else:
            path.chmod(file_mode)


def _write_state(prefix: Path, variables: dict[str, str]) -> None:
    """``conda-meta/state`` ``env_vars``: what ``conda env config vars set`` writes; conda and
    micromamba set them on activation and restore the old values on deactivation."""
    old = ownfiles.read_file(prefix / "conda-meta" / "state")  # never through a link
    doc = json.loads(old) if old is not None else {}
    doc.setdefault("env_vars", {}).update(variables)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    ownfiles.write_file(prefix, "conda-meta/state", text.encode())


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import errno

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(a))


def _move_into_place(staging: Staging, prefix: Path, staging_prefix: str) -> None:
    if not prefix.exists():
        staging.path.rename(prefix)
        return
    if not any(prefix.iterdir()):
        prefix.rmdir()
        staging.path.rename(prefix)
        return
    # The replaced environment gets a marker first, so that if this process dies before it
    # is removed, the next create removes it (its name then starts with staging_prefix).
    old = Staging.adopt(prefix)
    try:
        swapped = _exchange(staging.path, prefix)
    except OSError:
        old.release_marker()
        raise
    if swapped:
        old.path = staging.path
    else:
        aside = prefix.parent / f"{staging_prefix}old-{os.getpid()}"
        prefix.rename(aside)
        old.path = aside
        try:
            staging.path.rename(prefix)
        except OSError:
            aside.rename(prefix)
            old.release_marker()
            raise
    old.remove()


def _python_of(conda: Sequence[LockedPackage]) -> str:
    for pkg in conda:
        if pkg.name == "python":
            return ".".join(pkg.version.split(".")[:2])
    return "3"


def _activation(
    meta: LockMetadata, where: str, staging: Path, platform: Platform
) -> tuple[list[Path], str | None]:
    """The activation files the lock recorded, installed into the staging prefix. A lock made
    before envfactory recorded the plan (0.1) takes it from the catalog by combo name; a combo
    the catalog no longer has still creates, without activation files, and says so."""
    recorded = meta.activation.get(platform)
    if recorded is not None:
        from envfactory.activation.plan import ActivationPlan, install_plan

        plan = ActivationPlan.from_runtime(recorded, platform, where=where)
        return install_plan(staging, plan), None
    if not meta.combo:
        return [], "the lock names no envfactory combo; no activation scripts installed"
    from envfactory.activation.plan import install_plan, plan_for
    from envfactory.catalog.loader import load_catalog

    catalog = load_catalog()
    if meta.combo not in catalog.combos:
        return [], (
            f"the lock records no activation plan and this envfactory's catalog has no combo "
            f"'{meta.combo}'; no activation scripts installed (re-lock to record them)"
        )
    plan = plan_for(catalog.combo(meta.combo), platform)
    return install_plan(staging, plan), (
        "the lock records no activation plan (made by an older envfactory); the scripts come "
        f"from this envfactory's catalog entry for {meta.combo}"
    )
