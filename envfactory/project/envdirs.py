"""Named environments where conda and micromamba keep them, and the list ``conda env list`` reads.

``-n NAME`` means ``<envs dir>/NAME``. The envs dirs, in conda's order (conda/base/context.py,
``Context.envs_dirs``: the configured ``envs_dirs`` first, then ``<root prefix>/envs`` when the
root is writable, else ``~/.conda/envs`` before it):

1. ``CONDA_ENVS_DIRS`` (and its older name ``CONDA_ENVS_PATH``), a list separated by ``,`` or
   the OS path separator;
2. ``envs_dirs:`` of the ``.condarc`` files conda reads, the one that wins first (``$CONDARC``,
   ``~/.condarc``, ``~/.conda/.condarc``, ``$XDG_CONFIG_HOME/conda/.condarc``,
   ``/etc/conda/.condarc``; https://docs.conda.io/projects/conda/en/latest/user-guide/
   configuration/use-condarc.html, "Searching for .condarc");
3. ``$MAMBA_ROOT_PREFIX/envs`` (micromamba's root), else ``$CONDA_ROOT_PREFIX/envs``;
4. ``~/.conda/envs``.

A new environment goes to the first of them that exists or can be made; ``-n NAME`` of an
existing one finds it in the first directory that holds it. A created environment is added to
``~/.conda/environments.txt``, which ``conda env list`` reads (conda/core/envs_manager.py,
``register_env``), unless ``CONDA_REGISTER_ENVS`` is false, as in conda.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from envfactory.errors import UserInputError

_PLAIN_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")
_FALSE = frozenset({"0", "false", "no", "off"})


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME") or env.get("USERPROFILE")
    return Path(home) if home else Path.home()


def condarc_files(env: Mapping[str, str]) -> list[Path]:
    """The user's and the system's ``.condarc`` files, the one whose settings win first."""
    home = _home(env)
    xdg = env.get("XDG_CONFIG_HOME") or str(home / ".config")
    found = [
        *([Path(env["CONDARC"])] if env.get("CONDARC") else []),
        home / ".condarc",
        home / ".conda" / ".condarc",
        Path(xdg) / "conda" / ".condarc",
        Path("/etc/conda/.condarc"),
        Path("/etc/conda/condarc"),
    ]
    return [p for p in dict.fromkeys(found) if p.is_file()]


def _condarc_envs_dirs(path: Path) -> list[str]:
    from envfactory.yamlio import YamlMap, YamlSeq, load_yaml_keys

    hint = f"fix envs_dirs in {path} (a list of directories)"
    doc = load_yaml_keys(str(path), path.read_text(encoding="utf-8"), ("envs_dirs",), hint)
    if not isinstance(doc, YamlMap) or "envs_dirs" not in doc:
        return []
    value = doc["envs_dirs"]
    if not isinstance(value, YamlSeq) or not all(isinstance(v, str) for v in value):
        raise UserInputError(f"{path}: envs_dirs is not a list of directories", hint)
    return [str(v) for v in value]


def _expand(text: str, home: Path) -> Path:
    text = os.path.expandvars(text)
    if text == "~" or text.startswith(("~/", "~\\")):
        return home / text[2:]
    return Path(text)


def envs_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """The envs dirs in the order above, each once."""
    env = os.environ if env is None else env
    home = _home(env)
    configured: list[str] = []
    for key in ("CONDA_ENVS_DIRS", "CONDA_ENVS_PATH"):
        configured += [p for p in re.split(f"[,{re.escape(os.pathsep)}]", env.get(key, "")) if p]
    if not configured:
        for rc in condarc_files(env):
            configured += _condarc_envs_dirs(rc)
    dirs = [_expand(p, home) for p in configured]
    root = env.get("MAMBA_ROOT_PREFIX") or env.get("CONDA_ROOT_PREFIX")
    if root:
        dirs.append(Path(root) / "envs")
    dirs.append(home / ".conda" / "envs")
    return list(dict.fromkeys(dirs))


def check_name(name: str) -> None:
    if not _PLAIN_NAME.fullmatch(name) or name in (".", ".."):
        raise UserInputError(
            f"-n takes a plain environment name, not {name!r}",
            "letters, digits, '_', '.', '+' and '-'; for a path use -p PREFIX",
        )


def _usable(directory: Path) -> bool:
    """The directory exists and is writable, or can be made."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK)


def new_prefix(name: str, env: Mapping[str, str] | None = None) -> Path:
    """Where ``create -n NAME`` puts an environment: NAME in the first usable envs dir."""
    check_name(name)
    dirs = envs_dirs(env)
    for directory in dirs:
        if _usable(directory):
            return directory / name
    raise UserInputError(
        f"no writable envs directory for -n {name} (tried {', '.join(map(str, dirs))})",
        "set CONDA_ENVS_DIRS to a directory you may write, or use -p PREFIX",
    )


def existing_prefix(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The environment ``-n NAME`` names: NAME in the first envs dir that holds it."""
    check_name(name)
    dirs = envs_dirs(env)
    for directory in dirs:
        if (directory / name).is_dir():
            return directory / name
    raise UserInputError(
        f"no environment named '{name}' (looked in {', '.join(map(str, dirs))})",
        "create it with 'envfactory create ENV -n NAME', or give its path with -p PREFIX",
    )


def environments_txt(env: Mapping[str, str] | None = None) -> Path:
    return _home(os.environ if env is None else env) / ".conda" / "environments.txt"


def register(prefix: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """Add ``prefix`` to ``~/.conda/environments.txt`` (once), as conda does for the
    environments it creates; returns the file, or None when registering is turned off."""
    env = os.environ if env is None else env
    if env.get("CONDA_REGISTER_ENVS", "").strip().lower() in _FALSE:
        return None
    listing = environments_txt(env)
    location = str(prefix.resolve())
    known = listing.read_text(encoding="utf-8").splitlines() if listing.is_file() else []
    if location in known:
        return listing
    listing.parent.mkdir(parents=True, exist_ok=True)
    with listing.open("a", encoding="utf-8", newline="\n") as handle:
        handle.write(location + "\n")
    return listing
