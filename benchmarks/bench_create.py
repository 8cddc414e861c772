"""Benchmark: ``envfactory create`` with a cold and a warm package cache, against its floors.

    .venv/bin/python benchmarks/bench_create.py [--packages 210] [--mb 362] [--repeat 5]
                                                [--warm-repeat 15] [--formats tar.bz2,conda]
                                                [--keep DIR]

Input: a generated channel of PACKAGES conda packages holding MB megabytes of files in all
(text-like content that compresses like shared libraries and Python sources do, 2:1 to 4:1;
sizes vary 50x between packages, as in a TF stack), written as real ``.tar.bz2`` and as ``.conda``
(zstd) archives by tests/crafted.py, and a conda-lock.yml naming them by file:// URL with their
sha256. The default size is the 210-package, 362 MB set of issue 11.

Every figure is a whole process (``python -m envfactory``, ``cp``, ``tar``...), run REPEAT times
(the warm figures WARM_REPEAT times: a run takes a third of a second, and on these VMs one in
three is slowed by the disk's journal, so five runs leave their median to chance), printed as
min / median / max wall seconds, and peak RSS (``wait4``'s ru_maxrss) for create.
Floors, measured in the same run over the same files, each run in turn with the create it is
compared with (create i, then floor i, then create i + 1), so a slow minute of the machine falls
on both:

* ``cp -al`` of the created prefix (what a warm create does at best: hard links);
* parallel extraction of the same archives, one process per core: ``tar -xjf`` for
  ``.tar.bz2``; for ``.conda`` (a zip holding two ``.tar.zst``) ``unzip -p | tar --zstd -x``
  when both tools are installed, else a Python process pool (zipfile + zstandard + tarfile);
* py-rattler's own ``install`` of the same records from the same warm cache, a separate
  Python process that imports only rattler (its default validation of the cache entries).

For reference, rattler's extractor alone (``rattler.package_streaming.extract``, one process per
core, no checks): what create's workers extract with, so that the cold ratio splits into
rattler's extractor against ``tar`` and create's own work (hash checks of every file, linking,
start-up) against rattler's extractor.

Targets (issue 11): warm create <= 10x ``cp -al`` and <= 1.2x rattler's install; cold create
<= 1.3x parallel extraction; peak memory <= 300 MB for the 362 MB set.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from crafted import Crafted, write_crafted, write_lock
from harness import ENV, Row, Target, Times, parser, report

WORDS = [
    *("import", "numpy", "tensor", "cuda", "kernel", "float32", "matmul", "gradient", "session"),
    *("graph", "__init__", "self", "def", "return", "class", "lib64", "libcudart", "symbol"),
    *("version", "GLIBC_2.17", "_ZN10tensorflow6kernel", "0x7f45", "0x0000", ".text"),
    *(".rodata", ".data", ".bss", "ELF", "dynamic", "relocation"),
]


def corpus(rng: random.Random, size: int) -> bytes:
    """Text-like bytes: words and numbers, with binary-ish runs; compresses ~3:1 with bzip2."""
    out = bytearray()
    while len(out) < size:
        if rng.random() < 0.2:
            out += rng.randbytes(rng.randint(16, 256))
        else:
            out += (" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) + "\n").encode()
    return bytes(out[:size])


def generate(root: Path, count: int, total_mb: float, fmt: str, seed: int = 11) -> Path:
    """The channel and the lock for ``count`` packages of ``total_mb`` MB in ``fmt``."""
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0, 1.2) for _ in range(count)]
    scale = total_mb * 1e6 / sum(weights)
    pool = corpus(rng, 4 << 20)
    archives = {}
    for i, weight in enumerate(weights):
        size = max(2000, int(weight * scale))
        nfiles = max(1, min(400, size // 40_000))
        files = {}
        for j in range(nfiles):
            n = size // nfiles
            start = rng.randrange(0, len(pool) - n) if n < len(pool) else 0
            data = pool[start : start + n] if n < len(pool) else corpus(rng, n)
            files[f"lib/pkg{i:03d}/m{j:03d}.so"] = data
        pkg = Crafted(f"pkg{i:03d}", files=files, fmt=fmt)
        archives[write_crafted(root / "channel", pkg)] = pkg
    return write_lock(root / "lock", archives)


def timed(command: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(command), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"failed: {' '.join(command)}\n{err}")
    if proc.stderr:
        proc.stderr.close()
    return elapsed, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def interleaved(
    repeat: int,
    *steps: tuple[Callable[[int], None], Callable[[int], tuple[float, int, float]]],
) -> list[tuple[Times, list[int]]]:
    """``series`` of several (prepare, run) pairs in turns: run i of each, then run i + 1."""
    out: list[tuple[Times, list[int]]] = [(Times(), []) for _ in steps]
    for i in range(repeat):
        for (prepare, run), (times, peaks) in zip(steps, out, strict=True):
            prepare(i)
            seconds, peak, cpu = run(i)
            times.runs.append(seconds)
            times.cpu.append(cpu)
            peaks.append(peak)
    return out


def show(label: str, times: Times, peaks: list[int] | None = None) -> float:
    text = f"  {label:<44} {times.min:7.3f} {times.median:7.3f} {times.max:7.3f} s"
    if peaks:
        text += f"   peak {max(peaks) / 1024:6.0f} MiB"
    print(text, flush=True)
    return times.median


RATTLER_INSTALL = """
import asyncio, json, sys
import rattler
from rattler import BuildString, PackageRecord, RepoDataRecord, Subdir
records = []
for p in json.load(open(sys.argv[1])):
    r = PackageRecord(name=p["name"], version=p["version"], build=BuildString(p["build"]),
                      build_number=0, subdir=p["subdir"], depends=[],
                      sha256=bytes.fromhex(p["sha256"]), md5=bytes.fromhex(p["md5"]))
    records.append(RepoDataRecord(r, p["fn"], p["url"], p["channel"]))
asyncio.run(rattler.install(records, target_prefix=sys.argv[2], cache_dir=sys.argv[3],
                            platform=Subdir("linux-64"), show_progress=False,
                            execute_link_scripts=False))
import os
os._exit(0)  # py-rattler's runtime can abort Python's finalization (PyGILState_Release)
"""

PHASES = """
import json, sys, time
start = time.perf_counter()
from envfactory.__main__ import load_cli
cli = load_cli()  # as the console script does
imported = time.perf_counter()
from envfactory.install import create
from envfactory.lockfile import read as lockfile
from envfactory.cache import pkgcache
from envfactory.solve import rattler_adapter
spent = {}
def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - t
    setattr(owner, name, wrapper)
timed(lockfile, "read_lock", "read the lock")
timed(pkgcache.PackageCache, "acquire", "cache pass")
timed(rattler_adapter, "install", "rattler links")
timed(create, "check_installed", "post-link check")
modules = time.perf_counter()
code = cli.run(["create", sys.argv[1], "--platform", "linux-64", "-p", sys.argv[2]])
end = time.perf_counter()
phases = {"import the CLI": imported - start, "import create and rattler": modules - imported}
phases.update(spent)
phases["the rest"] = (end - modules) - sum(spent.values())
print(json.dumps({"code": code, "total": end - start, **phases}))
"""


EXTRACT_RATTLER = """
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
def one(job):
    from rattler.package_streaming import extract
    extract(Path(job[0]), Path(job[1]))
if __name__ == "__main__":
    out = sys.argv[1]
    jobs = [(p, f"{out}/{i}") for i, p in enumerate(sys.argv[2:])]
    with ProcessPoolExecutor() as pool:
        list(pool.map(one, jobs))
"""

EXTRACT_CONDA = """
import io, sys, tarfile, zipfile
from concurrent.futures import ProcessPoolExecutor
import zstandard
def one(job):
    path, dest = job
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name.endswith(".tar.zst"):
                with z.open(name) as raw:
                    reader = zstandard.ZstdDecompressor().stream_reader(raw)
                    with tarfile.open(fileobj=reader, mode="r|") as tar:
                        tar.extractall(dest, filter="tar")
if __name__ == "__main__":
    out = sys.argv[1]
    jobs = [(p, f"{out}/{i}") for i, p in enumerate(sys.argv[2:])]
    with ProcessPoolExecutor() as pool:
        list(pool.map(one, jobs))
"""


def parallel_extract(archives: list[Path], dest: Path, fmt: str) -> list[str]:
    """One command line that extracts every archive, one process per core."""
    cores = str(os.cpu_count() or 1)
    if fmt == "tar.bz2":
        script = 'mkdir -p "$1/$(basename "$2")" && tar -xjf "$2" -C "$1/$(basename "$2")"'
        return ["sh", "-c", f'printf "%s\\n" "$@" | xargs -P {cores} -n 1 sh -c \'{script}\' _ '
                f'"{dest}"', "_", *map(str, archives)]  # fmt: skip
    if shutil.which("unzip") and shutil.which("zstd"):
        script = (
            'd="$1/$(basename "$2")"; mkdir -p "$d"; for m in $(unzip -Z1 "$2" | grep tar.zst); '
            'do unzip -p "$2" "$m" | tar --zstd -x -C "$d"; done'
        )
        return ["sh", "-c", f'printf "%s\\n" "$@" | xargs -P {cores} -n 1 sh -c \'{script}\' _ '
                f'"{dest}"', "_", *map(str, archives)]  # fmt: skip
    return [sys.executable, "-c", EXTRACT_CONDA, str(dest), *map(str, archives)]


def warm_phases(root: Path, lock: Path, python: str, env: dict[str, str], repeat: int) -> str:
    """Where a warm create's time goes: one in-process create per run (``PHASES``), median of
    each phase (the link runs in a thread; the cache entries are walked meanwhile)."""
    runs: list[dict[str, float]] = []
    for i in range(repeat):
        prefix = root / f"phases{i}"
        shutil.rmtree(prefix, ignore_errors=True)
        proc = subprocess.run(
            [python, "-c", PHASES, str(lock), str(prefix)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        runs.append(json.loads(proc.stdout.splitlines()[-1]))
        shutil.rmtree(prefix, ignore_errors=True)
    keys = [k for k in runs[0] if k not in ("code", "total")]
    parts = ", ".join(f"{k} {statistics.median(r[k] for r in runs) * 1000:.0f}" for k in keys)
    total = statistics.median(r["total"] for r in runs) * 1000
    return (
        f"warm create, phases in one process (ms, median of {repeat}): {total:.0f} after "
        f"Python's start-up = {parts}"
    )


def bench(
    root: Path,
    count: int,
    total_mb: float,
    fmt: str,
    repeat: int,
    warm_repeat: int,
    notes: list[str],
) -> list[Row]:
    print(f"\n{count} packages, {total_mb:.0f} MB of files, .{fmt} archives", flush=True)
    t0 = time.perf_counter()
    # In a child process: this process stays small, and a child it starts inherits its peak
    # RSS through fork (Linux keeps ru_maxrss across exec), which would inflate every figure.
    subprocess.run(
        [sys.executable, __file__, "--generate", str(root), str(count), str(total_mb), fmt],
        check=True,
    )
    lock = root / "lock" / "conda-lock.yml"
    archives = sorted((root / "channel" / "linux-64").glob(f"*.{fmt}"))
    size = sum(p.stat().st_size for p in archives) / 1e6
    print(f"  generated in {time.perf_counter() - t0:.0f} s: {size:.0f} MB of archives")
    python = sys.executable
    create = [python, "-m", "envfactory", "create", str(lock), "--platform", "linux-64", "-p"]

    def env_for(cache: Path) -> dict[str, str]:
        # harness.ENV: with bytecode caching, as an installed envfactory runs (the first cold
        # create writes the caches); a PYTHONDONTWRITEBYTECODE=1 session made every create
        # compile envfactory's modules again (~0.1 s of CPU per warm create, 2026-12-03)
        # while py-rattler's floor read its compiled ones
        return {**ENV, "ENVFACTORY_PKGS_DIRS": str(cache), "TERM": "dumb"}

    def fresh(*paths: Path) -> None:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    print(f"  {'':<44} {'min':>7} {'median':>7} {'max':>7}")
    # Cold create and its floors in turns too: create into an empty cache, parallel tar -x
    # and rattler's extractor of the same archives. The last cold create leaves the cache warm.
    (cold_t, cold_p), (tar_t, _), (extract_t, _) = interleaved(
        repeat,
        (
            lambda i: fresh(root / "cold-cache", root / f"cold{i}"),
            lambda i: timed([*create, str(root / f"cold{i}")], env_for(root / "cold-cache")),
        ),
        (
            lambda i: fresh(root / f"x{i}"),
            lambda i: timed(parallel_extract(archives, root / f"x{i}", fmt)),
        ),
        (
            lambda i: fresh(root / f"x{i}"),
            lambda i: timed(
                [python, "-c", EXTRACT_RATTLER, str(root / f"x{i}"), *map(str, archives)]
            ),
        ),
    )
    cold = show("create, cold cache", cold_t, cold_p)
    tar = show(f"floor: parallel extraction ({os.cpu_count()} processes)", tar_t)
    # what create's workers run per archive, without its checks: rattler's extractor alone
    extractor = show(f"reference: rattler extractor ({os.cpu_count()} processes)", extract_t)
    records = [
        {
            "name": p.stem.split("-")[0],
            "version": "1.0",
            "build": "h0_0",
            "subdir": "linux-64",
            "fn": p.name,
            "url": p.resolve().as_uri(),
            "channel": (root / "channel").resolve().as_uri(),
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            "md5": hashlib.md5(p.read_bytes()).hexdigest(),
        }
        for p in archives
    ]
    (root / "records.json").write_text(json.dumps(records))
    rattler_install = [python, "-c", RATTLER_INSTALL, str(root / "records.json")]
    # Warm create and its two floors run in turns (create, cp -al of what it made, rattler's
    # install), so that a slow minute of this VM falls on all three alike.
    (warm_t, warm_p), (cp_t, _), (rattler_t, rattler_p) = interleaved(
        warm_repeat,
        (
            lambda i: fresh(root / f"warm{i}"),
            lambda i: timed([*create, str(root / f"warm{i}")], env_for(root / "cold-cache")),
        ),
        (
            lambda i: fresh(root / f"cp{i}"),
            lambda i: timed(["cp", "-al", str(root / f"warm{i}"), str(root / f"cp{i}")]),
        ),
        (
            lambda i: fresh(root / f"r{i}"),
            lambda i: timed([*rattler_install, str(root / f"r{i}"), str(root / "cold-cache")], ENV),
        ),
    )
    warm = show("create, warm cache", warm_t, warm_p)
    cp = show("floor: cp -al of the created prefix", cp_t)
    phase_note = warm_phases(root, lock, python, env_for(root / "cold-cache"), warm_repeat)
    print(f"  {phase_note}")
    rattler = show("floor: py-rattler install, same warm cache", rattler_t, rattler_p)
    for path in root.iterdir():
        if path.name.startswith(("cold", "warm", "cp", "x", "r")) and path.is_dir():
            fresh(path)
    print(f"  ratio warm create / cp -al:            {warm / cp:6.1f}x   (target <= 10x)")
    print(f"  ratio warm create / rattler install:   {warm / rattler:6.2f}x   (target <= 1.2x)")
    print(f"  ratio cold create / parallel extract:  {cold / tar:6.2f}x   (target <= 1.3x)")
    print(
        f"  ratio rattler extractor / parallel extract: {extractor / tar:6.2f}x   (the floor "
        "create builds on)"
    )
    print(
        f"  ratio cold create / rattler extractor:  {cold / extractor:6.2f}x   (create's own "
        "checks, linking and start-up)"
    )
    peak = max(cold_p + warm_p) / 1024
    print(f"  peak memory of create: {peak:.0f} MiB (target <= 300 MB)")
    what = f"{count} packages, {total_mb:.0f} MB, .{fmt}"
    notes.append(f"{what}: {phase_note}")
    return [
        Row(
            f"create, cold cache ({what})", cold_t, "parallel extraction", tar_t,
            Target(ratio=1.3), f"peak RSS {peak:.0f} MiB",
        ),
        Row(
            f"rattler's extractor alone ({what})", extract_t, "parallel extraction", tar_t,
            None, "what create extracts with",
        ),
        Row(f"create, warm cache ({what})", warm_t, "cp -al of the prefix", cp_t, Target(ratio=10)),
        Row(
            f"create, warm cache ({what})", warm_t, "py-rattler install, warm cache", rattler_t,
            Target(ratio=1.2),
        ),
    ]  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--generate"]:
        root, count, total_mb, fmt = sys.argv[2:6]
        generate(Path(root), int(count), float(total_mb), fmt)
        return
    import resource

    ap = parser("create: cold and warm package cache, against its floors", repeat=5)
    ap.add_argument("--warm-repeat", type=int, default=15, help="runs per warm figure (default 15)")
    ap.add_argument("--packages", type=int, default=210)
    ap.add_argument("--mb", type=float, default=362.0)
    ap.add_argument("--formats", default="tar.bz2,conda")
    ap.add_argument("--keep", type=Path, default=None, help="work here (default: a tmp dir)")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, repeat {args.repeat}")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(peak RSS figures include at most this process's own {own:.0f} MiB, via fork)")
    rows: list[Row] = []
    notes = [
        f"warm figures: {args.warm_repeat} runs each",
        "peak memory target: <= 300 MB for the 362 MB set",
    ]
    for fmt in args.formats.split(","):
        if args.keep is not None:
            work = args.keep / fmt
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            rows += bench(work, args.packages, args.mb, fmt, args.repeat, args.warm_repeat, notes)
        else:
            with tempfile.TemporaryDirectory(prefix="bench-create-") as tmp:
                rows += bench(
                    Path(tmp), args.packages, args.mb, fmt, args.repeat, args.warm_repeat, notes
                )
    print()
    report("create", rows, args, notes)


if __name__ == "__main__":
    main()
