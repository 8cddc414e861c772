"""Channel map: where each channel a combo names (``defaults``, ``conda-forge``, ``nvidia``) is
fetched from. A mirror, an internal HTTP server or a local directory can stand in for any of them.

Sources, later ones winning per channel name:

1. the built-in defaults (``defaults`` → repo.anaconda.com/pkgs/main, others →
   conda.anaconda.org/<name>);
2. the config file ``envfactory.toml`` in the current directory, table ``[channels]``
   (``defaults = "file:///srv/mirror/main"``);
3. the environment variable ``ENVFACTORY_CHANNEL_MAP``: ``NAME=URL`` pairs separated by commas;
4. ``--channel-map NAME=URL`` options.

A plain directory path becomes a ``file://`` URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from envfactory.errors import UserInputError

CONFIG_FILE = "envfactory.toml"
ENV_VAR = "ENVFACTORY_CHANNEL_MAP"
SYNTAX_HINT = "write NAME=URL, e.g. --channel-map defaults=file:///srv/mirror/main"

_BUILTIN = {"defaults": "https://repo.anaconda.com/pkgs/main"}


def default_url(name: str) -> str:
    return _BUILTIN.get(name, f"https://conda.anaconda.org/{name}")


def normalize_url(location: str) -> str:
    """A URL without a trailing slash; a local path (absolute or relative) becomes ``file://``."""
    if "://" in location:
        return location.rstrip("/")
    return Path(location).expanduser().resolve().as_uri()


class ChannelMap(NamedTuple):
    """Overrides by channel name; names without an override use their public URL."""

    overrides: Mapping[str, str]

    def url(self, name: str) -> str:
        return self.overrides.get(name) or default_url(name)

    def urls(self, names: Iterable[str]) -> list[str]:
        return [self.url(n) for n in names]

    def describe(self, names: Iterable[str]) -> dict[str, str]:
        return {n: self.url(n) for n in names}


def parse_pairs(pairs: Iterable[str], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, location = pair.strip().partition("=")
        if not sep or not name.strip() or not location.strip():
            raise UserInputError(f"bad channel map entry '{pair}' in {where}", SYNTAX_HINT)
        out[name.strip()] = _checked(name.strip(), normalize_url(location.strip()), where)
    return out


def _checked(name: str, url: str, where: str) -> str:
    """A channel map entry comes from a file a pull request can change (envfactory.toml): the
    name and URL are held to what a lock may record (``untrusted.channel_problem``)."""
    from envfactory import untrusted

    problem = untrusted.channel_problem(name) or untrusted.channel_problem(url)
    if problem:
        raise UserInputError(f"bad channel map entry {name!r} = {url!r} in {where}: {problem}",
                             SYNTAX_HINT)  # fmt: skip
    return url


def _from_config(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:  # imported only where there is a file to read (every create looks for one)
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError:  # pragma: no cover - python 3.10
        import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

    from envfactory.fsio import read_text

    try:
        doc = tomllib.loads(read_text(path, "the channel map", "TOML files are UTF-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserInputError(
            f"{path}: cannot read the channel map: {exc}",
            '[channels] holds NAME = "URL" lines, e.g. defaults = "file:///srv/mirror/main"',
        ) from None
    table = doc.get("channels", {})
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise UserInputError(
            f"{path}: [channels] must map channel names to URL strings",
            'e.g. [channels]\\ndefaults = "file:///srv/mirror/main"',
        )
    base = path.parent
    return {
        str(k): _checked(str(k), normalize_url(v if "://" in v else str(base / v)), str(path))
        for k, v in table.items()
    }


def load_channel_map(
    cli_pairs: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    config: Path | None = None,
) -> ChannelMap:
    """The effective channel map: config file, then environment variable, then CLI options."""
    env = os.environ if environ is None else environ
    overrides = _from_config(config if config is not None else Path.cwd() / CONFIG_FILE)
    raw = env.get(ENV_VAR, "").strip()
    if raw:
        overrides |= parse_pairs([p for p in raw.split(",") if p.strip()], ENV_VAR)
    overrides |= parse_pairs(cli_pairs, "--channel-map")
    return ChannelMap(dict(sorted(overrides.items())))
