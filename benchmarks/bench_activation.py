"""Benchmark: what activating and deactivating an environment costs per shell, old vs new.

    .venv/bin/python benchmarks/bench_activation.py [--loops N] [--old-rev REV]

* new: the stubs of this tree (the environment's Python runs activation/core.py);
* old: the awk-based scripts committed in ``locks/`` at ``--old-rev`` (default 8f5290d, the last
  main commit before the one core; read with ``git show``, skipped when git cannot);
* per shell (bash, zsh, dash, fish, tcsh, xonsh): one shell process sources activate.d then
  deactivate.d N times; the same loop with empty scripts is subtracted, so shell start-up and
  the loop do not count. Printed: milliseconds per activate+deactivate pair, and old/new.
* floors: ``python -I -S -c pass`` (the least a Python-run activation can cost),
  ``python -c pass``, and conda 24.7's own activator (vendored in conda-lock) building
  ``activate`` for bash in a fresh process: a lower bound of ``conda activate``'s own cost
  (a real conda also starts its CLI), measured with this Python.
* cmd: the core's cmd output written by the host's Python (no Windows Python here; wine's
  cmd running the .bat is not timed). PowerShell: not measurable here (no pwsh).
The environment: tf114-cuda100 (linux-64), PATH of 8 entries with two foreign CUDA ones.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envfactory.activation.plan import CORE_RELPATH, install_activation
from envfactory.catalog.loader import load_catalog

COMBO = "tf114-cuda100"
SHELLS = {  # shell: (script extension, command line to run a file)
    "bash": ("sh", ["bash", "--norc", "--noprofile"]),
    "zsh": ("sh", ["zsh", "-f"]),
    "dash": ("sh", ["dash"]),
    "fish": ("fish", ["fish", "--no-config"]),
    "tcsh": ("csh", ["tcsh", "-f"]),
    "xonsh": ("xsh", ["xonsh", "--no-rc"]),
}
START_PATH = ":".join(
    [
        "/usr/local/cuda-10.0/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
        "/usr/local/cuda/bin",
    ]
)
CONDA_REAL = Path(__file__).resolve().parent.parent / "tests" / "shells" / "conda_real.py"


def loop_script(shell: str, activate: Path, deactivate: Path, loops: int) -> str:
    if shell in ("bash", "zsh", "dash"):
        return (
            f"i=0\nwhile [ $i -lt {loops} ]; do\n. '{activate}'\n. '{deactivate}'\n"
            "i=$((i+1))\ndone\n"
        )
    if shell == "fish":
        return f"for i in (seq {loops})\nsource '{activate}'\nsource '{deactivate}'\nend\n"
    if shell == "tcsh":
        return f"foreach i (`seq {loops}`)\nsource '{activate}'\nsource '{deactivate}'\nend\n"
    return f"for _i in range({loops}):\n    source '{activate}'\n    source '{deactivate}'\n"


def timed_run(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or proc.stderr.strip():
        raise SystemExit(f"{command[0]} failed: {proc.stderr.decode(errors='replace')[:500]}")
    return elapsed


def per_pair(
    shell: str, prefix: Path, scripts: tuple[Path, Path], work: Path, loops: int, repeat: int
) -> float:
    """Milliseconds per activate+deactivate pair, the empty loop subtracted."""
    ext, command = SHELLS[shell]
    empty = work / f"empty.{ext}"
    empty.write_text("\n")
    env = {
        "PATH": START_PATH,
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "CONDA_PREFIX": str(prefix),
        "CONDA_SHLVL": "1",
        "HOME": str(work),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }
    driver, baseline = work / f"loop-{shell}", work / f"base-{shell}"
    driver.write_text(loop_script(shell, *scripts, loops))
    baseline.write_text(loop_script(shell, empty, empty, loops))
    full = statistics.median(timed_run([*command, str(driver)], env) for _ in range(repeat))
    base = statistics.median(timed_run([*command, str(baseline)], env) for _ in range(repeat))
    return (full - base) / loops * 1000


def old_scripts(rev: str, target: Path) -> Path | None:
    """The committed activation files of ``rev`` for COMBO (linux-64), or None."""
    root = Path(__file__).resolve().parent.parent
    base = f"locks/{COMBO}/activation/linux-64"
    listing = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-r", "--name-only", rev, base],
        capture_output=True,
        text=True,
        check=False,
    )
    if listing.returncode != 0 or not listing.stdout.strip():
        return None
    for name in listing.stdout.split():
        blob = subprocess.run(
            ["git", "-C", str(root), "show", f"{rev}:{name}"], capture_output=True, check=True
        ).stdout
        path = target / name.removeprefix(base + "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    return target


def ms(command: list[str], repeat: int) -> float:
    env = {"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()}
    return statistics.median(timed_run(command, env) for _ in range(repeat)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--old-rev", default="8f5290d")
    args = parser.parse_args()
    python = str(Path(sys.executable).resolve())
    with tempfile.TemporaryDirectory(prefix="envfactory-bench-") as tmp:
        work = Path(tmp)
        new = work / "new-env"
        install_activation(new, load_catalog().combo(COMBO), "linux-64")
        (new / "bin").mkdir()
        (new / "bin" / "python").symlink_to(python)
        old = old_scripts(args.old_rev, work / "old-env")
        print(f"activate + deactivate, ms per pair ({args.loops} pairs, median of {args.repeat})")
        print(f"{'shell':8} {'old (awk)':>10} {'new (py)':>10} {'new/old':>8}")
        for shell, (ext, command) in SHELLS.items():
            if shutil.which(command[0]) is None:
                print(f"{shell:8} not installed")
                continue

            def scripts(prefix: Path, ext: str = ext) -> tuple[Path, Path]:
                return tuple(  # type: ignore[return-value]
                    prefix / f"etc/conda/{phase}.d/envfactory-{COMBO}.{ext}"
                    for phase in ("activate", "deactivate")
                )

            n = per_pair(shell, new, scripts(new), work, args.loops, args.repeat)
            if old is not None:
                o = per_pair(shell, old, scripts(old), work, args.loops, args.repeat)
                print(f"{shell:8} {o:10.1f} {n:10.1f} {n / o:8.2f}")
            else:
                print(f"{shell:8} {'-':>10} {n:10.1f}")
        core = str(new / CORE_RELPATH)
        print("floors, ms per process (median)")
        print(f"  python -I -S -c pass        {ms([python, '-I', '-S', '-c', 'pass'], 9):8.1f}")
        print(f"  python -c pass              {ms([python, '-c', 'pass'], 9):8.1f}")
        env_cmd = ["env", f"CONDA_PREFIX={new}", f"PATH={START_PATH}"]
        print(
            "  core, activate for sh       "
            f"{ms([*env_cmd, python, '-I', '-S', core, 'activate', 'sh', COMBO], 9):8.1f}"
        )
        cmd_args = ["activate", "cmd", COMBO, str(work / "out.bat"), "0"]
        print(
            "  core, activate for cmd      "
            f"{ms([*env_cmd, python, '-I', '-S', core, *cmd_args], 9):8.1f}"
        )
        conda = [*env_cmd, sys.executable, str(CONDA_REAL), "posix", "activate", str(new)]
        (new / "conda-meta").mkdir()
        print(f"  conda's activator (posix)   {ms(conda, 5):8.1f}  (vendored conda 24.7)")


if __name__ == "__main__":
    main()
