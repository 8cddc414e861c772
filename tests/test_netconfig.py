"""The user's network settings reach the downloads (netconfig.py), over real HTTP(S) on
127.0.0.1: pip's ``proxy``, ``cert`` and ``trusted-host`` (pip.conf or ``PIP_*``) for the pip
files of ``create``; ``.condarc``'s ``proxy_servers`` and ``ssl_verify`` for channel archives.
The proxy is a real forward proxy (absolute-form requests, RFC 9112 3.2.2); the HTTPS origin
has a self-signed certificate made by openssl for this run. A password in a proxy URL never
appears in an error."""

from __future__ import annotations

import hashlib
import os
import ssl
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from envfactory.cache.fetch import download
from envfactory.cache.pipcache import PipCache
from envfactory.cache.pkgcache import CacheLocation, PackageCache
from envfactory.errors import EnvfactoryError
from envfactory.lockfile.models import LockedPackage

PAYLOAD = b"not really a wheel, but the lock's sha256 says what it is\n"
SHA = hashlib.sha256(PAYLOAD).hexdigest()
NAME = "demo-1.0-py3-none-any.whl"


class Server(NamedTuple):
    url: str
    seen: list[str]
    httpd: ThreadingHTTPServer


def _start(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> Server:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    scheme = "https" if tls else "http"
    return Server(f"{scheme}://127.0.0.1:{httpd.server_address[1]}", handler.seen, httpd)  # type: ignore[attr-defined]


def _serving(
    handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None
) -> Iterator[Server]:
    server = _start(handler, tls)
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


class _Answering(BaseHTTPRequestHandler):
    """Records each request's path and answers 200 with ``body``."""

    seen: list[str]

    def body(self) -> bytes:
        raise NotImplementedError

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = self.body()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def _origin_handler() -> type[BaseHTTPRequestHandler]:
    class Origin(_Answering):
        seen: list[str] = []  # noqa: RUF012 - one list per server, made here

        def body(self) -> bytes:
            return PAYLOAD

    return Origin


def _proxy_handler() -> type[BaseHTTPRequestHandler]:
    class Proxy(_Answering):
        seen: list[str] = []  # noqa: RUF012

        def body(self) -> bytes:  # self.path is the absolute form: the URL the client wants
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(self.path, timeout=10) as upstream:
                data: bytes = upstream.read()
            return data

    return Proxy


@pytest.fixture
def origin() -> Iterator[Server]:
    yield from _serving(_origin_handler())


@pytest.fixture
def proxy() -> Iterator[Server]:
    yield from _serving(_proxy_handler())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_origin(certificate: tuple[Path, Path]) -> Iterator[Server]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    yield from _serving(_origin_handler(), context)


@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own settings stay out: HOME is the test's, no proxy or CA variables."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
        "REQUESTS_CA_BUNDLE",
        "SSL_CERT_FILE",
        "CURL_CA_BUNDLE",
        "CONDARC",
        "PIP_CONFIG_FILE",
        "PIP_PROXY",
        "PIP_CERT",
        "PIP_TRUSTED_HOST",
    ):
        monkeypatch.delenv(name, raising=False)  # fmt: skip


def _fetch(url: str, tmp_path: Path) -> int:
    pkg = LockedPackage("pip", "demo", "1.0", "linux-64", f"{url}/files/{NAME}", sha256=SHA)
    fetched = PipCache(tmp_path / "cache").fetch(pkg)
    assert fetched.path.read_bytes() == PAYLOAD
    return fetched.downloaded


def test_pip_conf_proxy_carries_the_pip_downloads(
    origin: Server, proxy: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "home/.config/pip/pip.conf"  # the user file, in pip's order
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[global]\nproxy = {proxy.url}\n")
    assert _fetch(origin.url, tmp_path) == len(PAYLOAD)
    assert proxy.seen == [f"{origin.url}/files/{NAME}"]  # through the proxy, in absolute form


def test_pip_proxy_variable_wins_over_pip_conf(
    origin: Server, proxy: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nproxy = http://127.0.0.1:9\n")  # discard port: would fail
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_PROXY", proxy.url)
    _fetch(origin.url, tmp_path)
    assert len(proxy.seen) == 1


def test_a_password_in_the_proxy_url_is_never_printed(
    origin: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_PROXY", "http://alice:s3cret@127.0.0.1:9")  # nothing listens
    with pytest.raises(EnvfactoryError) as err:
        _fetch(origin.url, tmp_path)
    assert "s3cret" not in f"{err.value} {err.value.hint}"
    assert "cannot download" in str(err.value)


def test_an_https_index_needs_its_certificate_or_a_trusted_host(
    tls_origin: Server,
    certificate: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(EnvfactoryError, match="cannot download"):
        _fetch(tls_origin.url, tmp_path)  # a self-signed certificate: refused by default
    monkeypatch.setenv("PIP_CERT", str(certificate[0]))
    assert _fetch(tls_origin.url, tmp_path / "a") == len(PAYLOAD)
    monkeypatch.delenv("PIP_CERT")
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ntrusted-host = 127.0.0.1\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert _fetch(tls_origin.url, tmp_path / "b") == len(PAYLOAD)


def _download_channel_file(url: str, tmp_path: Path) -> bytes:
    archive = f"{url}/linux-64/demo-1.0-0.tar.bz2"
    pkg = LockedPackage("conda", "demo", "1.0", "linux-64", archive, "0", sha256=SHA)
    staging = tmp_path / "staging"
    staging.mkdir(parents=True, exist_ok=True)
    PackageCache(CacheLocation(tmp_path / "pkgs"))  # a cache opened reads the settings anew
    return download(pkg, staging).read_bytes()


def test_condarc_proxy_servers_carry_the_channel_downloads(
    origin: Server, proxy: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    condarc = tmp_path / "home/.condarc"
    condarc.parent.mkdir(parents=True)
    condarc.write_text(f"proxy_servers:\n  http: {proxy.url}\n  https: {proxy.url}\n")
    assert _download_channel_file(origin.url, tmp_path) == PAYLOAD
    assert proxy.seen == [f"{origin.url}/linux-64/demo-1.0-0.tar.bz2"]


def test_condarc_ssl_verify_names_the_ca_bundle_or_turns_checks_off(
    tls_origin: Server,
    certificate: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(EnvfactoryError, match="cannot download"):
        _download_channel_file(tls_origin.url, tmp_path)
    condarc = tmp_path / "condarc.yml"
    monkeypatch.setenv("CONDARC", str(condarc))
    condarc.write_text(f"ssl_verify: {certificate[0]}\n")
    assert _download_channel_file(tls_origin.url, tmp_path / "a") == PAYLOAD
    condarc.write_text("ssl_verify: false\n")
    assert _download_channel_file(tls_origin.url, tmp_path / "b") == PAYLOAD
    # conda reads .condarc as YAML 1.2 (ruamel): "no" is text there, not false, so it does not
    # turn the checks off (YAML 1.1, PyYAML's reading, made it false)
    condarc.write_text("ssl_verify: no\n")
    with pytest.raises(EnvfactoryError, match="ssl_verify 'no' is not true, false or a CA"):
        _download_channel_file(tls_origin.url, tmp_path / "c")


def test_lock_uses_the_users_private_index_and_writes_no_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip.conf's index-url (with a login) is where uv resolves when no --pip-index is given;
    the locked URL names the file on that index without the login, and create's download adds
    the user's login again. The password is nowhere in what lock returns."""
    import base64

    from channel_builder import write_wheel

    from envfactory.solve.pypi import lock_requirements

    wheel = write_wheel(
        tmp_path / "files", "envf-private-probe", "1.0",
        "envf_private_probe-1.0-py3-none-any.whl", [], None,
    )  # fmt: skip
    body = wheel.read_bytes()
    sha = hashlib.sha256(body).hexdigest()
    login = "Basic " + base64.b64encode(b"alice:s3cret").decode()

    class Index(BaseHTTPRequestHandler):
        seen: list[str] = []  # noqa: RUF012

        def do_GET(self) -> None:
            self.seen.append(self.path)
            if self.headers.get("Authorization") != login:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="private"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path.rstrip("/") == "/simple/envf-private-probe":
                page = f'<a href="/files/{wheel.name}#sha256={sha}">{wheel.name}</a>'.encode()
                self._send(page, "text/html")
            elif self.path == f"/files/{wheel.name}":
                self._send(body, "application/octet-stream")
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        def do_HEAD(self) -> None:  # uv asks before a range request; it gets no ranges
            self.head = True
            self.do_GET()

        def _send(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not getattr(self, "head", False):
                self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            pass

    server = _start(Index)
    try:
        host = server.url.removeprefix("http://")
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = http://alice:s3cret@{host}/simple\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        (pkg,) = lock_requirements(
            ["envf-private-probe==1.0"], platform="linux-64", python="3.11", glibc="2.17",
            conda_packages=[],
        )  # fmt: skip
        assert pkg.url == f"{server.url}/files/{wheel.name}"  # the private index, no login
        assert "s3cret" not in repr(pkg) and "alice" not in repr(pkg)
        assert pkg.sha256 == sha
        fetched = PipCache(tmp_path / "cache").fetch(pkg)  # the login added for that host
        assert fetched.path.read_bytes() == body
        assert f"/files/{wheel.name}" in Index.seen
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def _simple_index(root: Path, wheels: list[Path]) -> None:
    """A PEP 503 simple index of ``wheels`` under ``root`` (``simple/`` and ``files/``)."""
    import shutil

    from packaging.utils import canonicalize_name, parse_wheel_filename

    for wheel in wheels:
        name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
        (root / "files").mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, root / "files" / wheel.name)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        with page.open("a", encoding="utf-8") as out:
            out.write(f'<a href="../../files/{wheel.name}#sha256={sha}">{wheel.name}</a>\n')


def test_lock_takes_the_best_version_of_every_pip_index_as_pip_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip.conf's extra-index-url reaches the resolver, and the choice across indexes is pip's:
    the newest version of all of them (uv alone would stop at the first index that has a name,
    and uv ranks an extra index first). Real pip, on the same pip.conf, is the judge: each
    locked file is the one ``pip install --dry-run --report`` picks. The main index is served
    over HTTP on 127.0.0.1, the extra one is a folder (file://), as on many lab machines."""
    import json
    import sys
    from http.server import SimpleHTTPRequestHandler

    from channel_builder import write_wheel

    from envfactory.solve.pypi import lock_requirements

    def wheel(folder: str, name: str, version: str, requires: list[str]) -> Path:
        stem = name.replace("-", "_")
        return write_wheel(
            tmp_path / "built" / folder, name, version, f"{stem}-{version}-py3-none-any.whl",
            requires, None,
        )  # fmt: skip

    # envf-top 2.0 is on the main index, 1.0 (older) on the extra one; envf-extra-only is on
    # the extra index alone; envf-twin 1.0 is on both, with different payloads
    _simple_index(tmp_path / "main", [
        wheel("main", "envf-top", "2.0", ["envf-extra-only", "envf-twin"]),
        wheel("main", "envf-twin", "1.0", []),
    ])  # fmt: skip
    _simple_index(tmp_path / "extra", [
        wheel("extra", "envf-top", "1.0", []),
        wheel("extra", "envf-extra-only", "1.0", []),
        wheel("extra", "envf-twin", "1.0", ["envf-extra-only"]),
    ])  # fmt: skip

    class Main(SimpleHTTPRequestHandler):
        seen: list[str] = []  # noqa: RUF012

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(tmp_path / "main"), **kwargs)

        def log_message(self, *_args: object) -> None:
            pass

    server = _start(Main)
    try:
        conf = tmp_path / "pip.conf"
        conf.write_text(
            f"[global]\nindex-url = {server.url}/simple\n"
            f"extra-index-url = {(tmp_path / 'extra' / 'simple').as_uri()}\n"
        )
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
        locked = lock_requirements(
            ["envf-top"], platform="linux-64", python="3.11", glibc="2.17", conda_packages=[]
        )
        report = tmp_path / "report.json"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
             "--no-cache-dir", "--quiet", "--report", str(report), "envf-top"],
            check=True, capture_output=True, env={**os.environ, "PIP_CONFIG_FILE": str(conf)},
        )  # fmt: skip
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    by_pip = {
        item["metadata"]["name"]: (item["metadata"]["version"], item["download_info"]["url"])
        for item in json.loads(report.read_text())["install"]
    }
    by_lock = {p.name: (p.version, p.url) for p in locked}
    assert by_lock == by_pip
    assert by_lock["envf-top"][0] == "2.0"  # the main index's newer version
    assert by_lock["envf-extra-only"][1].startswith("file://")  # the extra index was searched
