"""Benchmark: loading the catalog (envfactory/data/*.yaml into typed records), against a libyaml
read of the same files.

    .venv/bin/python benchmarks/bench_catalog.py [--repeat N] [--json PATH]

Figures:
* whole process: ``python -c "load_catalog()"`` against ``python -c pass`` and against a process
  that imports PyYAML and composes the same files with libyaml (the read floor: parsing, no
  validation, no records);
* in this process (no start-up; many more runs): ``load_catalog_from`` (parse, validate with
  file:line, build the records) against libyaml's compose of the same texts, and, for
  reference, ruamel's round-trip parser over the same texts (what the loader used before).
"""

from __future__ import annotations

import io

import yaml
from harness import FLOOR_PASS, PYTHON, Row, paired, parser, process, report
from ruamel.yaml import YAML

from envfactory.catalog.loader import DATA_DIR, DATA_FILES, load_catalog_from

LOAD = "from envfactory.catalog.loader import load_catalog; load_catalog()"
LIBYAML = (
    "import sys, yaml\n"
    "for path in sys.argv[1:]:\n"
    "    with open(path, encoding='utf-8') as f:\n"
    "        yaml.compose(f.read(), Loader=yaml.CSafeLoader)\n"
)


def main() -> None:
    args = parser(__doc__.splitlines()[0], repeat=15).parse_args()
    files = [str(DATA_DIR / name) for name in DATA_FILES]
    texts = [(DATA_DIR / name).read_text(encoding="utf-8") for name in DATA_FILES]
    size = sum(len(t.encode()) for t in texts) / 1024
    load = process([PYTHON, "-c", LOAD])
    rows = []
    times, floor = paired(load, process([PYTHON, "-c", "pass"]), args.repeat)
    rows.append(Row("catalog load, whole process", times, FLOOR_PASS, floor))
    times, floor = paired(load, process([PYTHON, "-c", LIBYAML, *files]), args.repeat)
    rows.append(Row("catalog load, whole process", times, "libyaml compose process", floor))

    def compose() -> None:
        for text in texts:
            yaml.compose(text, Loader=yaml.CSafeLoader)

    def ruamel() -> None:
        for text in texts:
            YAML(typ="rt").load(io.StringIO(text))

    in_process = args.repeat * 4
    times, floor = paired(lambda: load_catalog_from(DATA_DIR), compose, in_process)
    rows.append(Row("catalog load (in-process)", times, "libyaml compose (in-process)", floor))
    times, floor = paired(ruamel, compose, max(3, args.repeat // 3))
    rows.append(
        Row(
            "ruamel round-trip parse (in-process; the loader before)",
            times,
            "libyaml compose (in-process)",
            floor,
        )
    )
    report(
        "catalog load",
        rows,
        args,
        notes=[f"input: {', '.join(DATA_FILES)} ({size:.0f} KiB of YAML)"],
    )


if __name__ == "__main__":
    main()
