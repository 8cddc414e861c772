"""The platforms envfactory locks and creates for, apart from the catalog's model: the create
path needs only these, and importing the model (a dozen frozen dataclasses, ~6 ms) is not
needed to create from a lock."""

from __future__ import annotations

import sys
from typing import Literal, get_args

from envfactory.errors import UserInputError, did_you_mean

Platform = Literal["linux-64", "win-64"]
PLATFORMS: tuple[Platform, ...] = get_args(Platform)
OperatingSystem = Literal["linux", "windows"]


def os_of(platform: Platform) -> OperatingSystem:
    return "windows" if platform.startswith("win") else "linux"


def host_platform() -> Platform:
    """The lock platform of the machine running envfactory."""
    if sys.platform.startswith("win"):
        return "win-64"
    if sys.platform.startswith("linux"):
        return "linux-64"
    raise UserInputError(
        f"no lock platform for this machine ({sys.platform})",
        f"envfactory locks {', '.join(PLATFORMS)}; pass --platform to choose one of them",
    )


def parse_platform(text: str) -> Platform:
    for platform in PLATFORMS:
        if text == platform:
            return platform
    raise UserInputError(
        f"unknown platform '{text}'", did_you_mean(text, PLATFORMS, "envfactory render --help")
    )
