"""All Jinja setup in one place: where templates live, strict undefined, the quoting filters."""

from __future__ import annotations

import functools
import json
import re
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envfactory.errors import CatalogError

if TYPE_CHECKING:  # jinja2 is imported by the commands that render, not by every command
    import jinja2


def templates_dir() -> Path:
    """The templates shipped inside the wheel, or the repository's top-level ``templates/``."""
    packaged = Path(__file__).resolve().parents[1] / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "templates"


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
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory or templates_dir())),
        bytecode_cache=_bytecode_cache(),
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


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja's own per-user cache of compiled templates (a 0700 directory in the temp dir that
    Jinja checks is the user's): compiling the ~10 templates of a render took most of its time.
    Entries are keyed by the template's source and the Python version; a cache that cannot be
    used is skipped, never an error."""
    import jinja2

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                return

    try:
        return QuietCache()
    except (OSError, RuntimeError):  # an unwritable temp dir, or one that is not safe
        return None


def render_template(name: str, context: dict[str, Any], directory: Path | None = None) -> str:
    """Render one template; a broken template is reported with its file and line."""
    import jinja2

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
