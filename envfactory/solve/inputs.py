"""What the lock of one platform depends on, resolved once: ``PlatformInputs``.

``LockRequest.inputs`` builds one per platform the first time it is asked, and every step of a
lock reads that value: the solve (specs, channel URLs, virtual packages, constraints), the pip
resolution, the post-solve checks (the combo's spec), the activation plan written into the set
and recorded in the lock, and the record itself: ``record()`` is exactly what the lock keeps
under ``envfactory.inputs.<platform>`` and exactly what ``lock --check`` compares with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from envfactory.catalog.model import Combo, Constraint, Platform
from envfactory.errors import UserInputError
from envfactory.render.environment import Additions, EnvironmentSpec
from envfactory.solve.channels import ChannelMap
from envfactory.untrusted import redact, redact_url

if TYPE_CHECKING:
    from envfactory.activation.plan import ActivationPlan

SolverKind = Literal["rattler", "conda-lock"]

# Bump when the meaning of the recorded inputs changes, so older locks read as stale.
INPUTS_FORMAT = "2"  # 2: companion constraints recorded


@dataclass(frozen=True)
class PlatformInputs:
    """Everything the lock of one platform depends on. The specs and channel URLs here carry
    the channel map's credentials (the solver needs them); ``record()`` drops them (the lock is
    committed)."""

    platform: Platform
    combo: str
    python: str
    #: the combo's own spec: what the post-solve checks hold the solution to
    spec: EnvironmentSpec
    #: the conda specs as asked for (the combo's, the additions', ``pip`` when pip is needed)
    requested: tuple[str, ...]
    #: the same, channel prefixes pointed through the channel map
    conda: tuple[str, ...]
    pip: tuple[str, ...]
    #: channel names (the combo's, then the additions'), and their URLs through the map
    channels: tuple[str, ...]
    channel_urls: tuple[str, ...]
    constraints: tuple[Constraint, ...]
    virtual_packages: Mapping[str, str]
    solver: SolverKind
    pip_index: str | None
    environment: str | None
    variables: Mapping[str, str]
    #: the activation plan ``create`` installs, and the lock set's activation scripts carry out
    activation: ActivationPlan

    @property
    def conda_constraints(self) -> list[str]:
        return [c.conda_spec for c in self.constraints]

    def record(self) -> dict[str, Any]:
        """The serialised form: recorded in the lock (``LockMetadata.inputs``), hashed into
        ``inputs_sha256``, and compared by ``lock --check``. JSON values only, no credentials."""
        out: dict[str, Any] = {
            "format": INPUTS_FORMAT,
            "combo": self.combo,
            "python": self.python,
            "conda": [redact(s) for s in self.conda],
            "pip": list(self.pip),
            "channels": {
                name: redact_url(url)
                for name, url in zip(self.channels, self.channel_urls, strict=True)
            },
            "virtual_packages": dict(self.virtual_packages),
            "constraints": [c.requirement for c in self.constraints],
            "solver": self.solver,
            "pip_index": redact_url(self.pip_index) if self.pip and self.pip_index else None,
        }
        if self.environment is not None:
            out["environment"] = self.environment
            out["variables"] = dict(sorted(self.variables.items()))
        return out


def platform_inputs(
    combo: Combo,
    platform: Platform,
    spec: EnvironmentSpec,
    *,
    channel_map: ChannelMap,
    solver: SolverKind,
    virtual_packages: Mapping[str, str] | None,
    pip_index: str | None,
    additions: Additions,
) -> PlatformInputs:
    """Resolve ``platform``'s inputs once. ``virtual_packages``: an override of the combo's. A
    GPU combo without ``__cuda`` is refused: its lock would silently become a CPU lock."""
    from envfactory.activation.plan import plan_for

    virtual = dict(virtual_packages or spec.virtual_packages)
    if "__cuda" not in virtual:
        raise UserInputError(
            f"the virtual packages for {combo.name} on {platform} lack __cuda "
            f"(got: {', '.join(sorted(virtual)) or 'none'})",
            f"{combo.name} is a GPU combo: give __cuda (its CUDA is "
            f"{combo.cuda.value}) or drop --virtual-package-spec to use the combo's own",
        )
    pip = (*spec.pip_requirements(), *additions.pip)
    requested = [s for s in spec.conda_specs() if s != "pip"]
    requested += additions.conda
    if pip:
        requested.append("pip")
    conda = []
    for text in requested:
        channel, sep, rest = text.partition("::")
        conda.append(f"{channel_map.url(channel)}::{rest}" if sep else text)
    channels = tuple(dict.fromkeys((*spec.channels, *additions.channels)))
    return PlatformInputs(
        platform=platform,
        combo=combo.name,
        python=spec.python,
        spec=spec,
        requested=tuple(requested),
        conda=tuple(conda),
        pip=pip,
        channels=channels,
        channel_urls=tuple(channel_map.urls(channels)),
        constraints=combo.constraints_for(platform),
        virtual_packages=dict(sorted(virtual.items())),
        solver=solver,
        pip_index=pip_index,
        environment=additions.environment,
        variables=dict(additions.variables),
        activation=plan_for(combo, platform),
    )


def inputs_hash(records: Mapping[Platform, Mapping[str, Any]]) -> str:
    """``inputs_sha256``: the hash of every platform's ``PlatformInputs.record()``."""
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()
