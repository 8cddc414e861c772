"""envfactory: reproducible GPU deep-learning conda environments."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("envfactory")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
