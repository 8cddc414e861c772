"""``python -m envfactory``: the same as the ``envfactory`` console script."""

from envfactory.cli import main

main()
