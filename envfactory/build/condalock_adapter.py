"""The one place that uses conda-lock's Python API: its lockfile models and writer (so the file is
conda-lock's own v1 format, readable by ``conda-lock render`` and ``conda-lock install``), its
reader, and its content hash.

conda-lock is imported inside the functions: ``import conda_lock.lockfile`` costs ~0.9 s and must
stay off the CLI's start-up path (shared/research/feasibility.md §0).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from envfactory.build.checks import LockedPackage, dependency_name
from envfactory.catalog.model import Platform
from envfactory.errors import ToolError, UserInputError

LOCK_FILE = "conda-lock.yml"


@contextlib.contextmanager
def _conda_lock_imports() -> Iterator[None]:
    """conda-lock's vendored conda warns (PendingDeprecationWarning) when imported; that is
    conda-lock's business, not our users'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@dataclass(frozen=True)
class LockContents:
    packages: tuple[LockedPackage, ...]
    platforms: tuple[Platform, ...]
    channels: tuple[str, ...]
    content_hash: Mapping[str, str]
    custom_metadata: Mapping[str, str]


def content_hashes(env_files: Mapping[Platform, Path], virtual_packages: Path) -> dict[str, str]:
    """conda-lock's per-platform input hash of the rendered environment file(s), computed by
    conda-lock's own functions (what ``conda-lock lock --check-input-hash`` compares)."""
    with _conda_lock_imports():
        from conda_lock.content_hash import compute_content_hashes
        from conda_lock.src_parser import make_lock_spec
        from conda_lock.virtual_package import virtual_package_repo_from_specification

    vpr = virtual_package_repo_from_specification(virtual_packages)
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="envfactory-mapping-") as tmp:
        # An empty PyPI->conda name mapping: pip names map to themselves and conda-lock never
        # downloads its default mapping from GitHub (which hangs offline).
        mapping = Path(tmp) / "mapping.json"
        mapping.write_text("{}", encoding="utf-8")
        for platform, path in env_files.items():
            spec = make_lock_spec(
                src_files=[path], platform_overrides=[platform], mapping_url=str(mapping)
            )
            out[platform] = compute_content_hashes(spec, vpr)[platform]
    return dict(sorted(out.items()))


def _dependencies(pkg: LockedPackage) -> dict[str, str]:
    deps: dict[str, str] = {}
    for dep in pkg.depends:
        name = dependency_name(dep)
        rest = dep.strip()[len(name) :].strip()
        deps[name] = f"{deps[name]},{rest}" if name in deps and rest else rest
    return dict(sorted(deps.items()))


def render_lock(
    packages: Sequence[LockedPackage],
    *,
    platforms: Sequence[Platform],
    channels: Sequence[str],
    sources: Sequence[str],
    content_hash: Mapping[str, str],
    custom_metadata: Mapping[str, str],
) -> str:
    """The text of ``conda-lock.yml``, written by conda-lock's own writer (v1 format)."""
    with _conda_lock_imports():
        from conda_lock.lockfile import write_conda_lock_file
        from conda_lock.lockfile.v2prelim.models import (
            HashModel,
            LockedDependency,
            Lockfile,
            LockMeta,
        )

    deps = [
        LockedDependency(
            name=p.name,
            version=p.version,
            manager=p.manager,
            platform=p.platform,
            dependencies=_dependencies(p),
            url=p.url,
            hash=HashModel(md5=p.md5, sha256=p.sha256),
            build=p.build or None,
            categories={"main"},
        )
        for p in packages
    ]
    lock = Lockfile(
        package=deps,
        metadata=LockMeta(
            content_hash=dict(content_hash),
            channels=list(channels),
            platforms=list(platforms),
            sources=list(sources),
            custom_metadata=dict(sorted(custom_metadata.items())),
        ),
    )
    with tempfile.TemporaryDirectory(prefix="envfactory-lock-") as tmp:
        # The writer names the file in its header, so write under the final name.
        path = Path(tmp) / LOCK_FILE
        write_conda_lock_file(lock, path, metadata_choices=set())
        return path.read_text(encoding="utf-8")


LOCK_HINT = (
    "regenerate it with 'envfactory lock' (a lock from a pull request is untrusted input; "
    "see docs/security.md)"
)


def read_lock(path: Path) -> LockContents:
    """Read a conda-lock file (v1 or v2) with conda-lock's own models, after bounding the YAML
    (``yamlio.check_bounds``), and validate every string that later reaches a file name, a
    download, pip's requirements file or conda's state file (``_validated``). Whatever is wrong
    is a ``UserInputError`` naming the file and the entry."""
    import yaml  # type: ignore[import-untyped,unused-ignore]

    from envfactory.yamlio import check_bounds, read_text

    with _conda_lock_imports():
        from conda_lock.lockfile.v1.models import Lockfile as LockfileV1
        from conda_lock.lockfile.v2prelim.models import Lockfile, lockfile_v1_to_v2
        from pydantic import ValidationError

    try:
        text = read_text(path, "the lockfile", LOCK_HINT)
    except FileNotFoundError:
        raise UserInputError(
            f"no lockfile at {path}", "run 'envfactory lock COMBO' first, or pass the path"
        ) from None
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror}", LOCK_HINT) from None
    check_bounds(text, str(path), "pyyaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        content = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserInputError(f"{where}: not valid YAML: {problem}", LOCK_HINT) from None
    if content is None:
        raise UserInputError(f"{path} is empty", LOCK_HINT)
    if not isinstance(content, dict):
        raise UserInputError(
            f"{path} is not a conda-lock file (the top level is a {type(content).__name__}, "
            "not a mapping)",
            LOCK_HINT,
        )
    version = content.pop("version", None)
    try:
        if version == 1 and not isinstance(version, bool):
            lock = lockfile_v1_to_v2(LockfileV1.model_validate(content))
        elif version == 2 and not isinstance(version, bool):
            lock = Lockfile.model_validate(content)
        else:
            raise UserInputError(
                f"{path} is not a conda-lock file of version 1 or 2 (version: {version!r})",
                LOCK_HINT,
            )
        lock.toposort_inplace()
    except ValidationError as exc:
        raise UserInputError(
            f"{path} is not a conda-lock file: {_pydantic_summary(exc)}", LOCK_HINT
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # conda-lock's validators index what pydantic already refused (KeyError 'manager').
        raise UserInputError(
            f"{path} is not a conda-lock file: {type(exc).__name__}: {exc}", LOCK_HINT
        ) from None
    return _validated(lock, path)


def _pydantic_summary(exc: Any) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "top level"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _validated(lock: Any, path: Path) -> LockContents:
    from envfactory import untrusted

    meta = lock.metadata
    for platform in meta.platforms:
        if platform not in untrusted.KNOWN_SUBDIRS or platform == "noarch":
            raise UserInputError(f"{path}: unknown platform {platform!r}", LOCK_HINT)
    from envfactory import untrusted

    channels = []
    for channel in meta.channels:
        problem = untrusted.channel_problem(channel.url)
        if problem:
            raise UserInputError(f"{path}: channel {channel.url!r}: {problem}", LOCK_HINT)
        channels.append(channel.url)
    custom = dict(meta.custom_metadata or {})
    _check_custom_metadata(custom, path)
    packages = []
    for index, dep in enumerate(lock.package):
        pkg = _package(dep)
        problem = _package_problem(pkg, meta.platforms)
        if problem:
            raise UserInputError(
                f"{path}: package {index + 1} ({pkg.manager} {pkg.name!r} {pkg.platform}): "
                f"{problem}",
                LOCK_HINT,
            )
        packages.append(pkg)
    return LockContents(
        packages=tuple(packages),
        platforms=tuple(cast(Platform, p) for p in meta.platforms),
        channels=tuple(channels),
        content_hash=dict(meta.content_hash),
        custom_metadata=custom,
    )


def _package(dep: Any) -> LockedPackage:
    subdir = dep.url.rsplit("/", 2)[-2] if dep.manager == "conda" and "/" in dep.url else ""
    depends = tuple(f"{k} {v}".strip() for k, v in sorted(dep.dependencies.items()))
    return LockedPackage(
        manager=dep.manager,
        name=dep.name,
        version=dep.version,
        platform=cast(Platform, dep.platform),
        url=dep.url,
        build=dep.build or _build_from_url(dep.url, dep.manager),
        subdir=subdir,
        channel=dep.url.rsplit("/", 2)[0] if dep.manager == "conda" else "",
        md5=dep.hash.md5,
        sha256=dep.hash.sha256,
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
    if pkg.subdir not in u.KNOWN_SUBDIRS:
        return f"the url's subdir {pkg.subdir!r} is not a conda platform"
    if pkg.subdir not in (pkg.platform, "noarch"):
        return f"the url's subdir {pkg.subdir!r} is neither {pkg.platform} nor noarch"
    stem = f"{pkg.name}-{pkg.version}-{pkg.build}"
    if pkg.filename not in (f"{stem}.tar.bz2", f"{stem}.conda"):
        return f"the url's file name is not {stem}.tar.bz2 or {stem}.conda"
    return None


def _check_custom_metadata(custom: Mapping[str, str], path: Path) -> None:
    """envfactory's record in the lock, read the way create, mirror, kernel and --check read it
    (``LockMetadata``: its JSON parses), then held to where its values go
    (``lockmeta.check_record``, which ``lock --check`` applies too)."""
    from envfactory.build.lockmeta import LockMetadata, check_record

    meta = LockMetadata.from_custom_metadata(custom, where=str(path))
    check_record(meta, str(path))


def _build_from_url(url: str, manager: str) -> str:
    """conda-lock's own files have no ``build`` key; the build is in the file name."""
    if manager != "conda":
        return ""
    stem = url.rsplit("/", 1)[-1].removesuffix(".tar.bz2").removesuffix(".conda")
    return stem.rsplit("-", 2)[-1]


# --------------------------------------------------------------------------------------------
# ``--solver conda-lock``: the real ``conda-lock lock`` CLI with the user's conda binary.

CONDA_EXECUTABLES = ("micromamba", "mamba", "conda")
CLI_TIMEOUT_S = 1800


def find_conda(environ: Mapping[str, str]) -> str | None:
    """The user's conda, mamba or micromamba (``CONDA_EXE``/``MAMBA_EXE`` first, then PATH).
    Never ensureconda: without a binary it retries downloads for over a minute."""
    for var in ("MAMBA_EXE", "CONDA_EXE"):
        exe = environ.get(var)
        if exe and Path(exe).is_file():
            return exe
    for name in CONDA_EXECUTABLES:
        found = shutil.which(name, path=environ.get("PATH"))
        if found:
            return found
    return None


def solve_with_cli(
    env_file: Path,
    virtual_packages: Path,
    platform: Platform,
    channels: Sequence[str],
    environ: Mapping[str, str],
) -> list[LockedPackage]:
    """Run ``conda-lock lock`` for one platform and read back its packages."""
    conda = find_conda(environ)
    if conda is None:
        raise ToolError(
            "--solver conda-lock needs conda, mamba or micromamba, and none was found "
            "(looked at MAMBA_EXE, CONDA_EXE and PATH)",
            "install micromamba (https://mamba.readthedocs.io) and put it on PATH, "
            "or use the default solver (--solver rattler), which needs no conda",
        )
    script = Path(sys.executable).parent / "conda-lock"
    command = [str(script) if script.exists() else "conda-lock", "lock", "--conda", conda]
    if Path(conda).name.startswith("micromamba"):
        command.append("--micromamba")
    elif Path(conda).name.startswith("mamba"):
        command.append("--mamba")
    with tempfile.TemporaryDirectory(prefix="envfactory-conda-lock-") as tmp:
        out = Path(tmp) / LOCK_FILE
        command += ["-f", str(env_file), "--virtual-package-spec", str(virtual_packages)]
        command += ["-p", platform, "--lockfile", str(out)]
        for url in channels:
            command += ["-c", url]
        try:
            proc = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=CLI_TIMEOUT_S,
                env=dict(environ),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ToolError(f"conda-lock lock ran longer than {CLI_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise ToolError(
                f"conda-lock lock failed for {platform} (exit {proc.returncode}):\n{tail}",
                "the default solver (--solver rattler) gives a plainer explanation",
            )
        lock = read_lock(out)
    return [p for p in lock.packages if p.platform == platform and p.manager == "conda"]
