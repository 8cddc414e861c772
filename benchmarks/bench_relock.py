"""Benchmark: a one-package change in a ~300-package lock, re-locked and applied to an environment
in place, against the cost of the changed part alone.

    .venv/bin/python benchmarks/bench_relock.py [--repeat 3] [--packages 290] [--mb 60]
                                                [--json PATH]

Input: a project environment of tf114-cuda101 (linux-64, the test channels' Anaconda stubs)
that adds PACKAGES generated packages (``gen000`` ..., a dependency tree, MB megabytes of files
in all, tests/crafted.py archives), locked and created once (the package cache is warm). Then
the channel moves on (a newer version of every third generated package) and the project adds
one package, ``genextra``, which needs one more, ``genextradep``.

Figures, each a whole process, each run from the same starting state (the first lock, and the
environment created from it, restored before every run, untimed):

* ``lock`` (sticky: the 2 new packages are added, nothing else moves), against ``lock
  --update-all`` (a solve from scratch, which moves every package the channel moved);
* ``create --update`` of the environment to the new lock, in place (only the 2 new packages
  linked, nothing unlinked but envfactory's own files, every file of the prefix checked after),
  against its floor: a process that links only the 2 changed packages with py-rattler's
  ``install`` from the same warm cache into an empty prefix (the changed part alone); against
  ``create --force`` (the whole environment built again); and, for reference, ``create --force``
  against py-rattler's install of every package.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness import ENV, ENVFACTORY, PYTHON, Row, Times, parser, report, run_quiet, timed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from channel_builder import build_channel, defaults_packages, index_channel
from crafted import Crafted, write_crafted

INSTALL = """
import sys
from pathlib import Path
from envfactory.lockfile.read import read_lock
from envfactory.solve import rattler_adapter
lock, prefix, cache, names = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
packages = [p for p in read_lock(lock).packages if p.platform == "linux-64"
            and p.manager == "conda" and (not names or p.name in names)]
rattler_adapter.install(packages, prefix, "linux-64", cache)
import os
os._exit(0)  # py-rattler can crash at interpreter exit (shared/research/feasibility.md)
"""


def generate(channel: Path, count: int, total_mb: float, seed: int = 27) -> list[str]:
    """``count`` packages ``genNNN`` (each but the first needs its parent in a binary tree),
    files of ``total_mb`` MB in all; ``genextra`` and ``genextradep`` beside them."""
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0, 1.0) for _ in range(count)]
    scale = total_mb * 1e6 / sum(weights)
    names = []
    for i, weight in enumerate(weights):
        name = f"gen{i:03d}"
        size = max(2000, int(weight * scale))
        nfiles = max(1, min(60, size // 50_000))
        files = {
            f"lib/{name}/m{j:02d}.so": rng.randbytes(size // nfiles // 4) * 4 for j in range(nfiles)
        }
        depends = [f"gen{(i - 1) // 2:03d}"] if i else []
        write_crafted(channel, Crafted(name, files=files, index={"depends": depends}))
        names.append(name)
    for name, depends in (("genextra", ["genextradep"]), ("genextradep", [])):
        files = {f"lib/{name}/m.so": rng.randbytes(20_000)}
        write_crafted(channel, Crafted(name, files=files, index={"depends": depends}))
    return names


def move_on(channel: Path, names: list[str]) -> None:
    """A newer version of every third generated package."""
    for name in names[::3]:
        files = {f"lib/{name}/m00.so": f"{name} 2.0\n".encode()}
        write_crafted(channel, Crafted(name, version="2.0", files=files))
    index_channel(channel)


def manifest(names: list[str]) -> str:
    add = ", ".join(names)
    return (
        "environments:\n  app:\n    combo: tf114-cuda101\n    platforms: [linux-64]\n"
        f"    add: [{add}]\n"
    )


def command(project: Path, *args: str) -> Callable[[], None]:
    def action() -> None:
        run_quiet([ENVFACTORY, *args], cwd=project)

    return action


def changed_names(old: Path, new: Path) -> list[str]:
    """The conda packages of ``new`` that ``old`` does not hold as they are (name, version,
    build, sha256): what an update links."""
    from envfactory.lockfile.read import read_lock

    def keys(path: Path) -> set[tuple[str, str, str, str | None]]:
        return {
            (p.name, p.version, p.build, p.sha256)
            for p in read_lock(path).packages
            if p.platform == "linux-64" and p.manager == "conda"
        }

    return sorted({k[0] for k in keys(new) - keys(old)})


def series(prepare: Callable[[], None], action: Callable[[], None], repeat: int) -> Times:
    times = Times()
    prepare()
    action()  # warm-up, untimed
    for _ in range(repeat):
        prepare()
        timed(action, times)
    return times


def main() -> None:
    p = parser(__doc__.splitlines()[0], repeat=3)
    p.add_argument("--packages", type=int, default=290)
    p.add_argument("--mb", type=float, default=60.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-relock-") as tmp:
        root = Path(tmp)
        channel = root / "defaults"
        build_channel(channel, defaults_packages())
        names = generate(channel, args.packages, args.mb)
        index_channel(channel)
        cache = root / "pkgs"
        env = {**ENV, "ENVFACTORY_PKGS_DIRS": str(cache)}
        ENV.clear()
        ENV.update(env)
        project = root / "project"
        project.mkdir()
        text = manifest(names)
        (project / "envfactory.yaml").write_text(text, encoding="utf-8")
        flags = ["--channel-map", f"defaults={channel}"]
        run_quiet([ENVFACTORY, "lock", *flags], cwd=project)
        run_quiet([ENVFACTORY, "create", "app"], cwd=project)
        first = root / "first-lock"
        shutil.copytree(project / "locks", first)
        move_on(channel, names)
        (project / "envfactory.yaml").write_text(
            text.replace("add: [", "add: [genextra, "), encoding="utf-8"
        )

        def restore_lock() -> None:
            shutil.rmtree(project / "locks")
            shutil.copytree(first, project / "locks")

        sticky = series(restore_lock, command(project, "lock", *flags), args.repeat)
        scratch = series(
            restore_lock, command(project, "lock", "--update-all", *flags), args.repeat
        )
        restore_lock()  # the sticky re-lock of the first lock (not of --update-all's)
        run_quiet([ENVFACTORY, "lock", *flags], cwd=project)
        second = root / "second-lock"
        shutil.copytree(project / "locks", second)
        new_lock = second / "app" / "conda-lock.yml"

        def to_first() -> None:
            run_quiet(
                [ENVFACTORY, "create", str(first / "app/conda-lock.yml"), "-p",
                 str(project / "envs/app"), "--update"],
                cwd=project,
            )  # fmt: skip

        update = series(
            to_first,
            command(project, "create", str(new_lock), "-p", str(project / "envs/app"), "--update"),
            args.repeat,
        )
        # what the timed update did (untimed, from the same starting state): the figure is
        # honest only if it kept the 300 packages and linked the 2
        to_first()
        said = subprocess.run(
            [ENVFACTORY, "create", str(new_lock), "-p", str(project / "envs/app"), "--update"],
            cwd=project, env=ENV, capture_output=True, text=True, check=True,
        ).stdout.strip().splitlines()[-1]  # fmt: skip
        force = series(
            to_first,
            command(project, "create", str(new_lock), "-p", str(project / "envs/app"), "--force"),
            args.repeat,
        )
        script = root / "install.py"
        script.write_text(INSTALL, encoding="utf-8")

        def rattler(names: list[str]) -> Callable[[], None]:
            def action() -> None:
                target = root / "rattler-prefix"
                shutil.rmtree(target, ignore_errors=True)
                run_quiet([PYTHON, str(script), str(new_lock), str(target), str(cache), *names])

            return action

        moved = changed_names(first / "app" / "conda-lock.yml", new_lock)
        changed = series(lambda: None, rattler(moved), args.repeat)
        whole = series(lambda: None, rattler([]), args.repeat)

    count = args.packages + 10
    rows = [
        Row(
            f"lock, sticky: +1 package in a {count}-package lock",
            sticky,
            floor="lock --update-all (solve from scratch)",
            floor_times=scratch,
        ),
        Row(
            f"create --update: the environment to the new lock ({len(moved)} packages linked)",
            update,
            floor=f"py-rattler install of the {len(moved)} changed packages",
            floor_times=changed,
        ),
        Row(
            "create --update, in place, against the whole environment built again",
            update,
            floor="create --force",
            floor_times=force,
        ),
        Row(
            "create --force: the whole environment again (reference)",
            force,
            floor="py-rattler install of every package",
            floor_times=whole,
        ),
    ]
    notes = [
        f"The channel moved between the two locks: a newer version of {len(names[::3])} of "
        f"the {args.packages} generated packages; the sticky lock keeps them, --update-all "
        "takes them. Both figures write the lock files.",
        "create --update changes the prefix in place under a rollback journal: the 2 new "
        "packages are linked into the journal, moved in by rename, and the whole prefix is "
        "checked (every conda file the cache's inode or its listed hash) before it commits. "
        f"It said: {said}",
    ]
    report("Re-lock and update in place (issue 27)", rows, args, notes)


if __name__ == "__main__":
    main()
