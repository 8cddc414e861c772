"""The user's network settings, for the HTTP sessions that download locked files: pip's
configuration for the pip side, conda's ``.condarc`` for the channels. Nothing read here is
printed or written anywhere (a proxy URL may hold a password).

pip: the configuration files in pip's order (https://pip.pypa.io/en/stable/topics/configuration/:
global ``/etc/xdg/pip/pip.conf`` and ``/etc/pip.conf``, user ``~/.pip/pip.conf`` and
``$XDG_CONFIG_HOME/pip/pip.conf``, site ``$VIRTUAL_ENV/pip.conf``, then ``PIP_CONFIG_FILE``),
sections ``[global]`` then ``[download]``/``[install]``, then ``PIP_<OPTION>`` variables. Used:
``proxy``, ``cert`` (CA bundle), ``client-cert``, ``trusted-host`` (no certificate check for that
host). Without ``cert``, ``SSL_CERT_FILE`` (what uv reads) is the CA bundle. requests itself adds
the ``HTTP(S)_PROXY``/``NO_PROXY`` variables, ``REQUESTS_CA_BUNDLE`` and ``~/.netrc`` logins.
``lock`` without ``--pip-index`` resolves on pip's ``index-url`` and ``extra-index-url`` (logins
included) under pip's rule, the best version of all indexes, with its ``trusted-host`` and
``keyring-provider`` (``uv_index_environment``); the lock records each file's URL without the
login, and create's downloads add the login again for that host. The index URL itself is never
a lock input.

conda: ``proxy_servers`` and ``ssl_verify`` (true, false or a CA bundle path) of the
``.condarc`` files conda reads by default (https://docs.conda.io/projects/conda/en/latest/
user-guide/configuration/use-condarc.html: ``/etc/conda/.condarc``, ``~/.condarc``,
``~/.config/conda/.condarc``, ``$CONDARC``), later files winning.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_PIP_KEYS = (
    "proxy",
    "cert",
    "client-cert",
    "trusted-host",
    "index-url",
    "extra-index-url",
    "keyring-provider",
)


def pip_config_files(env: Mapping[str, str]) -> list[Path]:
    home = Path(env.get("HOME") or Path.home())
    xdg = env.get("XDG_CONFIG_HOME") or str(home / ".config")
    files = [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(xdg) / "pip" / "pip.conf"]
    if env.get("VIRTUAL_ENV"):
        files.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")
    if env.get("PIP_CONFIG_FILE"):
        if env["PIP_CONFIG_FILE"] == os.devnull:
            return []
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def pip_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The pip options that matter for downloads, as pip would see them."""
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    for path in pip_config_files(env):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error):
            continue
        for section in ("global", "download", "install"):
            if parser.has_section(section):
                for key in _PIP_KEYS:
                    if parser.has_option(section, key):
                        out[key] = parser.get(section, key).strip()
    for key in _PIP_KEYS:
        value = env.get("PIP_" + key.upper().replace("-", "_"))
        if value:
            out[key] = value.strip()
    return out


def pip_indexes(env: Mapping[str, str] | None = None) -> tuple[str | None, list[str]]:
    """The user's pip ``index-url`` (None: pip's default, PyPI) and ``extra-index-url`` list,
    credentials included: for the resolver's environment and the download logins only, never
    for a lock, a message or a command line."""
    settings = pip_settings(env)
    return settings.get("index-url") or None, settings.get("extra-index-url", "").split()


def uv_index_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The user's pip index settings as uv's variables (https://docs.astral.sh/uv/reference/
    environment/: ``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL``, ``UV_INDEX_STRATEGY``,
    ``UV_INSECURE_HOST``, ``UV_KEYRING_PROVIDER``), passed
    in uv's environment rather than on its command line, where any local user could read a
    password with ``ps``. uv reads ``~/.netrc`` itself."""
    settings = pip_settings(env)
    index, extra = pip_indexes(env)
    out: dict[str, str] = {}
    if index:
        out["UV_INDEX_URL"] = index
    if extra:
        # pip gathers the candidates of index-url and every extra-index-url and takes the best
        # version of all (pip/_internal/index/package_finder.py, find_all_candidates and
        # _sort_key); uv's default (first-index) stops at the first index that has the name at
        # all, and ranks the extra indexes above the main one, so a stale or squatted copy on an
        # extra index would win. unsafe-best-match is uv's mode for pip's behaviour
        # (https://docs.astral.sh/uv/concepts/indexes/#searching-across-multiple-indexes);
        # only set when there are extra indexes, where it changes nothing else
        out["UV_EXTRA_INDEX_URL"] = " ".join(extra)
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    if settings.get("trusted-host"):
        out["UV_INSECURE_HOST"] = " ".join(settings["trusted-host"].split())
    if settings.get("keyring-provider") in ("subprocess", "disabled"):
        out["UV_KEYRING_PROVIDER"] = settings["keyring-provider"]
    return out


def _logins(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """host[:port] -> (user, password) of the user's pip index URLs that carry a login."""
    index, extra = pip_indexes(env)
    out: dict[str, tuple[str, str]] = {}
    for url in [u for u in (index, *extra) if u]:
        parts = urlsplit(url)
        if parts.username is not None and parts.hostname:
            host = parts.hostname + (f":{parts.port}" if parts.port else "")
            out[host] = (unquote(parts.username), unquote(parts.password or ""))
    return out


class _Session:
    """requests' Session, with certificate checks off for pip's trusted hosts only (or for
    every host: ``.condarc``'s ``ssl_verify: false``). Where the user turned them off, urllib3's
    InsecureRequestWarning is not printed for each request (pip and conda keep quiet too)."""

    def __init__(
        self,
        session: Any,
        trusted: frozenset[str],
        everywhere: bool = False,
        logins: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self.session = session
        self.trusted = trusted
        self.everywhere = everywhere
        self.logins = dict(logins or {})

    def get(self, url: str, **kwargs: Any) -> Any:
        parts = urlsplit(url)
        login = self.logins.get(parts.netloc) or self.logins.get(parts.hostname or "")
        if login is not None and "auth" not in kwargs and parts.username is None:
            kwargs["auth"] = login  # the login of the user's pip index for the files it serves
        if self.everywhere or parts.hostname in self.trusted or parts.netloc in self.trusted:
            import warnings

            from urllib3.exceptions import InsecureRequestWarning

            kwargs["verify"] = False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", InsecureRequestWarning)
                return self.session.get(url, **kwargs)
        return self.session.get(url, **kwargs)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def pip_session(env: Mapping[str, str] | None = None) -> _Session:
    """A session for the pip side's downloads under the user's pip settings."""
    import requests

    env = os.environ if env is None else env
    settings = pip_settings(env)
    session = requests.Session()
    if settings.get("proxy"):
        session.proxies.update({"http": settings["proxy"], "https": settings["proxy"]})
    if settings.get("cert"):
        session.verify = settings["cert"]
    elif env.get("SSL_CERT_FILE") and not env.get("REQUESTS_CA_BUNDLE"):
        session.verify = env["SSL_CERT_FILE"]
    if settings.get("client-cert"):
        session.cert = settings["client-cert"]
    trusted = frozenset(settings.get("trusted-host", "").split())
    return _Session(session, trusted, logins=_logins(env))


def condarc_files(env: Mapping[str, str]) -> list[Path]:
    home = Path(env.get("HOME") or Path.home())
    files = [Path("/etc/conda/.condarc"), home / ".config" / "conda" / ".condarc"]
    files.append(home / ".condarc")
    if env.get("CONDARC"):
        files.append(Path(env["CONDARC"]))
    return files


def conda_settings(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``proxy_servers`` and ``ssl_verify`` from the ``.condarc`` files, typed as conda reads
    them (ruamel, YAML 1.2: conda/conda, conda/common/serialize.py): ``ssl_verify: no`` is the
    text ``no`` there too, not false. A file that does not read is skipped."""
    from envfactory.errors import EnvfactoryError
    from envfactory.yamlio import load_plain

    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for path in condarc_files(env):
        try:
            doc = load_plain(str(path), path.read_text(encoding="utf-8"), "fix the .condarc")
        except (OSError, UnicodeDecodeError, EnvfactoryError):
            continue
        if not isinstance(doc, dict):
            continue
        proxies = doc.get("proxy_servers")
        if isinstance(proxies, dict):
            out["proxy_servers"] = {str(k): str(v) for k, v in proxies.items()}
        if isinstance(doc.get("ssl_verify"), (bool, str)):
            out["ssl_verify"] = doc["ssl_verify"]
    return out


def conda_session(env: Mapping[str, str] | None = None) -> Any:
    """A requests session for channel downloads under the user's ``.condarc``."""
    import requests

    session = requests.Session()
    settings = conda_settings(env)
    if settings.get("proxy_servers"):
        session.proxies.update(settings["proxy_servers"])
    verify = settings.get("ssl_verify")
    if verify is False or (isinstance(verify, str) and verify.lower() == "false"):
        return _Session(session, frozenset(), everywhere=True)
    if isinstance(verify, str) and verify.lower() != "true":
        if not Path(verify).exists():  # conda refuses it too (not a bool, file or directory)
            from envfactory.errors import UserInputError

            raise UserInputError(
                f".condarc: ssl_verify {verify!r} is not true, false or a CA bundle's path",
                "write 'ssl_verify: false' to turn the checks off ('no' is text in YAML 1.2, "
                "as conda reads .condarc), or the path of a CA bundle",
            )
        session.verify = verify
    return _Session(session, frozenset())
