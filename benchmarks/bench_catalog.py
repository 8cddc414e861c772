"""Benchmark: loading the catalog (envfactory/data/*.yaml into typed records), against a libyaml
read of the same files.

    .venv/bin/python benchmarks/bench_catalog.py [--repeat N] [--json PATH]

Figures:
* whole process: ``python -c "load_catalog()"`` (what every command does: the compiled records,
  envfactory/compiled.py) against ``python -c pass`` and against a process that imports PyYAML
  and composes the same files with libyaml (the read floor of the YAML: parsing, no validation,
  no records); and the same process made to load the YAML (``load_catalog_from``), as it does
  when a data file was edited;
* in this process (no start-up; many more runs): reading the compiled records, and
  ``load_catalog_from`` (parse, validate with file:line, build the records), each against
  libyaml's compose of the same texts, and, for reference, ruamel's round-trip parser over the
  same texts (what the loader used two versions ago).
"""

from __future__ import annotations

import io

import yaml
from harness import FLOOR_PASS, PYTHON, Row, paired, parser, process, report
from ruamel.yaml import YAML

from envfactory import compiled
from envfactory.catalog.loader import COMPILED, DATA_DIR, DATA_FILES, RECORDS, load_catalog_from

LOAD = "from envfactory.catalog.loader import load_catalog; load_catalog()"
LOAD_YAML = (
    "from envfactory.catalog.loader import DATA_DIR, load_catalog_from; load_catalog_from(DATA_DIR)"
)
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
    libyaml = process([PYTHON, "-c", LIBYAML, *files])
    times, floor = paired(load, libyaml, args.repeat)
    rows.append(Row("catalog load, whole process", times, "libyaml compose process", floor))
    times, floor = paired(process([PYTHON, "-c", LOAD_YAML]), libyaml, args.repeat)
    rows.append(
        Row("catalog load from the YAML, whole process", times, "libyaml compose process", floor)
    )

    def compose() -> None:
        for text in texts:
            yaml.compose(text, Loader=yaml.CSafeLoader)

    def ruamel() -> None:
        for text in texts:
            YAML(typ="rt").load(io.StringIO(text))

    in_process = args.repeat * 4

    def read_compiled() -> None:
        # what load_catalog does once per process: read the data files, check the header, unpickle
        fresh = {name: (DATA_DIR / name).read_bytes() for name in DATA_FILES}
        assert compiled.read(COMPILED, fresh, RECORDS) is not None

    times, floor = paired(read_compiled, compose, in_process)
    rows.append(Row("compiled records (in-process)", times, "libyaml compose (in-process)", floor))
    times, floor = paired(lambda: load_catalog_from(DATA_DIR), compose, in_process)
    rows.append(
        Row("catalog load from the YAML (in-process)", times, "libyaml compose (in-process)", floor)
    )
    times, floor = paired(ruamel, compose, max(3, args.repeat // 3))
    rows.append(
        Row(
            "ruamel round-trip parse (in-process; the loader two versions ago)",
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
