"""Create stage: build an environment from a lock, exactly as locked.

1. check every package file against the lock's sha256 (or md5), ``file://`` ones included
   (rattler checks none of those: shared/research/feasibility.md §1d);
2. install the conda packages with py-rattler into a staging directory next to the prefix, the
   final prefix patched into the files; then the pip wheels (pip ``--require-hashes``);
3. install the combo's activation scripts, and a project environment's variables into
   ``conda-meta/state`` (where conda and micromamba read ``env config vars``);
4. move the staging directory into place (an old prefix is moved aside first, with ``--force``).

Any failure or interrupt removes the staging directory: no half-built prefix is left behind.

An air-gapped machine creates from a mirror (``envfactory mirror``): ``channel_map`` points the
lock's channels elsewhere (the lock records which URL each channel name had) and ``wheel_dir``
holds the locked wheels by file name. The hashes checked are always the lock's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from envfactory.activation.plan import install_activation
from envfactory.build.channels import ChannelMap
from envfactory.build.checks import LockedPackage
from envfactory.build.lockmeta import LockMetadata
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Platform, host_platform
from envfactory.errors import ToolError, UserInputError
from envfactory.progress import Progress

MARKER = "envfactory.json"  # conda-meta/envfactory.json: which lock built this prefix


def resolve_lock(target: str, locks_dir: Path = Path("locks")) -> Path:
    """``target`` is a lockfile path or a combo name (``locks/<combo>/conda-lock.yml``)."""
    path = Path(target)
    if path.is_file():
        return path
    if path.is_dir() and (path / "conda-lock.yml").is_file():
        return path / "conda-lock.yml"
    candidate = locks_dir / target / "conda-lock.yml"
    if candidate.is_file():
        return candidate
    raise UserInputError(
        f"no lockfile found for '{target}' (looked for {path} and {candidate})",
        f"run 'envfactory lock {target}' first, or pass the path of a conda-lock.yml",
    )


@dataclass(frozen=True)
class CreateResult:
    prefix: Path
    platform: Platform
    conda: int
    pip: int
    activation: tuple[Path, ...]
    activation_note: str | None


def _local_path(url: str) -> Path | None:
    return Path(unquote(urlparse(url).path)) if url.startswith("file://") else None


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_file(pkg: LockedPackage, path: Path) -> None:
    """Raise unless ``path`` has the lock's sha256 (preferred) or md5 for ``pkg``."""
    if pkg.sha256:
        algorithm, expected = "sha256", pkg.sha256
    elif pkg.md5:
        algorithm, expected = "md5", pkg.md5
    else:
        raise ToolError(
            f"{pkg.describe()} has no hash in the lock", "re-lock: every package needs one"
        )
    found = _digest(path, algorithm)
    if found != expected:
        raise ToolError(
            f"{pkg.describe()}: {algorithm} of {path} is {found}, the lock says {expected}",
            "the package file changed after locking; re-lock from a channel you trust, "
            "or restore the original file",
        )


def _fetch(pkg: LockedPackage, downloads: Path) -> Path:
    local = _local_path(pkg.url)
    if local is not None:
        if not local.is_file():
            raise ToolError(f"{pkg.describe()}: {local} does not exist", "check the channel map")
        return local
    import requests

    target = downloads / pkg.filename
    try:
        with requests.get(pkg.url, stream=True, timeout=60) as response:
            response.raise_for_status()
            with target.open("wb") as handle:
                for chunk in response.iter_content(1 << 20):
                    handle.write(chunk)
    except requests.RequestException as exc:
        raise ToolError(f"cannot download {pkg.url}: {exc}") from None
    return target


def relocate(
    packages: Sequence[LockedPackage],
    recorded_channels: dict[str, str],
    channel_map: ChannelMap | None,
    wheels: Path | None,
) -> list[LockedPackage]:
    """The packages with their URLs pointed at a mirror: a conda URL under the URL a channel
    had at lock time moves under the URL ``channel_map`` gives that channel name now; a wheel
    is taken from ``wheels`` by file name. Names, versions and hashes stay the lock's."""
    from dataclasses import replace

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
            local = wheels / pkg.filename
            if not local.is_file():
                raise UserInputError(
                    f"{pkg.describe()}: {pkg.filename} is not in {wheels}",
                    "pass the wheels/ folder that 'envfactory mirror' wrote for this lock",
                )
            url = local.resolve().as_uri()
        out.append(replace(pkg, url=url) if url != pkg.url else pkg)
    return out


def _staged(pkg: LockedPackage, path: Path) -> LockedPackage:
    from dataclasses import replace

    return replace(pkg, url=path.resolve().as_uri())


def create_environment(
    lock_path: Path,
    prefix: Path,
    force: bool = False,
    platform: Platform | None = None,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
    channel_map: ChannelMap | None = None,
    wheel_dir: Path | None = None,
) -> CreateResult:
    from envfactory.build import condalock_adapter, pypi, rattler_adapter

    say = progress or (lambda _m: None)
    target_platform = platform or host_platform()
    lock = condalock_adapter.read_lock(lock_path)
    if target_platform not in lock.platforms:
        raise UserInputError(
            f"{lock_path} has no packages for {target_platform} (it covers "
            f"{', '.join(lock.platforms)})",
            f"lock for this platform: envfactory lock COMBO --platform {target_platform}",
        )
    meta = LockMetadata.from_custom_metadata(lock.custom_metadata, where=str(lock_path))
    packages = relocate(
        [p for p in lock.packages if p.platform == target_platform],
        dict(meta.channels),
        channel_map,
        wheel_dir,
    )
    conda = [p for p in packages if p.manager == "conda"]
    wheels = [p for p in packages if p.manager == "pip"]
    prefix = prefix.expanduser().absolute()
    if prefix.exists() and (not prefix.is_dir() or any(prefix.iterdir())) and not force:
        raise UserInputError(
            f"{prefix} exists and is not empty",
            "choose another prefix, or pass --force to replace it",
        )
    python = meta.python or _python_of(conda)
    glibc = meta.virtual_packages.get(target_platform, {}).get("__glibc")

    prefix.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.envfactory-", dir=prefix.parent))
    downloads = Path(tempfile.mkdtemp(prefix="envfactory-downloads-"))
    cache = cache_dir or Path(tempfile.mkdtemp(prefix="envfactory-pkgs-"))
    try:
        say(f"checking {len(conda)} conda packages against the lock's hashes")
        ready = []
        for index, pkg in enumerate(conda, 1):
            path = _fetch(pkg, downloads)
            verify_file(pkg, path)
            ready.append(_staged(pkg, path))
            say(f"  [{index}/{len(conda)}] {pkg.describe()} ok")
        say(f"installing {len(ready)} conda packages")
        rattler_adapter.install(ready, staging, target_platform, cache, final_prefix=prefix)
        _restore_urls(staging, {s.url: p.url for s, p in zip(ready, conda, strict=True)})
        if wheels:
            say(f"installing {len(wheels)} pip wheels (hashes checked by pip --require-hashes)")
            pypi.install_wheels(wheels, staging, target_platform, python, glibc)
        activation, note = _activation(meta.combo, staging, target_platform)
        if meta.variables:
            _write_state(staging, dict(meta.variables))
        marker = {"lock": str(lock_path.resolve()), "platform": target_platform}
        if meta.combo:
            marker["combo"] = meta.combo
        if meta.environment:
            marker["environment"] = meta.environment
        (staging / "conda-meta" / MARKER).write_text(
            json.dumps(marker, indent=1) + "\n", encoding="utf-8"
        )
        _move_into_place(staging, prefix)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(downloads, ignore_errors=True)
        if cache_dir is None:
            shutil.rmtree(cache, ignore_errors=True)
    say(f"created {prefix}")
    moved = tuple(prefix / p.relative_to(staging) for p in activation)
    return CreateResult(prefix, target_platform, len(conda), len(wheels), moved, note)


def _write_state(prefix: Path, variables: dict[str, str]) -> None:
    """``conda-meta/state`` ``env_vars``: what ``conda env config vars set`` writes; conda and
    micromamba set them on activation and restore the old values on deactivation."""
    state = prefix / "conda-meta" / "state"
    doc = json.loads(state.read_text(encoding="utf-8")) if state.is_file() else {}
    doc.setdefault("env_vars", {}).update(variables)
    state.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _move_into_place(staging: Path, prefix: Path) -> None:
    old: Path | None = None
    if prefix.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.envfactory-old-", dir=prefix.parent))
        old.rmdir()
        prefix.rename(old)
    try:
        staging.rename(prefix)
    except OSError:
        if old is not None:
            old.rename(prefix)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _restore_urls(prefix: Path, urls: dict[str, str]) -> None:
    """Record the lock's URL (not the verified local copy's) in ``conda-meta``."""
    for path in sorted((prefix / "conda-meta").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        original = urls.get(record.get("url", ""))
        if original and original != record["url"]:
            record["url"] = original
            record["channel"] = original.rsplit("/", 2)[0]
            path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _python_of(conda: Sequence[LockedPackage]) -> str:
    for pkg in conda:
        if pkg.name == "python":
            return ".".join(pkg.version.split(".")[:2])
    return "3"


def _activation(
    combo_name: str | None, staging: Path, platform: Platform
) -> tuple[list[Path], str | None]:
    """The combo's activation scripts, installed into the staging prefix."""
    if not combo_name:
        return [], "the lock names no envfactory combo; no activation scripts installed"
    combo = load_catalog().combo(combo_name)
    return install_activation(staging, combo, platform), None
