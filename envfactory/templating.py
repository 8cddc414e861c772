"""All Jinja setup in one place: where templates live, strict undefined, the quoting filters."""

from __future__ import annotations

import functools
import json
import re
import traceback
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from envfactory.errors import CatalogError


def templates_dir() -> Path:
    """The templates shipped inside the wheel, or the repository's top-level ``templates/``."""
    packaged = Path(str(resources.files("envfactory"))) / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[1] / "templates"


_PLAIN_YAML = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:=<>!*,+/-]*")


def yaml_str(value: object) -> str:
    """A YAML scalar: bare when it is safe to read back as the same string, else double-quoted."""
    text = str(value)
    if _PLAIN_YAML.fullmatch(text) and not text.endswith(":") and ": " not in text:
        return text
    return json.dumps(text, ensure_ascii=False)


@functools.cache
def environment(directory: Path | None = None) -> jinja2.Environment:
    """The Jinja environment over ``directory`` (default: the shipped templates)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory or templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["yaml"] = yaml_str
    env.filters["yaml_quoted"] = lambda value: json.dumps(str(value), ensure_ascii=False)
    # --- shell quoting filters (activation scripts) --------------------------------------
    from envfactory.activation import shellquote

    for name, quote in shellquote.FILTERS.items():
        env.filters[f"{name}_quote"] = quote
    # --- end of shell quoting filters ------------------------------------------------------
    return env


def render_template(name: str, context: dict[str, Any], directory: Path | None = None) -> str:
    """Render one template; a broken template is reported with its file and line."""
    try:
        return environment(directory).get_template(name).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        where = f"{exc.filename or name}:{exc.lineno}"
        raise CatalogError(f"{where}: template error: {exc.message}", "fix the template") from None
    except jinja2.TemplateNotFound as exc:
        raise CatalogError(
            f"template '{exc.name}' not found in {templates_dir()}",
            "reinstall envfactory; the wheel ships its templates",
        ) from None
    except jinja2.UndefinedError as exc:
        raise CatalogError(
            f"{_template_frame(exc, name)}: {exc.message}",
            "the template uses a value render does not give it",
        ) from None


def _template_frame(exc: BaseException, name: str) -> str:
    """``file:line`` of the template line that failed (Jinja puts template frames in tracebacks)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.endswith(name):
            return f"{frame.filename}:{frame.lineno}"
    return str(templates_dir() / name)
