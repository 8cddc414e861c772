"""Benchmark: ``envfactory lock --check`` of a project of 50 environments, against its floors.

    .venv/bin/python benchmarks/bench_check.py [--repeat N] [--json PATH] [--environments N]

Input: a project (envfactory.yaml) of N environments (default 50) of tf114-cuda100 on linux-64
and win-64, each with its own variable, locked against the test channels
(tests/channel_builder.py: Anaconda ``defaults`` stubs with the real metadata, and the
tensorflow-gpu 1.14.0 wheel closure). The first environment is locked by ``lock_combo`` (solve,
pip resolution, conda-lock's writer); the others get the same solution written by the same
writer (their requests differ only in name and variable, so the solve would be the same), to
keep the set-up under a minute.

Figures, each a whole process, interleaved with its floors:
* ``envfactory lock --check`` (all N environments; fresh, exit 0) -- target <= 0.3 s for 50;
* floor ``python -c pass``;
* floor "libyaml read": a process that imports PyYAML and reads the metadata block of the N
  conda-lock.yml files with libyaml (the text up to ``package:``) -- what reading the recorded
  inputs costs at the least;
* for reference, the same check through conda-lock's own reader (``parse_conda_lock_file`` of the
  N files), which is what ``--check`` did before it read the metadata block itself.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from harness import (
    ENVFACTORY,
    FLOOR_PASS,
    PYTHON,
    ROOT,
    Row,
    Target,
    paired,
    parser,
    process,
    report,
)

sys.path.insert(0, str(ROOT / "tests"))

from channel_builder import (
    DATA,
    add_project_wheels,
    build_channel,
    build_wheel_folder,
    defaults_packages,
    defaults_project_packages,
)

from envfactory.project.manifest import load_project, lock_request
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import _lock_files, _rendered_inputs, lock_combo, write_lock_set

LIBYAML_FLOOR = """
import sys, yaml
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    yaml.load(text[: text.index("\\npackage:")], Loader=yaml.CSafeLoader)["metadata"]
"""

CONDA_LOCK_READER = """
import sys, warnings
warnings.simplefilter("ignore")
from pathlib import Path
from conda_lock.lockfile import parse_conda_lock_file
for path in sys.argv[1:]:
    parse_conda_lock_file(Path(path)).metadata
"""


def make_project(root: Path, count: int) -> tuple[Path, list[str]]:
    """The project directory, locked, and the ``lock`` flags that point at the test channels."""
    channels = root / "channels"
    defaults = build_channel(
        channels / "defaults", defaults_packages() + defaults_project_packages()
    )
    wheels = add_project_wheels(
        build_wheel_folder(channels / "wheels", sorted((DATA / "pypi").glob("*.json")))
    )
    project = root / "project"
    project.mkdir()
    lines = ["environments:"]
    for i in range(count):
        lines += [
            f"  env{i:02d}:",
            "    combo: tf114-cuda100",
            "    variables:",
            f"      BENCH_INDEX: '{i}'",
        ]
    (project / "envfactory.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ["--channel-map", f"defaults={defaults}", "--pip-index", str(wheels)]
    loaded = load_project(project / "envfactory.yaml")
    cmap = ChannelMap({"defaults": defaults.as_uri()})
    envs = list(loaded)
    first = lock_request(envs[0], cmap, "rattler", str(wheels))
    result = lock_combo(first, loaded.locks_dir / envs[0].name)
    for env in envs[1:]:
        request = lock_request(env, cmap, "rattler", str(wheels))
        rendered = _rendered_inputs(request)
        files = _lock_files(request, rendered, result.packages)
        write_lock_set(loaded.locks_dir / env.name, files)
    return project, flags


def main() -> None:
    p = parser(__doc__.splitlines()[0], repeat=10)
    p.add_argument("--environments", type=int, default=50)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="envfactory-bench-check-") as tmp:
        start = time.perf_counter()
        project, flags = make_project(Path(tmp), args.environments)
        setup = time.perf_counter() - start
        locks = sorted(str(p) for p in (project / "locks").glob("*/conda-lock.yml"))
        kib = sum(Path(p).stat().st_size for p in locks) / 1024
        check = process([ENVFACTORY, "lock", "--check", *flags], cwd=project)
        floor_pass = process([PYTHON, "-c", "pass"])
        floor_yaml = process([PYTHON, "-c", LIBYAML_FLOOR, *locks])
        reader = process([PYTHON, "-c", CONDA_LOCK_READER, *locks])
        n = args.environments
        target = Target(seconds=0.3) if n == 50 else None
        figure = f"envfactory lock --check, {n} environments"
        rows = []
        times, floor_times = paired(check, floor_pass, args.repeat)
        rows.append(Row(figure, times, FLOOR_PASS, floor_times, target))
        times, floor_times = paired(check, floor_yaml, args.repeat)
        rows.append(
            Row(figure, times, f"libyaml read of the {n} metadata blocks", floor_times, target)
        )
        times, floor_times = paired(reader, floor_yaml, max(3, args.repeat // 3))
        rows.append(
            Row(
                f"conda-lock's reader of the {n} locks (reference: what --check used before)",
                times,
                f"libyaml read of the {n} metadata blocks",
                floor_times,
            )
        )
    report(
        f"lock --check ({n} environments)",
        rows,
        args,
        notes=[
            f"{n} conda-lock.yml files, {kib:.0f} KiB in all; set-up (channels, one lock solved, "
            f"{n - 1} more written): {setup:.1f} s"
        ],
    )


if __name__ == "__main__":
    main()
