"""The programs an environment's own Python runs for ``doctor`` (envfactory/diagnose/tfcheck.py
and loadcheck.py): real modules, run as files, written for the oldest Python a combo has
(3.6, TF 1.x), importing nothing from envfactory."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.diagnose import loadcheck, tfcheck
from envfactory.diagnose.probes import (
    TF_CHECK_PROGRAM,
    measure_loads,
    parse_tf_check,
    run_tf_check,
)

PROGRAMS = [Path(tfcheck.__file__), Path(loadcheck.__file__)]
BUILTIN_GENERICS = {"dict", "list", "tuple", "set", "frozenset", "type"}


def too_new_for_python_3_6(path: Path) -> list[str]:
    """What Python 3.6 would refuse in ``path``: syntax its grammar lacks (the parser's
    ``feature_version`` knows walrus, positional-only parameters, f-string ``=``, match), and
    annotations it would fail to evaluate (``X | Y``, ``dict[...]``) or postpone."""
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, feature_version=(3, 6))
    except SyntaxError as exc:
        return [f"{path.name}:{exc.lineno}: {exc.msg}"]
    found = []
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            found += [
                f"{path.name}:{node.lineno}: from __future__ import {a.name}" for a in node.names
            ]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            args += [a for a in (node.args.vararg, node.args.kwarg) if a]
            annotations += [a.annotation for a in args if a.annotation]
            annotations += [node.returns] if node.returns else []
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    for annotation in annotations:
        for part in ast.walk(annotation):
            if isinstance(part, ast.BinOp) and isinstance(part.op, ast.BitOr):
                found.append(f"{path.name}:{part.lineno}: X | Y in an annotation")
            if (
                isinstance(part, ast.Subscript)
                and isinstance(part.value, ast.Name)
                and part.value.id in BUILTIN_GENERICS
            ):
                found.append(f"{path.name}:{part.lineno}: {part.value.id}[...] in an annotation")
    return found


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_the_program_is_python_3_6(path: Path) -> None:
    assert too_new_for_python_3_6(path) == []


def test_the_python_3_6_check_sees_what_3_6_refuses(tmp_path: Path) -> None:
    cases = {
        "walrus.py": "if (n := 1):\n    pass\n",
        "fstring.py": "x = 1\nprint(f'{x=}')\n",
        "future.py": "from __future__ import annotations\n",
        "union.py": "from typing import Any\ndef f(x: int | None) -> None:\n    pass\n",
        "generic.py": "y: dict[str, int] = {}\n",
        "fine.py": "from typing import Dict, Optional\ndef f(x: Optional[int]) -> Dict[str, int]:\n"
        "    return {'%s' % x: 1}\n",
    }
    for name, source in cases.items():
        (tmp_path / name).write_text(source, encoding="utf-8")
    found = {name: too_new_for_python_3_6(tmp_path / name) for name in cases}
    assert [name for name, problems in found.items() if problems] == [
        "walrus.py", "fstring.py", "future.py", "union.py", "generic.py",
    ]  # fmt: skip


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_the_program_imports_only_the_standard_library_numpy_and_tensorflow(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported - sys.stdlib_module_names <= {"numpy", "tensorflow"}


def test_the_tf_check_reports_a_failed_import_as_its_first_tier() -> None:
    """This test's Python has neither numpy nor TensorFlow: the check says so in its line."""
    check = run_tf_check(Path(sys.prefix), "linux")
    assert check.tensorflow is None and check.matmul is None
    assert check.errors["import"].startswith("ModuleNotFoundError: No module named ")
    assert check.python == str(Path(sys.prefix) / "bin" / "python")


def test_the_tf_check_imports_from_the_current_directory_first(tmp_path: Path) -> None:
    """As ``python -c 'import tensorflow'`` does (and the check did when it was a string):
    the current directory first on sys.path, not the check's own folder."""
    (tmp_path / "numpy.py").write_text(
        "raise ImportError('numpy from the current directory')\n", encoding="utf-8"
    )
    done = subprocess.run(
        [sys.executable, str(TF_CHECK_PROGRAM)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    check = parse_tf_check(sys.executable, done.stdout, done.stderr, done.returncode)
    assert check.errors == {"import": "ImportError: numpy from the current directory"}
    marker_line = done.stdout.strip().splitlines()[-1]
    assert marker_line.startswith(tfcheck.MARKER)
    assert json.loads(marker_line[len(tfcheck.MARKER) :])["tensorflow"] is None


def test_the_load_check_names_the_file_the_python_loaded() -> None:
    """``loadcheck.py`` run by a real Python in isolated mode: libc loads from a real path,
    a missing library is an error with the loader's message."""
    if sys.platform != "linux":
        pytest.skip("the names below are Linux sonames")
    loads = measure_loads(
        Path(sys.prefix), "linux", [("libc.so.6", "ctypes"), ("libnothere.so.1", "ctypes")]
    )
    assert loads["libc.so.6"].path and Path(loads["libc.so.6"].path).name.startswith("libc")
    assert loads["libc.so.6"].how == "ctypes.CDLL(name), dl_iterate_phdr"
    assert loads["libnothere.so.1"].path is None
    assert "libnothere.so.1" in (loads["libnothere.so.1"].error or "")
