"""mirror: a lock's packages over real HTTP (a local server that honours Range and can cut a
download short) into an indexed local channel; resume of a partial download; a corrupt partial
file never taken for a whole one; and create from the mirror alone, verified identical."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.errors import ToolError
from envfactory.install.mirror import fetch_verified, mirror_lock
from envfactory.lockfile.models import LockedPackage
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


@dataclass
class Server:
    """A static file server over ``root`` with ``Range`` support. ``cut`` holds file names
    whose next answer stops after ``cut_at`` bytes (a dropped connection)."""

    root: Path
    url: str = ""
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    cut: set[str] = field(default_factory=set)
    cut_at: int = 100_000


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            rel = self.path.split("?", 1)[0].lstrip("/")
            wanted = self.headers.get("Range")
            server.requests.append((rel, wanted))
            path = server.root / rel
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            start = 0
            if wanted and wanted.startswith("bytes="):
                start = int(wanted.removeprefix("bytes=").split("-", 1)[0])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if path.name in server.cut:
                server.cut.discard(path.name)
                self.wfile.write(body[: server.cut_at])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Server]:
    state = Server(root=tmp_path / "www")
    state.root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def conda_package(server: Server, name: str, data: bytes) -> LockedPackage:
    path = server.root / "linux-64" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return LockedPackage(
        manager="conda",
        name=name.split("-", 1)[0],
        version="1.0",
        platform="linux-64",
        url=f"{server.url}/linux-64/{name}",
        build="0",
        subdir="linux-64",
        sha256=hashlib.sha256(data).hexdigest(),
    )


PAYLOAD = bytes(range(256)) * 1024  # 256 KiB: several download chunks


def test_a_partial_download_is_resumed_with_range(http_server: Server, tmp_path: Path) -> None:
    pkg = conda_package(http_server, "demo-1.0-0.tar.bz2", PAYLOAD)
    dest = tmp_path / "mirror" / "linux-64" / "demo-1.0-0.tar.bz2"
    dest.parent.mkdir(parents=True)
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(PAYLOAD[:5000])
    with __import__("requests").Session() as session:
        assert fetch_verified(pkg, dest, session) == "resumed"
    assert http_server.requests == [("linux-64/demo-1.0-0.tar.bz2", "bytes=5000-")]
    assert dest.read_bytes() == PAYLOAD and not part.exists()


def test_a_dropped_connection_leaves_only_a_part_file_then_resumes(
    http_server: Server, tmp_path: Path
) -> None:
    pkg = conda_package(http_server, "demo-1.0-0.tar.bz2", PAYLOAD)
    dest = tmp_path / "mirror" / "linux-64" / "demo-1.0-0.tar.bz2"
    http_server.cut.add(dest.name)
    import requests

    with requests.Session() as session:
        with pytest.raises(ToolError) as info:
            fetch_verified(pkg, dest, session)
        assert info.value.hint and "run the same command again to resume" in info.value.hint
        assert not dest.exists()  # a partly downloaded file never gets the final name
        part = dest.with_name(dest.name + ".part")
        kept = part.read_bytes()  # the whole chunks that arrived before the cut
        assert 0 < len(kept) <= http_server.cut_at and PAYLOAD.startswith(kept)
        assert fetch_verified(pkg, dest, session) == "resumed"
    assert http_server.requests[-1] == (f"linux-64/{dest.name}", f"bytes={len(kept)}-")
    assert dest.read_bytes() == PAYLOAD


def test_a_corrupt_part_file_is_never_taken_for_a_whole_one(
    http_server: Server, tmp_path: Path
) -> None:
    pkg = conda_package(http_server, "demo-1.0-0.tar.bz2", PAYLOAD)
    dest = tmp_path / "mirror" / "linux-64" / "demo-1.0-0.tar.bz2"
    dest.parent.mkdir(parents=True)
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(b"\0" * 5000)  # right length so far, wrong bytes
    import requests

    with requests.Session() as session:
        assert fetch_verified(pkg, dest, session) == "downloaded"
    # resumed first, hash wrong, then fetched whole from the start
    assert [r for _, r in http_server.requests] == ["bytes=5000-", None]
    assert dest.read_bytes() == PAYLOAD


def test_a_file_the_server_changed_is_refused(http_server: Server, tmp_path: Path) -> None:
    pkg = conda_package(http_server, "demo-1.0-0.tar.bz2", PAYLOAD)
    (http_server.root / "linux-64" / "demo-1.0-0.tar.bz2").write_bytes(PAYLOAD[::-1])
    dest = tmp_path / "mirror" / "linux-64" / "demo-1.0-0.tar.bz2"
    import requests

    with requests.Session() as session, pytest.raises(ToolError, match="sha256"):
        fetch_verified(pkg, dest, session)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()


def test_mirror_over_http_then_create_with_no_other_channel(
    http_server: Server, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """lock against a channel served over HTTP -> mirror -> the server and the wheel folder
    go away -> create from the mirror -> verify: identical to the lock."""
    shutil.copytree(test_channels["defaults"], http_server.root / "defaults")
    wheels = tmp_path / "wheels"
    shutil.copytree(test_channels["wheels"], wheels)
    request = LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        platforms=["linux-64", "win-64"],
        channel_map=ChannelMap({"defaults": f"{http_server.url}/defaults"}),
        pip_index=str(wheels),
    )
    lock_dir = tmp_path / "project" / "locks" / "tf114-cuda100"
    lock_combo(request, lock_dir)
    lock = lock_dir / "conda-lock.yml"
    assert f"url: {http_server.url}/defaults/linux-64/" in lock.read_text()

    mirror = tmp_path / "mirror"
    messages: list[str] = []
    result = mirror_lock(lock, mirror, platforms=["linux-64"], progress=messages.append)
    assert result.count("downloaded") == 6 and result.count("copied") == 23
    downloaded = {p for p, _ in http_server.requests if p.endswith(".tar.bz2")}
    assert len(downloaded) == 6  # exactly the locked linux-64 conda packages, nothing else
    assert (mirror / "linux-64" / "repodata.json").is_file()
    assert (mirror / "noarch" / "repodata.json").is_file()
    assert not list(mirror.rglob("*.part"))
    assert messages[-1] == f"indexing {mirror}"

    again = mirror_lock(lock, mirror, platforms=["linux-64"])
    assert again.count("kept") == 29  # nothing fetched twice

    # Nothing but the mirror from here on.
    shutil.rmtree(http_server.root / "defaults")
    shutil.rmtree(wheels)
    project = tmp_path / "project"
    command = result.create_command("tf114-cuda100").split()
    assert command[:3] == ["envfactory", "create", "tf114-cuda100"]
    proc = subprocess.run(
        [ENVFACTORY, *command[1:], "-p", str(tmp_path / "env")],
        cwd=project, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "6 conda + 23 pip packages" in proc.stdout
    verified = subprocess.run(
        [ENVFACTORY, "verify", str(tmp_path / "env")],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout
    assert "is identical to" in verified.stdout

    # Without the channel map the lock's own URLs are gone: with an empty package cache (the
    # session's holds every file now, conda and pip), create fails, nothing is left.
    empty = {**os.environ, "ENVFACTORY_PKGS_DIRS": str(tmp_path / "empty-cache")}
    gone = subprocess.run(
        [ENVFACTORY, "create", "tf114-cuda100", "-p", str(tmp_path / "env2")],
        cwd=project, capture_output=True, text=True, timeout=300, env=empty,
    )  # fmt: skip
    assert gone.returncode == 2, gone.stderr
    assert not (tmp_path / "env2").exists()


def test_cli_mirror_of_a_project_environment(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "envfactory.yaml").write_text(
        "environments:\n  legacy:\n    combo: tf114-cuda100\n    platforms: [linux-64]\n"
        "    add: [opencv=3.4.2, pandas]\n"
    )
    flags = ["--channel-map", f"defaults={test_channels['defaults']}",
             "--pip-index", str(test_channels["wheels"])]  # fmt: skip
    locked = subprocess.run([ENVFACTORY, "lock", *flags], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert locked.returncode == 0, locked.stderr
    proc = subprocess.run([ENVFACTORY, "mirror", "legacy", "offline"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    url = (tmp_path / "offline").resolve().as_uri()
    assert "mirrored 35 files" in proc.stdout  # 13 conda + 22 pip
    assert f"envfactory create legacy --channel-map defaults={url}" in proc.stdout
    assert (tmp_path / "offline/noarch/pytz-2019.1-py_0.tar.bz2").is_file()


def test_subdirs_from_the_lock_must_be_platform_names(tmp_path: Path) -> None:
    """A lock URL ``file:///src/x/../notes.txt`` once made mirror write DIR/../notes.txt."""
    from crafted import Crafted, write_crafted, write_lock

    from envfactory.errors import UserInputError

    pkg = Crafted("good", files={"share/g": b"g\n"})
    archive = write_crafted(tmp_path / "channel", pkg)
    lock = write_lock(tmp_path / "lock", {archive: pkg})
    source = tmp_path / "src"
    (source / "x").mkdir(parents=True)
    (source / "notes.txt").write_text("theirs\n")
    lock.write_text(
        lock.read_text().replace(archive.resolve().as_uri(), f"file://{source}/x/../notes.txt")
    )
    mirror = tmp_path / "out" / "mirror"
    # refused by the lock reader ('..' segment) or, past it, by mirror's subdir check
    with pytest.raises(UserInputError, match=r"'\.\.' path segment|subdir '\.\.'"):
        mirror_lock(lock, mirror)
    from envfactory.install.mirror import relative_path

    bad = LockedPackage(
        manager="conda", name="good", version="1.0", platform="linux-64",
        url=f"file://{source}/x/../notes.txt", build="h0_0", sha256="0" * 64,
    )  # fmt: skip
    with pytest.raises(UserInputError, match=r"subdir '\.\.'.* is not a conda platform"):
        relative_path(bad)
    assert not (tmp_path / "out" / "notes.txt").exists()
    assert not mirror.exists() or list(mirror.rglob("*")) == []


@pytest.mark.parametrize(
    ("subdir", "filename"),
    [("linux-64", "a 1.tar.bz2"), ("linux-64", "notes.txt"), ("etc", "a-1-0.tar.bz2")],
)
def test_file_names_from_the_lock_are_plain(subdir: str, filename: str) -> None:
    from envfactory.errors import UserInputError
    from envfactory.install.mirror import relative_path

    pkg = LockedPackage(
        manager="conda", name="a", version="1", platform="linux-64",
        url=f"https://example.org/c/{subdir}/{filename}", build="0", subdir=subdir,
        sha256="0" * 64,
    )  # fmt: skip
    with pytest.raises(UserInputError):
        relative_path(pkg)
    wheel = LockedPackage(
        manager="pip", name="a", version="1", platform="linux-64",
        url="https://example.org/../../a.sh", sha256="0" * 64,
    )  # fmt: skip
    with pytest.raises(UserInputError, match="not a wheel or sdist file name"):
        relative_path(wheel)


def test_the_hint_names_a_part_file_only_when_there_is_one(tmp_path: Path) -> None:
    import requests

    pkg = LockedPackage(
        manager="conda", name="a", version="1", platform="linux-64",
        url="http://127.0.0.1:9/c/linux-64/a-1-0.tar.bz2", build="0", sha256="0" * 64,
    )  # fmt: skip
    with requests.Session() as session, pytest.raises(ToolError) as info:
        fetch_verified(pkg, tmp_path / "linux-64" / "a-1-0.tar.bz2", session)
    assert info.value.hint is not None and ".part" not in info.value.hint
    assert not list((tmp_path / "linux-64").glob("*.part"))


def test_mirror_and_create_share_the_package_cache(http_server: Server, tmp_path: Path) -> None:
    """Archives mirror downloads go into the package cache; create then needs no network, and
    a second mirror copies them from the cache."""
    from crafted import Crafted, write_crafted, write_lock

    from envfactory.cache.pkgcache import CacheLocation, PackageCache
    from envfactory.install.create import create_environment
    from envfactory.install.verify import verify_environment

    pkgs = [Crafted(f"s{i}", files={f"share/s{i}.txt": f"{i}\n".encode()}) for i in range(3)]
    archives = {write_crafted(http_server.root / "c", p): p for p in pkgs}
    lock = write_lock(tmp_path / "lock", archives)
    lock.write_text(
        lock.read_text().replace(
            (http_server.root / "c").resolve().as_uri(), f"{http_server.url}/c"
        )
    )
    cache = PackageCache(CacheLocation(tmp_path / "cache"))
    first = mirror_lock(lock, tmp_path / "m1", cache=cache)
    assert first.count("downloaded") == 3
    for path in archives:
        assert (tmp_path / "cache" / path.name).read_bytes() == path.read_bytes()
    shutil.rmtree(http_server.root / "c")  # the network is gone
    create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    assert verify_environment(tmp_path / "env").identical
    second = mirror_lock(lock, tmp_path / "m2", cache=cache)
    assert second.count("cached") == 3
