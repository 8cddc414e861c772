"""Re-capture the real PyPI metadata the offline wheel folder is built from (needs network).

    .venv/bin/python tests/data/pypi/capture_reports.py

For each target it asks pip (``--isolated``, so pypi.org) to resolve the combo's pip requirement
for the target platform and Python, constrained by what the combo's conda side provides (numpy,
setuptools, ...), and keeps, per wheel: name, version, file name, URL, the real wheel's sha256
(captures made before that field was added lack it), requires_python and requires_dist, exactly
as pip reported them.
Name targets to re-capture only those (``capture_reports.py tf23-cuda101-win-64``); the default is
all of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from envfactory.build.pypi import platform_tags

HERE = Path(__file__).parent
TARGETS = {
    "tf114-cuda100-linux-64": ("tensorflow-gpu==1.14.0", "linux-64", "3.7", "numpy==1.16.4"),
    "tf114-cuda100-win-64": ("tensorflow-gpu==1.14.0", "win-64", "3.7", "numpy==1.16.4"),
    # tf23-cuda101 has no conda numpy (pip resolves numpy too); its conda side brings pip with
    # the test channel's conda-forge setuptools 65.5.1 and wheel 0.38.4 (the pangeo records).
    "tf23-cuda101-win-64": (
        "tensorflow==2.3.0",
        "win-64",
        "3.8",
        "setuptools==65.5.1\nwheel==0.38.4",
    ),
}


def capture(
    requirement: str, platform: str, python: str, constraint: str
) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c.txt").write_text(constraint + "\n")
        args = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--quiet"]
        args += ["--ignore-installed", "--report", f"{tmp}/r.json", "--target", f"{tmp}/t"]
        args += ["-c", f"{tmp}/c.txt", "--only-binary=:all:", "--implementation", "cp"]
        args += ["--python-version", python]
        for tag in platform_tags(platform, "2.17"):  # type: ignore[arg-type]
            args += ["--platform", tag]
        subprocess.run([*args, requirement], check=True)
        report = json.loads((Path(tmp) / "r.json").read_text())
    out = []
    for item in report["install"]:
        meta = item["metadata"]
        out.append(
            {
                "name": meta["name"],
                "version": meta["version"],
                "filename": item["download_info"]["url"].rsplit("/", 1)[-1],
                "url": item["download_info"]["url"],
                "sha256": item["download_info"]
                .get("archive_info", {})
                .get("hashes", {})
                .get("sha256"),
                "requires_python": meta.get("requires_python"),
                "requires_dist": meta.get("requires_dist", []),
            }
        )
    return sorted(out, key=lambda d: str(d["name"]).lower())


def main(keys: list[str]) -> None:
    for key in keys or list(TARGETS):
        req, platform, python, constraint = TARGETS[key]
        data = {
            "requirement": req,
            "platform": platform,
            "python": python,
            "constraint": constraint,
            "wheels": capture(req, platform, python, constraint),
        }
        (HERE / f"{key}.json").write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
