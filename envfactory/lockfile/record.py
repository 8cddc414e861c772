"""The lock's own record: what envfactory writes into conda-lock.yml's ``custom_metadata``.

conda-lock gives a lock one flat ``custom_metadata`` mapping of strings. envfactory keeps its
record there under ``envfactory.*`` keys (structured values as JSON), and this module is the only
place that knows the keys: :class:`LockMetadata` is written with :meth:`to_custom_metadata`
(``write.lock_text``) and read back with :meth:`from_custom_metadata` inside the read
(``read.read_lock``, ``read.read_lock_header``), once: every command gets it as
``LockFile.metadata``.

Versions of the record: a lock without ``envfactory.metadata_version`` was written by envfactory
0.1 and is read as version 1 (the same keys). A newer version than this module knows is refused
with a hint to upgrade envfactory, instead of being half understood.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from envfactory.catalog.platforms import PLATFORMS, Platform
from envfactory.errors import UserInputError

METADATA_VERSION = 1
PREFIX = "envfactory."


def _platform_keys(meta: Mapping[str, str], stem: str) -> dict[Platform, str]:
    return {p: meta[f"{PREFIX}{stem}.{p}"] for p in PLATFORMS if f"{PREFIX}{stem}.{p}" in meta}


# the default of the mapping fields: one read-only empty mapping, shared
EMPTY: Mapping[Any, Any] = MappingProxyType({})


class LockMetadata(NamedTuple):
    """What envfactory recorded about a lock: enough to check it, create from it and mirror it."""

    combo: str | None = None
    python: str | None = None
    envfactory_version: str | None = None
    regenerate: str | None = None
    solver: str | None = None
    #: channel name -> the URL it had when the lock was made (``mirror``/``--channel-map`` use it)
    channels: Mapping[str, str] = EMPTY
    inputs_sha256: str | None = None
    #: ``file_digest`` of conda-lock.yml's text outside this block, the package list above all
    #: (``package_block``): ``lock --check`` tells a list edited by hand without parsing it
    packages_sha256: str | None = None
    #: per platform: everything the lock depends on (compared by ``lock --check``)
    inputs: Mapping[Platform, Mapping[str, Any]] = EMPTY
    #: per platform: the virtual packages the solve assumed (``__cuda``, ``__glibc``, ...)
    virtual_packages: Mapping[Platform, Mapping[str, str]] = EMPTY
    #: a project environment's name and variables (``envfactory.yaml``); None for a bare combo
    environment: str | None = None
    variables: Mapping[str, str] = EMPTY
    #: the other files of the lock set (``conda-<platform>.lock``, the environment files, the
    #: activation scripts), by path relative to the lock's directory -> ``file_digest`` of their
    #: bytes. conda-lock.yml is written last, so a set left mixed by a killed ``lock`` shows.
    files: Mapping[str, str] = EMPTY
    #: per platform: the activation plan ``create`` installs (ActivationPlan.runtime() data),
    #: so a lock creates the same environment even when the catalog has changed since
    activation: Mapping[Platform, Mapping[str, Any]] = EMPTY
    version: int = METADATA_VERSION

    def to_custom_metadata(self) -> dict[str, str]:
        out: dict[str, str] = {f"{PREFIX}metadata_version": str(self.version)}
        scalars = {
            "version": self.envfactory_version,
            "combo": self.combo,
            "python": self.python,
            "regenerate": self.regenerate,
            "solver": self.solver,
            "inputs_sha256": self.inputs_sha256,
            "packages_sha256": self.packages_sha256,
        }
        out.update({f"{PREFIX}{k}": v for k, v in scalars.items() if v is not None})
        out[f"{PREFIX}channels"] = json.dumps(dict(self.channels))
        if self.environment is not None:
            out[f"{PREFIX}environment"] = self.environment
            out[f"{PREFIX}variables"] = json.dumps(dict(sorted(self.variables.items())))
        if self.files:
            out[f"{PREFIX}files"] = json.dumps(dict(sorted(self.files.items())))
        for p, virtual in self.virtual_packages.items():
            out[f"{PREFIX}virtual_packages.{p}"] = ",".join(f"{k}={v}" for k, v in virtual.items())
        for p, plan in self.activation.items():
            out[f"{PREFIX}activation.{p}"] = json.dumps(plan, sort_keys=True)
        for p, inputs in self.inputs.items():
            out[f"{PREFIX}inputs.{p}"] = json.dumps(inputs, sort_keys=True)
        return dict(sorted(out.items()))

    @classmethod
    def from_custom_metadata(cls, meta: Mapping[str, str] | None, *, where: str) -> LockMetadata:
        """Read the record back; ``where`` (the lock's path) goes into error messages."""
        meta = meta or {}
        version_text = meta.get(f"{PREFIX}metadata_version", "1")
        if not version_text.isdigit():
            raise _bad(where, "metadata_version", "is not a number")
        version = int(version_text)
        if version > METADATA_VERSION:
            raise UserInputError(
                f"{where} was written by a newer envfactory (lock metadata version {version}; "
                f"this envfactory reads up to {METADATA_VERSION})",
                "upgrade envfactory (pip install -U envfactory), or re-lock with this version",
            )
        return cls(
            combo=meta.get(f"{PREFIX}combo") or None,
            python=meta.get(f"{PREFIX}python") or None,
            envfactory_version=meta.get(f"{PREFIX}version"),
            regenerate=meta.get(f"{PREFIX}regenerate"),
            solver=meta.get(f"{PREFIX}solver"),
            channels=_json_strings(meta.get(f"{PREFIX}channels"), where, "channels"),
            inputs_sha256=meta.get(f"{PREFIX}inputs_sha256"),
            packages_sha256=meta.get(f"{PREFIX}packages_sha256"),
            inputs={
                p: _json_object(text, where, f"inputs.{p}")
                for p, text in _platform_keys(meta, "inputs").items()
            },
            virtual_packages={
                p: _pairs(text) for p, text in _platform_keys(meta, "virtual_packages").items()
            },
            environment=meta.get(f"{PREFIX}environment") or None,
            variables=_json_strings(meta.get(f"{PREFIX}variables"), where, "variables"),
            files=_json_strings(meta.get(f"{PREFIX}files"), where, "files"),
            activation={
                p: _json_object(text, where, f"activation.{p}")
                for p, text in _platform_keys(meta, "activation").items()
            },
            version=version,
        )


def _bad(where: str, key: str, what: str) -> UserInputError:
    return UserInputError(
        f"{where}: custom_metadata {PREFIX}{key} {what}",
        "the lock was edited by hand or is damaged: re-lock with 'envfactory lock'",
    )


def _json_object(text: str | None, where: str, key: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise _bad(where, key, "is not valid JSON") from None
    if not isinstance(value, dict):
        raise _bad(where, key, "is not a JSON object")
    return value


def _json_strings(text: str | None, where: str, key: str) -> dict[str, str]:
    value = _json_object(text, where, key)
    if not all(isinstance(v, str) for v in value.values()):
        raise _bad(where, key, "must map names to strings")
    return {str(k): str(v) for k, v in value.items()}


def _pairs(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split(",") if "=" in pair)


# --------------------------------------------------------------------------------------------
# The digests the record keeps of the lock set: ``lock --check`` reads only the metadata block
# (``read.read_lock_header``) and hashes the files of the set.


def package_block(text: str) -> str | None:
    """conda-lock.yml's text outside its ``metadata`` block: the header, ``version`` and the
    package list, and any other top-level key an editor added (the digest of this text is
    recorded inside the block, ``LockMetadata.packages_sha256``). The block runs from the
    ``metadata:`` line to the next line that starts a top-level entry. None without a block."""
    out = []
    inside = found = False
    for line in text.splitlines(keepends=True):
        if line.startswith("metadata:"):
            inside = found = True
            continue
        if inside and line[:1] not in (" ", "\t", "#", "\n", "\r", ""):
            inside = False
        if not inside:
            out.append(line)
    return "".join(out) if found else None


def file_digest(data: bytes) -> str:
    """sha256 of a file of the lock set, line endings normalized to LF: a checkout that turns
    LF into CRLF (git's core.autocrlf on Windows) still matches, and so do the CRLF .bat files."""
    import hashlib  # not at import: a create never hashes the lock set

    return hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()


def stale_files(directory: Path, recorded: Mapping[str, str]) -> list[str]:
    """The files of the set whose bytes are not those the lock recorded: missing, or from
    another ``lock`` run (a set left mixed by an interrupted write)."""
    out = []
    for relpath, digest in sorted(recorded.items()):
        try:
            data = (directory / relpath).read_bytes()
        except FileNotFoundError:
            out.append(f"{relpath} is missing")
            continue
        except OSError as exc:
            out.append(f"{relpath} cannot be read: {exc.strerror}")
            continue
        if file_digest(data) != digest:
            out.append(f"{relpath} is not the file this lock was written with")
    return out
