"""conda's own part of ``conda activate`` / ``conda deactivate`` on Windows, on plain
environment dicts (the cmd twin of tests/shells/conda_sim.py; runners as there).

From conda/activate.py (``_build_activate_stack``, ``build_deactivate``, ``_yield_commands``,
``_replace_prefix_in_path``, ``_get_path_dirs``; research/anchors.md): activating from nothing
(or stacked) puts the prefix's block first, then runs activate.d; ``conda deactivate`` sets
PATH without the block first, then runs deactivate.d; a switch A -> B runs A's deactivate.d
first, then sets the PATH it computed *before* (A's block replaced by B's in place: the slice
from the first entry equal to the prefix to the last of its directories found; paths compare
case-insensitively), then runs B's activate.d at CONDA_SHLVL + 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Env = dict[str, str]
Runner = Callable[[str, str, Env], Env]  # (prefix, "activate"|"deactivate", env) -> env

# conda's _get_path_dirs(prefix) on Windows, in order.
BLOCK = ("", r"\Library\mingw-w64\bin", r"\Library\usr\bin", r"\Library\bin", r"\Scripts", r"\bin")


def block(prefix: str) -> list[str]:
    """conda's PATH block of the (Windows) prefix."""
    return [prefix + leaf for leaf in BLOCK]


def _index(entries: list[str], item: str) -> int | None:
    for i, entry in enumerate(entries):
        if entry.lower() == item.lower():
            return i
    return None


def replace_prefix(path: str | None, old: str | None, new: str | None) -> str:
    entries = path.split(";") if path else []
    first = 0
    if old is not None:
        dirs = block(old)
        found = _index(entries, dirs[0])
        if found is not None:
            first = found
            last = None
            for leaf in reversed(dirs):
                last = _index(entries, leaf)
                if last is not None:
                    break
            assert last is not None
            del entries[first : last + 1]
    if new is not None:
        entries[first:first] = block(new)
    return ";".join(entries)


def activate(env: Mapping[str, str], prefix: str, run: Runner, stack: bool = False) -> Env:
    out = dict(env)
    current = out.get("CONDA_PREFIX")
    level = int(out.get("CONDA_SHLVL", "0") or "0")
    if current and not stack:
        path = replace_prefix(out.get("PATH"), current, prefix)  # computed before the script
        out = run(current, "deactivate", out)
        out |= {"PATH": path, f"CONDA_PREFIX_{level}": current}
    else:
        if current:
            out[f"CONDA_PREFIX_{level}"] = current
        if stack and current:
            out[f"CONDA_STACKED_{level + 1}"] = "true"
        out["PATH"] = replace_prefix(out.get("PATH"), None, prefix)
    out["CONDA_SHLVL"] = str(level + 1)
    out["CONDA_PREFIX"] = prefix
    return run(prefix, "activate", out)


def deactivate(env: Mapping[str, str], run: Runner) -> Env:
    out = dict(env)
    prefix = out["CONDA_PREFIX"]
    level = int(out["CONDA_SHLVL"])
    previous = out.get(f"CONDA_PREFIX_{level - 1}") if level > 1 else None
    stacked = out.pop(f"CONDA_STACKED_{level}", None) is not None
    new = None if previous is None or stacked else previous
    out["PATH"] = replace_prefix(out.get("PATH"), prefix, new)  # PATH first
    out = run(prefix, "deactivate", out)
    out["CONDA_SHLVL"] = str(level - 1)
    out.pop(f"CONDA_PREFIX_{level - 1}", None)
    if previous is None:
        out.pop("CONDA_PREFIX", None)
        return out
    out["CONDA_PREFIX"] = previous
    return out if stacked else run(previous, "activate", out)
