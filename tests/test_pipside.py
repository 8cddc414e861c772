"""create's pip half: wheels installed into the environment as pip would (scripts in bin/ or
Scripts\\ naming the environment's python, RECORD/INSTALLER/REQUESTED), pip files kept in the
package cache by sha256 (a second create downloads nothing), each wheel's METADATA held to the
lock, only vetted sdists built without --allow-build, and a build with no network.

The tf114-cuda100 wheels are the stub wheels of tests/channel_builder.py (real names, versions,
requirements and console scripts; tiny payloads). The sdists of the network tests are the real
ones from PyPI (gast 0.2.2: 10 kB), and so is the setuptools wheel they are built with (1.2 MB),
kept in pytest's cache between runs."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from envfactory.cache.pipcache import PipCache
from envfactory.cache.pkgcache import CacheLocation, PackageCache
from envfactory.errors import ToolError, UserInputError
from envfactory.install.create import create_environment
from envfactory.install.verify import verify_environment
from envfactory.lockfile.models import LockedPackage

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
GAST = LockedPackage(
    "pip",
    "gast",
    "0.2.2",
    "linux-64",
    "https://files.pythonhosted.org/packages/4e/35/11749bf99b2d4e3cceb4d55ca22590b0d7c2c62b9de38ac4a4a7f4687421/gast-0.2.2.tar.gz",
    sha256="fe939df4583692f0512161ec1c880e0a10e71e6a232da045ab8edd3756fbadf0",
)


def test_console_scripts_land_in_bin_with_the_environments_shebang(
    tf114_lock: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "envs" / "tf114"
    create_environment(tf114_lock, prefix, platform="linux-64")
    site = prefix / "lib/python3.7/site-packages"
    for name in ("tensorboard", "saved_model_cli", "freeze_graph", "tflite_convert", "toco"):
        script = prefix / "bin" / name
        assert script.is_file() and os.access(script, os.X_OK), name
        lines = script.read_text().splitlines()
        assert lines[0] == f"#!{prefix}/bin/python", name  # the final prefix, not the staging
    assert "from tensorflow.python.tools.saved_model_cli import main" in (
        (prefix / "bin/saved_model_cli").read_text()
    )
    assert not (site / "bin").exists()  # where pip --target put them
    info = site / "tensorflow_gpu-1.14.0.dist-info"
    assert (info / "INSTALLER").read_text() == "envfactory\n"
    assert (info / "REQUESTED").is_file()  # the combo's requirement
    assert not (site / "tensorboard-1.14.0.dist-info/REQUESTED").exists()  # a dependency
    record = (info / "RECORD").read_text().splitlines()
    assert any(line.startswith("../../../bin/saved_model_cli,sha256=") for line in record)
    assert any(line.startswith("tensorflow_gpu/__init__.py,sha256=") for line in record)
    assert verify_environment(prefix).identical


def test_compile_is_refused_for_an_environment_this_machine_cannot_run(
    tf114_lock: Path, tmp_path: Path
) -> None:
    with pytest.raises(UserInputError, match=r"--compile runs the environment's python"):
        create_environment(tf114_lock, tmp_path / "w", platform="win-64", compile_bytecode=True)
    assert not (tmp_path / "w").exists()


def test_win_layout_has_exe_launchers_in_scripts(tf114_lock: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "win"
    create_environment(tf114_lock, prefix, platform="win-64")
    launcher = (prefix / "Scripts/saved_model_cli.exe").read_bytes()
    assert launcher[:2] == b"MZ"  # a Windows executable (installer's t64.exe launcher)
    windows_python = "Z:" + str(prefix).replace("/", "\\") + "\\python.exe"
    assert f"#!{windows_python}\n".encode() in launcher
    assert (prefix / "Lib/site-packages/tensorflow_gpu-1.14.0.dist-info/RECORD").is_file()
    assert not (prefix / "bin").exists()


def _serve(tmp_path: Path) -> tuple[str, list[str], object]:
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    root = tmp_path / "www"
    root.mkdir()
    seen: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *_args: object) -> None:
            seen.append(self.path)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", seen, httpd


def test_a_second_create_downloads_nothing(
    tf114_lock: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    url, seen, httpd = _serve(tmp_path)
    shutil.copytree(test_channels["wheels"], tmp_path / "www" / "wheels")
    lock = tmp_path / "lock" / "conda-lock.yml"
    lock.parent.mkdir()
    lock.write_text(
        tf114_lock.read_text().replace(test_channels["wheels"].resolve().as_uri(), f"{url}/wheels")
    )
    assert f"{url}/wheels/tensorflow_gpu-1.14.0" in lock.read_text()
    cache = PackageCache(CacheLocation(tmp_path / "cache"))
    first = create_environment(lock, tmp_path / "one", platform="linux-64", cache=cache)
    sizes = sum(p.stat().st_size for p in (tmp_path / "www/wheels").iterdir())
    assert first.pip == 23 and first.pip_cached == 0
    assert 0 < first.pip_downloaded <= sizes
    assert len(seen) == 23
    second = create_environment(lock, tmp_path / "two", platform="linux-64", cache=cache)
    assert (second.pip_downloaded, second.pip_cached) == (0, 23)
    assert len(seen) == 23  # nothing asked of the server again
    assert verify_environment(tmp_path / "two").identical
    # the second create read no wheel: the files are hard links to the cache's unpacked form
    site = "lib/python3.7/site-packages/tensorflow_gpu/__init__.py"
    one, two = (tmp_path / "one" / site).stat(), (tmp_path / "two" / site).stat()
    assert one.st_ino == two.st_ino and one.st_nlink >= 3  # both environments and the cache
    _check_record(tmp_path / "two" / "lib/python3.7/site-packages")
    httpd.shutdown()  # type: ignore[attr-defined]
    httpd.server_close()  # type: ignore[attr-defined]
    # cache info counts them; clean removes them (the environments keep their files)
    files, built, nbytes = PipCache(cache.root).info()
    assert (files, built) == (23, 0) and nbytes >= first.pip_downloaded
    assert PipCache(cache.root).clean()[0] == 23
    assert PipCache(cache.root).info() == (0, 0, 0)
    assert (tmp_path / "two/bin/tensorboard").is_file()


def test_an_edit_in_one_environment_reaches_neither_the_pip_cache_nor_the_next_create(
    tf114_lock: Path, tmp_path: Path
) -> None:
    """The pip files are hard links to the cache's unpacked wheels (issue 28, item 5): an
    in-place edit in one environment changes the cache's inode, and the next create must not
    link it. Before the per-file check, environment c got the edited bytes."""
    cache = PackageCache(CacheLocation(tmp_path / "cache"))
    site = "lib/python3.7/site-packages/tensorflow_gpu/__init__.py"
    create_environment(tf114_lock, tmp_path / "a", platform="linux-64", cache=cache)
    original = (tmp_path / "a" / site).read_bytes()
    with (tmp_path / "a" / site).open("r+b") as handle:  # in place, as `>>` or a plain editor
        handle.write(b"EDITED!!\n")
    create_environment(tf114_lock, tmp_path / "c", platform="linux-64", cache=cache)
    assert (tmp_path / "c" / site).read_bytes() == original
    assert (tmp_path / "c" / site).stat().st_ino != (tmp_path / "a" / site).stat().st_ino
    assert verify_environment(tmp_path / "c").identical
    _check_record(tmp_path / "c" / "lib/python3.7/site-packages")


def _check_record(site: Path) -> None:
    """Every RECORD row of every installed distribution names a file whose sha256 and size
    are the row's (what ``pip check``'s siblings, ``pip uninstall`` and ``verify``, rely on)."""
    import csv

    infos = sorted(site.glob("*.dist-info"))
    assert infos
    for info in infos:
        with (info / "RECORD").open(newline="") as handle:
            rows = list(csv.reader(handle))
        assert rows[-1] == [f"{info.name}/RECORD", "", ""]
        for path, digest, size in rows[:-1]:
            data = (site / path).read_bytes()
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, int(size)) == (f"sha256={expected.decode()}", len(data)), path


def _wheel(
    folder: Path,
    name: str,
    version: str,
    filename: str,
    says: str | None = None,
    member: str | None = None,
) -> Path:
    """A wheel of ``name`` ``version`` (its .dist-info's name) whose METADATA names ``says``
    (default: ``name``), under any file name; its module is ``member`` if given."""
    info = f"{name}-{version}.dist-info"
    files = {
        member or f"{name}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {says or name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{p},sha256="
        + base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
        + f",{len(t)}"
        for p, t in files.items()
    ]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = folder / filename
    with zipfile.ZipFile(path, "w") as zf:
        for p, t in files.items():
            zf.writestr(p, t)
    return path


def _locked(path: Path, name: str, version: str) -> LockedPackage:
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return LockedPackage("pip", name, version, "linux-64", path.resolve().as_uri(), sha256=sha)


def test_a_wheel_whose_metadata_is_not_the_locked_package_is_refused(tmp_path: Path) -> None:
    from envfactory.install import pipside

    # the file name and the lock say 2.0; the wheel inside is evil 1.0
    wheel = _wheel(tmp_path, "evil", "1.0", "evil-2.0-py3-none-any.whl")
    with pytest.raises(ToolError, match=r"METADATA says evil 1.0, the lock says evil 2.0"):
        pipside.prepare([_locked(wheel, "evil", "2.0")], tmp_path / "cache", platform="linux-64")
    other = _wheel(tmp_path, "good", "2.0", "good-2.0-py3-none-any.whl", says="other")
    with pytest.raises(ToolError, match=r"METADATA says other 2.0, the lock says good 2.0"):
        pipside.prepare([_locked(other, "good", "2.0")], tmp_path / "cache", platform="linux-64")


def test_a_wheel_member_outside_its_scheme_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    from envfactory.install import pipside

    for n, member in enumerate(("../../../../outside.py", "x.data/purelib/../../../../o.py")):
        wheel = _wheel(tmp_path, "x", f"1.{n}", f"x-1.{n}-py3-none-any.whl", member=member)
        with pytest.raises(ToolError, match=r"outside (its scheme|the wheel schemes)"):
            pipside.prepare([_locked(wheel, "x", f"1.{n}")], tmp_path / "c", platform="linux-64")
    assert not list((tmp_path / "c").rglob("*.py"))  # no unpacked member left behind


def test_a_wheel_never_writes_over_a_file_the_conda_side_installed(tmp_path: Path) -> None:
    """installer opens a target for writing; over a conda package's hard link that would edit
    the package cache and every environment linked from it."""
    from envfactory.install import pipside

    wheel = _wheel(tmp_path, "clash", "1.0", "clash-1.0-py3-none-any.whl")
    prepared = pipside.prepare(
        [_locked(wheel, "clash", "1.0")], tmp_path / "cache", platform="linux-64"
    )
    prefix = tmp_path / "env"
    site = prefix / "lib/python3.7/site-packages/clash"
    site.mkdir(parents=True)
    cached = tmp_path / "cache-entry-file"
    cached.write_text("the package cache's bytes\n")
    os.link(cached, site / "__init__.py")
    with pytest.raises(ToolError, match=r"would overwrite .*clash/__init__\.py"):
        pipside.install(prepared, prefix, prefix, "linux-64", "3.7", {})
    assert cached.read_text() == "the package cache's bytes\n"


def _sdist(folder: Path, name: str, setup: str) -> Path:
    path = folder / f"{name}-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in {
            "setup.py": setup,
            f"{name}.py": "",
            "PKG-INFO": f"Metadata-Version: 1.1\nName: {name}\nVersion: 1.0\n",
        }.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{name}-1.0/{rel}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return path


def test_an_unvetted_sdist_runs_no_code_without_allow_build(tmp_path: Path) -> None:
    from envfactory.install import pipside

    ran = tmp_path / "setup-py-ran"
    setup = f"open({str(ran)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup()\n"
    sdist = _sdist(tmp_path, "planted", setup)
    with pytest.raises(UserInputError) as info:
        pipside.prepare([_locked(sdist, "planted", "1.0")], tmp_path / "c", platform="linux-64")
    assert "planted 1.0 (planted-1.0.tar.gz)" in info.value.message
    assert "--allow-build planted" in (info.value.hint or "")
    assert not ran.exists()
    assert not (tmp_path / "c" / ".pypi").exists()  # refused before anything was fetched


def test_a_vetted_sdist_is_vetted_by_its_hash_not_its_name(tmp_path: Path) -> None:
    from envfactory.install import sdistbuild

    assert sdistbuild.is_vetted(GAST)
    assert not sdistbuild.is_vetted(GAST._replace(sha256="0" * 64))
    assert not sdistbuild.is_vetted(GAST._replace(version="0.2.1"))
    with pytest.raises(UserInputError, match=r"gast 0\.2\.2"):
        sdistbuild.vet([GAST._replace(sha256="0" * 64)], ())


@pytest.fixture(scope="module")
def pypi_files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package cache holding the real gast 0.2.2 sdist and the pinned setuptools wheel,
    downloaded once into pytest's cache (network) and copied for this module."""
    from envfactory.install import sdistbuild

    keep = request.config.cache
    folder = Path(keep.mkdir("pypi-sdists")) if keep else tmp_path_factory.mktemp("pypi")
    saved = PipCache(folder)
    for pkg in (GAST, sdistbuild.backend_package("linux-64")):
        saved.fetch(pkg)
    root = tmp_path_factory.mktemp("pkgs")
    shutil.copytree(folder / ".pypi", root / ".pypi", ignore=shutil.ignore_patterns(".tmp-*"))
    return root


@pytest.mark.network
def test_a_vetted_sdist_builds_offline_and_once(pypi_files: Path, tmp_path: Path) -> None:
    from envfactory.install import pipside

    messages: list[str] = []
    first = pipside.prepare([GAST], pypi_files, platform="linux-64", say=messages.append)
    assert first.downloaded == 0 and first.built == ("gast 0.2.2",)
    assert any("building gast 0.2.2 from gast-0.2.2.tar.gz (offline)" in m for m in messages)
    prefix = tmp_path / "env"
    pipside.install(first, prefix, prefix, "linux-64", "3.7", {"gast": None})
    site = prefix / "lib/python3.7/site-packages"
    assert (site / "gast/__init__.py").is_file()
    assert (site / "gast-0.2.2.dist-info/INSTALLER").read_text() == "envfactory\n"
    again: list[str] = []
    second = pipside.prepare([GAST], pypi_files, platform="linux-64", say=again.append)
    assert not any("building" in m for m in again)  # the built wheel came from the cache
    assert second.wheels[0][1] == first.wheels[0][1]


@pytest.mark.network
def test_an_allowed_sdist_builds_with_no_network_in_a_private_directory(
    pypi_files: Path, tmp_path: Path
) -> None:
    from envfactory.install import pipside

    # the build records what it saw: network interfaces, HOME
    setup = (
        "import os, socket\n"
        "seen = repr((sorted(n for _, n in socket.if_nameindex()), os.environ.get('HOME')))\n"
        "open('probe.py', 'w').write('SEEN = ' + seen + '\\n')\n"
        "from setuptools import setup\n"
        "setup(name='probe', version='1.0', py_modules=['probe'])\n"
    )
    sdist = _sdist(tmp_path, "probe", setup)
    messages: list[str] = []
    prepared = pipside.prepare(
        [_locked(sdist, "probe", "1.0")],
        pypi_files,
        platform="linux-64",
        allow_build=["probe"],
        say=messages.append,
    )
    assert any("probe 1.0: building its sdist runs its setup code" in m for m in messages)
    prefix = tmp_path / "env"
    pipside.install(prepared, prefix, prefix, "linux-64", "3.11", {})
    seen = (prefix / "lib/python3.11/site-packages/probe.py").read_text()
    interfaces, home = eval(seen.split("=", 1)[1])  # written by this test
    if shutil.which("unshare"):
        assert interfaces == ["lo"]  # a network namespace of its own: loopback only
    assert home.startswith(os.path.join(os.environ.get("TMPDIR", "/tmp"), "envfactory-build-"))  # noqa: PTH118
    assert not Path(home).exists()  # removed after the build


@pytest.mark.network
def test_mirror_with_an_sdist_then_create_with_the_network_off(
    tf114_lock: Path, test_channels: dict[str, Path], pypi_files: Path, tmp_path: Path
) -> None:
    """tf114-cuda100's real pip side locks gast 0.2.2 as an sdist (it has no wheel): mirror
    carries it and the build backend in a PEP 503 index; create then runs in a network
    namespace of its own (no network at all), with an empty package cache, from DIR alone."""
    from envfactory.install.mirror import mirror_lock

    text = tf114_lock.read_text()
    stub = next(line.split("url: ", 1)[1] for line in text.splitlines() if "gast-0.2.2" in line)
    stub_sha = hashlib.sha256(Path(stub.removeprefix("file://")).read_bytes()).hexdigest()
    lock = tmp_path / "locks/tf114-cuda100/conda-lock.yml"
    lock.parent.mkdir(parents=True)
    lock.write_text(text.replace(stub, GAST.url).replace(stub_sha, GAST.sha256 or ""))
    result = mirror_lock(
        lock,
        tmp_path / "mirror",
        platforms=["linux-64"],
        cache=PackageCache(CacheLocation(pypi_files)),
    )
    files = tmp_path / "mirror/pypi/files"
    assert (files / "gast-0.2.2.tar.gz").is_file()
    assert (files / "setuptools-75.8.0-py3-none-any.whl").is_file()
    page = (tmp_path / "mirror/pypi/simple/gast/index.html").read_text()
    assert f'href="../../files/gast-0.2.2.tar.gz#sha256={GAST.sha256}"' in page
    command = result.create_command("tf114-cuda100").split()
    assert "--pip-index" in command
    if not shutil.which("unshare"):
        pytest.skip("unshare is not here: the network cannot be switched off")
    # the marker alone leads create to the pip index: no --pip-index
    maps = [a for i, a in enumerate(command) if i and command[i - 1] == "--channel-map"]
    env = {**os.environ, "ENVFACTORY_PKGS_DIRS": str(tmp_path / "empty-cache")}
    flags = [f for m in maps for f in ("--channel-map", m)]
    proc = subprocess.run(
        ["unshare", "-rn", ENVFACTORY, "create", str(lock), *flags, "-p", str(tmp_path / "env")],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes downloaded" in proc.stdout
    assert "built from sdists: gast 0.2.2" in proc.stdout
    assert (tmp_path / "env/lib/python3.7/site-packages/gast-0.2.2.dist-info").is_dir()
