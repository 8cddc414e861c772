"""envfactory: reproducible GPU deep-learning conda environments."""

# The one place the version is written: hatchling reads it from here ([tool.hatch.version] in
# pyproject.toml), so the wheel's metadata and ``envfactory --version`` cannot disagree, and no
# command pays for importlib.metadata (26-40 ms) to learn it.
__version__ = "0.1.0"

__all__ = ["__version__"]
