"""The core's cmd output under wine's cmd (issue 12: there is no Windows Python here).

The .bat stub runs ``python.exe activation.py OP cmd COMBO OUT.bat D`` and CALLs OUT.bat. Here
the host's Python runs the very same core on the environment the session has at that point
(tracked on the host, conda's own edits between scripts simulated as in
tests/shells/conda_sim.py and replayed as ``set`` steps), writes OUT.bat, and wine's cmd CALLs
it; after every step the environment is read back with ``cmd /u /c set`` (UTF-16: byte for
byte) and compared with what the core computed: Unicode (Latin-1, CJK, outside the BMP) and
cmd's metacharacters included. The stub itself is the few lines of script.bat.j2. All sessions
of the module run in one wine process (a second one for the hypothesis test).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shells.harness import SetVar, Snap, Source, Step, UnsetVar
from shells.wine import SessionResult, WinePrefix, run_cmd_sessions, unix_path, win_path

from envfactory.activation import core
from envfactory.activation.plan import install_activation, plan_for, script_relpath
from envfactory.catalog.loader import load_catalog

pytestmark = [
    pytest.mark.wine,
    pytest.mark.skipif(shutil.which("wine") is None, reason="wine is not installed"),
]

Env = dict[str, str]
OUTPUTS = itertools.count()
Phase = Literal["activate", "deactivate"]
COMBOS = {"A": "tf114-cuda100", "B": "tf210-cuda112"}
CUDA = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v10.0"
OTHER_U = "oth\u00e9r-\u6570\u636e"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("bat")
    for env, combo in COMBOS.items():
        install_activation(base / ("env" + env), load_catalog().combo(combo), "win-64")
    (base / "other" / "conda-meta").mkdir(parents=True)  # another conda environment
    (base / OTHER_U / "conda-meta").mkdir(parents=True)  # one with a non-ASCII name
    return base


@pytest.fixture(scope="module")
def wine(root: Path) -> Iterator[WinePrefix]:
    prefix = WinePrefix(root / "wineprefix")
    prefix.start()
    yield prefix
    prefix.stop()


def is_dir(path: str) -> bool:
    unix = unix_path(path)
    return unix is not None and Path(unix).is_dir()


def normal(env: Env) -> Env:
    """cmd has no empty variables: "" is unset."""
    return {k: v for k, v in env.items() if v != ""}


class Session:
    """Builds one cmd session's steps while computing, with the core, what each snap must
    show. ``run`` has the signature of conda_sim's runners."""

    def __init__(
        self,
        root: Path,
        start: Env,
        delayed: bool = False,
        plans: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.root = root
        self.delayed = delayed
        self.plans = plans or {
            win_path(root / ("env" + e)): plan_for(load_catalog().combo(c), "win-64").runtime()
            for e, c in COMBOS.items()
        }
        self.start = normal(start)
        self.current = dict(self.start)
        self.steps: list[Step] = [Snap()]
        self.expected: list[Env | None] = [dict(self.start)]  # None: the snap is not checked
        self.refusals: list[str] = []

    def to(self, env: Env) -> None:
        env = normal(env)
        for name in sorted(set(self.current) | set(env)):
            if env.get(name) != self.current.get(name):
                step = SetVar(name, env[name]) if name in env else UnsetVar(name)
                self.steps.append(step)
        self.current = env

    def run(self, prefix: str, phase: str, env: Env) -> Env:
        """What the .bat stub does: the core computes the change and writes OUT.bat, cmd
        CALLs it."""
        assert phase in ("activate", "deactivate")
        self.to(env)
        plan = self.plans[prefix]
        if phase == "activate":
            changes = core.activate(self.current, plan, is_dir)
        else:
            changes = core.deactivate(self.current, plan)
        out_bat = self.root / "out" / f"edits{next(OUTPUTS)}.bat"
        out_bat.parent.mkdir(exist_ok=True)
        out_bat.write_bytes(core.emit_cmd(changes, self.current, self.delayed).encode("ascii"))
        out = dict(self.current)
        for name, value in changes.items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = value
        self.steps += [Source(out_bat), Snap()]
        self.current = normal(out)
        self.expected.append(dict(self.current))
        return dict(self.current)

    def source(self, env_letter: str, phase: Phase) -> Env:
        return self.run(win_path(self.root / ("env" + env_letter)), phase, self.current)

    def refused(self, env_letter: str, phase: Phase) -> None:
        """The core must refuse (the stub then exits 1 and changes nothing)."""
        plan = self.plans[win_path(self.root / ("env" + env_letter))]
        changes = (
            core.activate(self.current, plan, is_dir)
            if phase == "activate"
            else core.deactivate(self.current, plan)
        )
        with pytest.raises(core.Refused) as caught:
            core.emit_cmd(changes, self.current, self.delayed)
        self.refusals.append(str(caught.value))


# --- conda on Windows, as tests/shells/conda_sim.py does it on Linux ---------------------------

Runner = Callable[[str, str, Env], Env]


def block(prefix: str) -> str:
    return prefix  # the first of conda's PATH directories on Windows is the prefix itself


def entries_of(env: Env) -> list[str]:
    return env["PATH"].split(";") if env.get("PATH") else []


def conda_activate(env: Env, prefix: str, run: Runner, stack: bool = False) -> Env:
    out = dict(env)
    current = out.get("CONDA_PREFIX")
    if current and not stack:
        out = run(current, "deactivate", out)  # a switch: deactivate.d first, then PATH
        entries = entries_of(out)
        at = entries.index(block(current)) if block(current) in entries else 0
        if block(current) in entries:
            entries.remove(block(current))
        entries.insert(at, block(prefix))
        out["PATH"] = ";".join(entries)
        out["CONDA_PREFIX"] = prefix
        return run(prefix, "activate", out)
    level = int(out.get("CONDA_SHLVL", "0"))
    if current:
        out[f"CONDA_PREFIX_{level}"] = current
    out["CONDA_SHLVL"] = str(level + 1)
    out["CONDA_PREFIX"] = prefix
    out["PATH"] = ";".join([block(prefix), *entries_of(out)])
    return run(prefix, "activate", out)


def conda_deactivate(env: Env, run: Runner) -> Env:
    out = dict(env)
    prefix = out["CONDA_PREFIX"]
    entries = entries_of(out)
    if block(prefix) in entries:
        entries.remove(block(prefix))
    out["PATH"] = ";".join(entries)  # conda deactivate: PATH first, then deactivate.d
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
    return normal(out)


# --- the cases --------------------------------------------------------------------------------


MINE = "C:\\mine & y\u00f6urs;"


def hostile_path(root: Path) -> str:
    return ";".join(
        [
            r"C:\windows\system32",
            CUDA + r"\bin",
            CUDA + r"\libnvvp",
            r"c:\TOOLS\cuda\bin" + "\\",
            win_path(root / "other") + r"\Library\bin",
            r"C:\Program Files (x86)\Common Files\Intel",
            r"C:\a&b|c<d>e",
            r"C:\p%PATH%q%",
            r"C:\q!PATH!r",
            r"C:\c^d^^",
            "",
            r'"C:\quoted & spaced"',
            r'C:\odd"quote&(x)',
            r"C:\windows\system32",
            "",
        ]
    )


def unicode_path(root: Path) -> str:
    """Latin-1, CJK, a character outside the BMP, next to cmd's special characters."""
    return ";".join(
        [
            r"C:\windows\system32",
            "C:\\Users\\Jos\u00e9\\cuda-free\\bin",
            "C:\\\u6570\u636e\\bin",
            CUDA + r"\bin",
            "C:\\Users\\Jos\u00e9\\cuda\\bin",
            win_path(root / OTHER_U) + r"\Library\bin",
            "C:\\emoji \U0001f600\\bin",
            "C:\\p%PATH%\u00fc%",
            'C:\\odd"quot\u00e9&(x)^\u00e9',
            "C:\\a&b|\u03a9<d>e",
            "",
            "C:\\Users\\Jos\u00e9\\cuda-free\\bin",
            "\u00e9",
        ]
    )


def relevant(env: Env) -> Env:
    keep = ("CONDA_", "CUDA_PATH", "TF_CPP_", "_ENVFACTORY_", "_EFY_", "USER_")
    return {k: v for k, v in env.items() if k.upper() == "PATH" or k.upper().startswith(keep)}


def build_cases(root: Path) -> dict[str, tuple[Session, bool]]:
    a_prefix = win_path(root / "envA")
    cases: dict[str, tuple[Session, bool]] = {}
    base = {"CONDA_PREFIX": a_prefix, "CONDA_SHLVL": "1", "USER_KEEP": "x"}

    s = Session(
        root,
        base
        | {"PATH": hostile_path(root), "CUDA_PATH": CUDA, "CUDA_PATH_V10_0": CUDA}
        # names that are not identifiers (issue 10, row 6): left alone, never written
        | {f"CUDA_PATH_V&echo x>{win_path(root / 'hacked')}&": "1", "CUDA_PATH_V(x)": "2"},
    )
    s.source("A", "activate")
    s.source("A", "activate")  # twice = once
    s.source("A", "deactivate")
    cases["hostile"] = (s, False)

    s = Session(root, base | {"TF_CPP_MIN_LOG_LEVEL": "0"})  # no PATH at all
    s.source("A", "activate")
    s.source("A", "deactivate")
    cases["unset_path"] = (s, False)

    s = Session(root, base | {"PATH": CUDA + r"\bin;;" + r"C:\tools\cuda\bin"})
    s.source("A", "activate")
    s.source("A", "deactivate")
    cases["only_foreign"] = (s, False)

    for switch in (False, True):
        start_path = hostile_path(root) + ";C:\\Windows;C:\\\u6570\u636e\\bin"
        s = Session(root, {"PATH": start_path, "USER_KEEP": "x"})
        env = conda_activate(s.current, a_prefix, s.run)
        env = conda_activate(env, win_path(root / "envB"), s.run, stack=True)
        env["PATH"] = MINE + env["PATH"]  # the user's edit while B is active
        if switch:
            env = conda_activate(env, a_prefix, s.run)  # B -> A in place at level 2
        env = conda_deactivate(env, s.run)
        env = conda_deactivate(env, s.run)
        s.to(env)
        s.steps.append(Snap())
        s.expected.append(dict(env))
        cases[f"stack_switch_{switch}"] = (s, False)

    long_path = ";".join(rf"C:\long\dir{i:04d}\bin" for i in range(8150 // 19))
    s = Session(root, base | {"PATH": long_path[:8150]})
    s.refused("A", "activate")
    cases["near_8191"] = (s, False)

    unicode_cuda = "C:\\Users\\Jos\u00e9\\CUDA\\v10.0"
    s = Session(
        root,
        base
        | {
            "PATH": unicode_path(root),
            "CUDA_PATH": unicode_cuda,
            "CUDA_PATH_V10_0": unicode_cuda,
            "USER_KEEP": "\u00fc\u6570",
        },
    )
    s.source("A", "activate")
    s.source("A", "activate")  # twice = once
    s.source("A", "deactivate")
    cases["unicode"] = (s, False)

    s = Session(root, base | {"PATH": "C:\\bell\x07\u00e9;" + CUDA + r"\bin"})
    s.refused("A", "activate")
    cases["control_char"] = (s, False)

    s = Session(root, base | {"PATH": r"C:\q!x!;" + CUDA + r"\bin"}, delayed=True)
    s.refused("A", "activate")
    cases["delayed_bang"] = (s, True)

    s = Session(
        root,
        base | {"PATH": r"C:\p%x%;C:\c^d&e;" + CUDA + "\\bin;C:\\w\u00ee\u6570ndows"},
        delayed=True,
    )
    s.source("A", "activate")
    s.source("A", "deactivate")
    cases["delayed_no_bang"] = (s, True)
    return cases


def run_sessions(
    wine: WinePrefix, root: Path, sessions: list[tuple[Session, bool]], name: str
) -> tuple[list[SessionResult], str]:
    return run_cmd_sessions(
        wine,
        [(s.steps, s.start) for s, _ in sessions],
        root / name,
        delayed=[d for _, d in sessions],
    )


@pytest.fixture(scope="module")
def results(wine: WinePrefix, root: Path) -> dict[str, tuple[Session, SessionResult, str]]:
    cases = build_cases(root)
    out, stderr = run_sessions(wine, root, list(cases.values()), "cases")
    return {name: (s, r, stderr) for (name, (s, _)), r in zip(cases.items(), out, strict=True)}


def check(session: Session, result: SessionResult) -> None:
    assert len(result.snaps) == len(session.expected)
    assert relevant(result.snaps[0]) == session.start, "the driver did not set the start"
    for i, (snap, want) in enumerate(zip(result.snaps, session.expected, strict=True)):
        if want is not None:
            assert relevant(snap) == want, f"after step {i}"


@pytest.mark.parametrize(
    "name",
    [
        "hostile",
        "unicode",
        "unset_path",
        "only_foreign",
        "stack_switch_False",
        "stack_switch_True",
    ],
)
def test_bat_matches_the_reference(name: str, results: Any) -> None:
    session, result, _ = results[name]
    check(session, result)
    assert set(result.codes) == {0}
    if name == "hostile":
        odd = {
            k: v
            for k, v in result.snaps[0].items()
            if k.startswith("CUDA_PATH_V") and not k.isidentifier()
        }
        assert len(odd) == 2 and all(odd.items() <= snap.items() for snap in result.snaps)
        assert not (session.root / "hacked").exists()
    if name in ("hostile", "unicode"):
        active = result.snaps[1]
        assert active["PATH"].split(";")[0].endswith(r"\envA\Library\bin")
        assert "CUDA_PATH_V10_0" not in active and active["TF_CPP_MIN_LOG_LEVEL"] == "2"
        assert result.snaps[2] == result.snaps[1]  # activating twice = once
    if name.startswith("stack"):  # back to the start, with the user's edit kept
        mine = session.start | {"PATH": MINE + session.start["PATH"]}
        assert relevant(result.snaps[-1]) == mine
    else:  # the whole environment as it started, byte for byte (no helper left behind)
        assert result.snaps[-1] == result.snaps[0]


@pytest.mark.parametrize("name", ["near_8191", "control_char", "delayed_bang"])
def test_the_core_refuses_what_cmd_cannot_read_back(name: str, results: Any) -> None:
    session, result, _ = results[name]
    check(session, result)
    why = {"near_8191": "over cmd's limit", "control_char": "U+0007", "delayed_bang": "delayed"}
    (refusal,) = session.refusals
    assert why[name] in refusal


def test_the_core_output_is_ascii_and_the_stub_has_crlf(root: Path, results: Any) -> None:
    outputs = sorted((root / "out").glob("*.bat"))
    assert outputs and all(p.read_bytes().isascii() for p in outputs)
    assert any(b"%_EFY_U:~" in p.read_bytes() for p in outputs)  # non-ASCII was copied
    bat = (root / "envA" / script_relpath(COMBOS["A"], "activate", "bat")).read_bytes()
    assert bat.count(b"\n") == bat.count(b"\r\n") > 0 and bat.isascii()


# --- hypothesis: many PATHs, one wine run per example ----------------------------------------

PIECES = ["a", "b b", "(x86)", "&", "%P%", "!", '"', "'", "^", "<>|", "=", "-", "~1"]
PIECES += ["\u00e9", "\u6570\u636e", "\U0001f600", "\u00ff\u0100"]


def entry_strategy(root: Path) -> st.SearchStrategy[str]:
    plain = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map(
        lambda p: "C:\\u\\" + "".join(p)
    )
    special = st.sampled_from(
        [
            CUDA + r"\bin",
            CUDA.upper() + r"\LIBNVVP" + "\\",
            r"C:\tools\cuda\bin",
            win_path(root / "other") + r"\Library\bin",
            win_path(root / "envA") + r"\Library\bin",
            "",
        ]
    )
    return st.one_of(plain, special)


HYP_RUNS = itertools.count()


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_bat_matches_the_reference_on_random_paths(
    data: st.DataObject, wine: WinePrefix, root: Path
) -> None:
    paths = data.draw(
        st.lists(
            st.one_of(st.none(), st.lists(entry_strategy(root), min_size=1, max_size=6)),
            min_size=12,
            max_size=12,
        )
    )
    sessions = []
    for entries in paths:
        start = {"CONDA_PREFIX": win_path(root / "envA"), "CONDA_SHLVL": "1"}
        if entries is not None and ";".join(entries):
            start["PATH"] = ";".join(entries)
        s = Session(root, start)
        s.source("A", "activate")
        s.source("A", "deactivate")
        sessions.append((s, False))
    results, stderr = run_sessions(wine, root, sessions, f"hyp{next(HYP_RUNS)}")
    for (s, _), r in zip(sessions, results, strict=True):
        check(s, r)
        assert set(r.codes) == {0}, stderr
        assert r.snaps[-1] == r.snaps[0]
