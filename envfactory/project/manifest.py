"""Project manifest: ``envfactory.yaml`` names the environments of a project repository, each a
combo plus what the project adds to it, and says where their locks live (``locks/<env>/``).

Schema (every key but ``combo`` optional; unknown keys are errors, reported with file and line)::

    environments:
      legacy:                          # [A-Za-z0-9][A-Za-z0-9_.-]*
        combo: tf114-cuda100           # see 'envfactory list'
        python: "3.7"                  # within the combo's range; default: the combo's default
        platforms: [linux-64, win-64]  # a subset of the combo's; default: all it covers
        add: [opencv=3.4.2, pandas]    # conda match specs, solved together with the combo's pins
        pip: [requests==2.22.0]        # pip requirements, locked for the target like the combo's
        channels: [conda-forge]        # searched after the combo's own channels
        variables: {MY_DATA: /data}    # set on activation (conda-meta/state)

An addition may never override the combo: adding a package the combo pins (``numpy`` in
tf114-cuda100), a variant-selecting package (``tensorflow``, ``cudatoolkit``, ``cudnn`` ...), or
``python`` is an error naming both the addition and the combo's pin. The loader reads once into
frozen records; ``lock_request`` turns an environment into the lock stage's input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfactory import untrusted
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import PLATFORMS, VARIANT_PACKAGES, Catalog, Combo, Platform
from envfactory.errors import CatalogError, UserInputError, did_you_mean
from envfactory.fsio import read_text
from envfactory.render.environment import Additions, resolve_python
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, SolverKind
from envfactory.yamlio import YamlMap, YamlReader, YamlSeq, line_of, load_yaml

PROJECT_FILE = "envfactory.yaml"
LOCKS_DIR = "locks"
ENVS_DIR = "envs"

# pip distributions that are TensorFlow itself: adding one would replace the combo's.
_TENSORFLOW_WHEELS = re.compile(r"(tensorflow|tf-nightly|intel-tensorflow)([-_].*)?")
SCHEMA_HINT = "see the envfactory.yaml schema in envfactory's README, section Projects"


class ProjectError(UserInputError):
    """``envfactory.yaml`` is malformed or asks for something the combo forbids (exit 1)."""


@dataclass(frozen=True)
class ProjectEnvironment:
    name: str
    combo: Combo
    python: str
    platforms: tuple[Platform, ...]
    conda: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    variables: Mapping[str, str] = field(default_factory=dict)

    def combo_channels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for p in self.platforms for c in self.combo.route(p).channels))

    def additions(self) -> Additions:
        return Additions(
            environment=self.name,
            conda=self.conda,
            pip=self.pip,
            channels=self.channels,
            variables=self.variables,
        )


@dataclass(frozen=True)
class Project:
    path: Path
    environments: Mapping[str, ProjectEnvironment]

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def locks_dir(self) -> Path:
        return self.directory / LOCKS_DIR

    def lock_dir(self, name: str) -> Path:
        return self.locks_dir / name

    def default_prefix(self, name: str) -> Path:
        """Where ``create ENV`` puts a project environment without ``-p``/``-n``."""
        return self.directory / ENVS_DIR / name

    def environment(self, name: str) -> ProjectEnvironment:
        try:
            return self.environments[name]
        except KeyError:
            raise ProjectError(
                f"{self.path} defines no environment '{name}'",
                did_you_mean(name, self.environments, f"{self.path.name} (environments:)"),
            ) from None

    def __iter__(self) -> Iterator[ProjectEnvironment]:
        return iter(self.environments.values())


def lock_request(
    env: ProjectEnvironment,
    channel_map: ChannelMap,
    solver: SolverKind = "rattler",
    pip_index: str | None = None,
) -> LockRequest:
    """The lock stage's input for a project environment: the combo plus the additions."""
    return LockRequest.for_combo(
        env.combo,
        platforms=env.platforms,
        python=env.python,
        channel_map=channel_map,
        solver=solver,
        pip_index=pip_index,
        additions=env.additions(),
    )


# --------------------------------------------------------------------------------------------
# Finding and loading the file.


def find_project(explicit: Path | None = None, start: Path | None = None) -> Project | None:
    """``--project FILE`` (must exist), else ``./envfactory.yaml`` if there is one."""
    if explicit is not None:
        if not explicit.is_file():
            raise ProjectError(
                f"no project file at {explicit}",
                f"pass the path of an {PROJECT_FILE}; {SCHEMA_HINT}",
            )
        return load_project(explicit)
    candidate = (start or Path.cwd()) / PROJECT_FILE
    return load_project(candidate) if candidate.is_file() else None


def load_project(path: Path, catalog: Catalog | None = None) -> Project:
    try:
        text = read_text(path, "the project file", SCHEMA_HINT)
    except OSError as exc:
        raise ProjectError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return _ProjectLoader(path, catalog or load_catalog()).load(text)
    except CatalogError as exc:  # the catalog's reader reports unknown keys this way
        raise ProjectError(exc.message, exc.hint) from None


class _ManifestReader(YamlReader):
    """The catalog's validating reader, with hints that point at the project file's schema."""

    def __init__(self, path: str) -> None:
        super().__init__(path, SCHEMA_HINT)

    def at(self, line: int | None, message: str, hint: str | None = None) -> ProjectError:
        where = f"{self.path}:{line}" if line else self.path
        return ProjectError(f"{where}: {message}", hint or SCHEMA_HINT)


def _string_keys(reader: _ManifestReader, table: YamlMap, what: str) -> None:
    """YAML keys may be null, numbers, booleans or lists; only strings name things here
    (``null:`` must not become an environment named 'None')."""
    for key in table:
        if not isinstance(key, str):
            line = table.key_line(key) if isinstance(table, YamlMap) else None
            kind = (
                "null" if key is None
                else "a boolean" if isinstance(key, bool)
                else "a number" if isinstance(key, int | float)
                else "a list or mapping"
            )  # fmt: skip
            raise reader.at(
                line,
                f"{what}: the key {key!r} is {kind}, not a name",
                "quote it if it is meant as a name",
            )


def _key_line(parent: YamlMap, key: str) -> int:
    return parent.key_line(key)


def _item_line(seq: YamlSeq, index: int) -> int:
    return seq.item_line(index)


ENV_KEYS = {"python", "platforms", "add", "pip", "channels", "variables"}


class _ProjectLoader:
    def __init__(self, path: Path, catalog: Catalog) -> None:
        self.path = path
        self.catalog = catalog
        self.r = _ManifestReader(str(path))

    def load(self, text: str) -> Project:
        doc = load_yaml(str(self.path), text, SCHEMA_HINT)
        if doc is None:
            raise self.r.at(None, "the file is empty; it needs an 'environments:' mapping")
        top = self.r.mapping(doc, "the project file (top level)", {"environments"})
        table = self._names_table(top["environments"], "environments")
        if not table:
            raise self.r.fail(table, "'environments' names no environment")
        envs = {name: self._environment(name, node, table) for name, node in table.items()}
        return Project(path=self.path, environments=envs)

    def _names_table(self, node: Any, what: str) -> YamlMap:
        """A mapping whose keys the user names (environments, variables): string keys only."""
        if not isinstance(node, YamlMap):
            raise self.r.fail(node, f"{what} must be a mapping, got {type(node).__name__}")
        _string_keys(self.r, node, what)
        return node

    def _environment(self, name: str, node: Any, table: YamlMap) -> ProjectEnvironment:
        r = self.r
        if not untrusted.PLAIN_NAME.fullmatch(name):
            raise r.at(
                _key_line(table, name),
                f"environment name '{name}' is not a plain name",
                "use letters, digits, '.', '_' and '-' (it names locks/<env>/)",
            )
        what = f"environment '{name}'"
        m = r.mapping(node, what, {"combo"}, ENV_KEYS)
        combo_name = r.string(m, "combo", what)
        try:
            combo = self.catalog.combo(combo_name)
        except UserInputError as exc:
            raise r.at(_key_line(m, "combo"), f"{what}: {exc.message}", exc.hint) from None

        platforms = self._platforms(m, combo, what)
        python = r.string(m, "python", what) if "python" in m else None
        try:
            chosen_python = resolve_python(combo, platforms, python)
        except UserInputError as exc:
            line = _key_line(m, "python") if "python" in m else line_of(m)
            raise r.at(line, f"{what}: {exc.message}", exc.hint) from None

        channels = r.strings(m, "channels", what) if "channels" in m else ()
        for index, channel in enumerate(channels):
            problem = untrusted.channel_problem(channel)
            if problem:
                raise r.at(
                    _item_line(m["channels"], index),
                    f"{what}: channel {channel!r}: {problem}",
                    "name a channel (conda-forge) or give its http(s):// or file:// URL",
                )
        env = ProjectEnvironment(
            name=name,
            combo=combo,
            python=chosen_python,
            platforms=platforms,
            channels=channels,
        )
        conda = self._conda(m, env, what) if "add" in m else ()
        pip = self._pip(m, env, what) if "pip" in m else ()
        variables = self._variables(m, what) if "variables" in m else {}
        return ProjectEnvironment(
            name=name,
            combo=combo,
            python=chosen_python,
            platforms=platforms,
            conda=conda,
            pip=pip,
            channels=channels,
            variables=variables,
        )

    def _platforms(self, m: YamlMap, combo: Combo, what: str) -> tuple[Platform, ...]:
        covered = tuple(p for p in PLATFORMS if p in combo.platforms)
        if "platforms" not in m:
            return covered
        seq = self.r.sequence(m, "platforms", what)
        chosen: list[Platform] = []
        for index, value in enumerate(seq):
            line = _item_line(seq, index)
            platform = next((p for p in PLATFORMS if p == value), None)
            if platform is None:
                raise self.r.at(
                    line,
                    f"{what}: unknown platform '{value}'",
                    did_you_mean(str(value), PLATFORMS, "envfactory list"),
                )
            try:
                combo.route(platform)
            except UserInputError as exc:
                raise self.r.at(line, f"{what}: {exc.message}", exc.hint) from None
            chosen.append(platform)
        if not chosen:
            raise self.r.at(_key_line(m, "platforms"), f"{what}: 'platforms' is empty")
        return tuple(dict.fromkeys(chosen))

    def _specs(self, m: YamlMap, key: str, what: str) -> list[tuple[str, int]]:
        seq = self.r.sequence(m, key, what)
        out = []
        for index, value in enumerate(seq):
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise self.r.at(
                    _item_line(seq, index),
                    f"{what}: '{key}' entries must be strings, got {type(value).__name__}",
                    'quote the entry, e.g. - "opencv=3.4.2"',
                )
            problem = untrusted.text_problem(str(value))
            if problem:
                raise self.r.at(_item_line(seq, index), f"{what}: '{key}' entry {problem}")
            out.append((str(value), _item_line(seq, index)))
        return out

    def _conda(self, m: YamlMap, env: ProjectEnvironment, what: str) -> tuple[str, ...]:
        from envfactory.solve import rattler_adapter

        channels = set(env.combo_channels()) | set(env.channels)
        out: list[str] = []
        for text, line in self._specs(m, "add", what):
            try:
                name, channel = rattler_adapter.spec_name_and_channel(text)
            except UserInputError as exc:
                raise self.r.at(line, f"{what}: {exc.message}", exc.hint) from None
            if channel is not None and channel not in channels:
                raise self.r.at(
                    line,
                    f"{what}: '{text}' names channel '{channel}', which the environment does "
                    f"not search ({', '.join(sorted(channels))})",
                    f"add '{channel}' to the environment's channels:",
                )
            clash = _conda_clash(env, name)
            if clash:
                raise self.r.at(line, f"{what}: '{text}' {clash[0]}", clash[1])
            out.append(text)
        return tuple(out)

    def _pip(self, m: YamlMap, env: ProjectEnvironment, what: str) -> tuple[str, ...]:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        out: list[str] = []
        for text, line in self._specs(m, "pip", what):
            try:
                requirement = Requirement(text)
            except InvalidRequirement as exc:
                raise self.r.at(line, f"{what}: not a pip requirement: '{text}': {exc}") from None
            name = canonicalize_name(requirement.name)
            problem = untrusted.url_problem(requirement.url) if requirement.url else None
            if problem:
                raise self.r.at(line, f"{what}: pip '{text}': the URL {problem}")
            clash = _pip_clash(env, name)
            if clash:
                raise self.r.at(line, f"{what}: pip '{text}' {clash[0]}", clash[1])
            out.append(text)
        return tuple(out)

    def _variables(self, m: YamlMap, what: str) -> dict[str, str]:
        table = self._names_table(m["variables"], f"{what} variables")
        out: dict[str, str] = {}
        for name in table:
            line = _key_line(table, name)
            if not untrusted.VARIABLE_NAME.fullmatch(name):
                raise self.r.at(line, f"{what}: {name!r} is not an environment variable name")
            if untrusted.RESERVED_VARIABLE.fullmatch(name):
                raise self.r.at(
                    line,
                    f"{what}: {name} is set by conda or by the combo's activation scripts",
                    untrusted.RESERVED_HINT,
                )
            value = self.r.string(table, name, f"{what} variables")
            problem = untrusted.state_value_problem(value)
            if problem:
                raise self.r.at(
                    line,
                    f"{what}: the value of {name} cannot be set by conda's activators: {problem}",
                    "conda pastes these values into every shell's activation as they are; drop "
                    "the character (on Windows, write paths with '/' instead of '\\')",
                )
            out[name] = value
        return dict(sorted(out.items()))


def _pins_named(env: ProjectEnvironment, name: str) -> dict[str, list[Platform]]:
    """The combo's conda pins of package ``name`` on the environment's platforms."""
    found: dict[str, list[Platform]] = {}
    for platform in env.platforms:
        for pin in env.combo.route(platform).conda_pins(env.python):
            if pin.name == name:
                found.setdefault(pin.spec, []).append(platform)
    return found


def _describe_pins(pins: Mapping[str, Sequence[Platform]]) -> str:
    return "; ".join(f"{spec} ({', '.join(platforms)})" for spec, platforms in pins.items())


def _conda_clash(env: ProjectEnvironment, name: str) -> tuple[str, str] | None:
    """Why adding conda package ``name`` would override the combo, with the fix; or None."""
    combo = env.combo.name
    show = f"see 'envfactory show {combo}'"
    if name == "python":
        return (
            f"clashes with {combo}'s python {env.python}",
            f"set the environment's 'python:' key instead ({combo} allows "
            f"{', '.join(env.combo.python_allowed)})",
        )
    pins = _pins_named(env, name)
    if pins:
        return (
            f"clashes with {combo}'s pin {_describe_pins(pins)}",
            f"the combo's pins are what make it work; drop '{name}' from add: ({show}), "
            "or pick another combo",
        )
    if name in VARIANT_PACKAGES:
        fixed = [
            pin.spec
            for p in env.platforms
            for pin in env.combo.route(p).conda_pins(env.python)
            if pin.name in VARIANT_PACKAGES
        ]
        fixed += [pin.requirement for p in env.platforms for pin in env.combo.route(p).pip]
        return (
            f"is a variant-selecting package, and {combo} fixes the variant itself "
            f"({', '.join(dict.fromkeys(fixed)) or 'TensorFlow ' + env.combo.tensorflow.value})",
            f"drop '{name}' from add: ({show}), or pick another combo",
        )
    return None


def _pip_clash(env: ProjectEnvironment, name: str) -> tuple[str, str] | None:
    from packaging.utils import canonicalize_name

    combo = env.combo.name
    show = f"see 'envfactory show {combo}'"
    for platform in env.platforms:
        for pin in env.combo.route(platform).pip:
            if canonicalize_name(pin.name) == name:
                return (
                    f"clashes with {combo}'s pip pin {pin.requirement} ({platform})",
                    f"drop it from pip: ({show})",
                )
    conda_names = {canonicalize_name(n) for n in VARIANT_PACKAGES | {"python"}}
    pins = {
        spec: platforms
        for pin_name in {
            pin.name for p in env.platforms for pin in env.combo.route(p).conda_pins(env.python)
        }
        if canonicalize_name(pin_name) == name
        for spec, platforms in _pins_named(env, pin_name).items()
    }
    if pins:
        return (
            f"would replace {combo}'s conda pin {_describe_pins(pins)}",
            f"drop it from pip: (the combo pins it in conda; {show})",
        )
    if name in conda_names or _TENSORFLOW_WHEELS.fullmatch(name):
        return (
            f"would replace the TensorFlow/CUDA variant {combo} fixes "
            f"(TensorFlow {env.combo.tensorflow.value}, CUDA {env.combo.cuda.value})",
            f"drop it from pip: ({show}), or pick another combo",
        )
    return None
