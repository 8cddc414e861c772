"""What conda does around activate.d/deactivate.d, on plain environment dicts.

From conda/activate.py (_yield_commands, _replace_prefix_in_path), see research/anchors.md:
- activate (stacked, or nothing active): CONDA_SHLVL+1, the new block goes first in PATH,
  then activate.d runs;
- ``conda deactivate``: PATH without the block is exported *first*, then deactivate.d runs,
  then CONDA_SHLVL/CONDA_PREFIX go back;
- switch A -> B: A's deactivate.d runs *first* (A's block still on PATH), then A's block is
  replaced by B's in place, then B's activate.d.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Env = dict[str, str]
Runner = Callable[[str, str, Env], Env]  # (prefix, "activate"|"deactivate", env) -> env


def block(prefix: str) -> str:
    return prefix + "/bin"


def _without_block(path: str | None, prefix: str) -> list[str]:
    entries = path.split(":") if path else []
    if block(prefix) in entries:
        entries.remove(block(prefix))
    return entries


def activate(env: Mapping[str, str], prefix: str, run: Runner, stack: bool = False) -> Env:
    out = dict(env)
    current = out.get("CONDA_PREFIX")
    if current and not stack:
        out = run(current, "deactivate", out)
        entries = out["PATH"].split(":") if out.get("PATH") else []
        at = entries.index(block(current)) if block(current) in entries else 0
        if block(current) in entries:
            entries.remove(block(current))
        entries.insert(at, block(prefix))
        out["PATH"] = ":".join(entries)
        out["CONDA_PREFIX"] = prefix
        return run(prefix, "activate", out)
    level = int(out.get("CONDA_SHLVL", "0"))
    if current:
        out[f"CONDA_PREFIX_{level}"] = current
    out["CONDA_SHLVL"] = str(level + 1)
    out["CONDA_PREFIX"] = prefix
    out["PATH"] = ":".join([block(prefix), *(out["PATH"].split(":") if out.get("PATH") else [])])
    return run(prefix, "activate", out)


def deactivate(env: Mapping[str, str], run: Runner) -> Env:
    out = dict(env)
    prefix = out["CONDA_PREFIX"]
    out["PATH"] = ":".join(_without_block(out.get("PATH"), prefix))
    out = run(prefix, "deactivate", out)
    level = int(out["CONDA_SHLVL"]) - 1
    out["CONDA_SHLVL"] = str(level)
    previous = out.pop(f"CONDA_PREFIX_{level}", None)
    if previous is None:
        out.pop("CONDA_PREFIX", None)
    else:
        out["CONDA_PREFIX"] = previous
    if level == 0:
        out.pop("CONDA_SHLVL")
    return out
