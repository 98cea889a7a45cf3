"""A chapter's parameters: where the chapters are (``_toc.yml``), the ``parameters`` cell each starts with
(plain assignments of literals, each with a comment saying what it is), and values as the command line gives them
(``-p NAME VALUE``, read as YAML like papermill's).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Any, NamedTuple

from pdcalc.book.page import need, read_notebook
from pdcalc.core import checks
from pdcalc.core.errors import OneLineError, RerunError, UnknownNameError

#: The repository holding the book (``_toc.yml`` at its root, the chapters under ``book/``).
REPO = Path(__file__).resolve().parents[2]


class ParameterError(OneLineError, ValueError):
    """A parameter value a chapter cannot take (unknown name, wrong type, out of range, impossible)."""


class Parameter(NamedTuple):
    """One assignment of a chapter's ``parameters`` cell."""

    default: Any
    type: type          # type of the default; ``type(None)`` for a ``None`` default
    comment: str        # the comment on the assignment's line, without ``#``


# ---------------------------------------------------------------------------------------------
# chapters and their parameters
# ---------------------------------------------------------------------------------------------
def book_root() -> Path | None:
    """The folder holding ``_toc.yml``: the repository of this package, else the nearest parent of the cwd."""
    cwd = Path.cwd().resolve()
    for folder in (REPO, cwd, *cwd.parents):
        if (folder / "_toc.yml").is_file():
            return folder
    return None


def toc_entries(toc: dict) -> list[str]:
    """Every ``file:`` entry of a parsed Jupyter Book 1 ``_toc.yml`` (the root first), without suffix."""
    entries: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("file"), str):
                entries.append(node["file"])
            for key, value in node.items():
                if key != "file":
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    if isinstance(toc.get("root"), str):
        entries.append(toc["root"])
    walk({k: v for k, v in toc.items() if k != "root"})
    return entries


def chapters() -> dict[str, Path]:
    """The notebook chapters of the book, name (file stem) -> path, in table-of-contents order.

    Returns
    -------
    dict
        Empty when no ``_toc.yml`` is found (pdcalc installed without its book).
    """
    yaml = need("yaml", "pyyaml")
    root = book_root()
    if root is None:
        return {}
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8")) or {}
    out: dict[str, Path] = {}
    for entry in toc_entries(toc):
        path = root / (entry + ".ipynb")
        if path.is_file():
            out[Path(entry).name] = path
    return out


def resolve_chapter(chapter: str | Path) -> Path:
    """The notebook of ``chapter``: a chapter name (``per_card``) or a path to an ``.ipynb`` file.

    Raises
    ------
    UnknownNameError
        Neither a chapter of the book nor an existing notebook; the message lists the chapters.
    """
    known = chapters()
    key = str(chapter)
    if key in known:
        return known[key]
    path = Path(key)
    if path.suffix == ".ipynb" and path.is_file():
        return path.resolve()
    if key.removesuffix(".ipynb") in known:
        return known[key.removesuffix(".ipynb")]
    raise UnknownNameError("chapter", key, known or ["(no _toc.yml found: give a path to an .ipynb file)"])


def chapter_name(path: Path) -> str:
    return path.stem


def _parameters_cell(nb) -> tuple[int, str] | None:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            return index, cell.source
    return None


def _line_comments(source: str) -> dict[int, str]:
    comments: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError):
        pass
    return comments


def parse_parameters_cell(source: str, *, where: str = "parameters cell") -> dict[str, Parameter]:
    """The assignments of a ``parameters`` cell: name -> (default, type, comment).

    Only top-level ``name = <literal>`` assignments count; anything else in the cell is ignored.

    Raises
    ------
    RerunError
        The cell is not valid Python.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise RerunError(f"{where}: not valid Python (line {exc.lineno}: {exc.msg})") from None
    comments = _line_comments(source)
    out: dict[str, Parameter] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        try:
            default = ast.literal_eval(value)
        except ValueError:
            continue
        out[target] = Parameter(default, type(default), comments.get(node.end_lineno, ""))
    return out


def chapter_parameters(chapter: str | Path) -> dict[str, Parameter]:
    """The parameters a chapter declares, name -> ``(default, type, comment)``.

    Parameters
    ----------
    chapter : str or Path
        A chapter name (``per_card``, ``kv_memory`` ...: the notebooks of ``_toc.yml``) or a path.

    Returns
    -------
    dict
        Empty when the notebook has no cell tagged ``parameters``.

    Examples
    --------
    >>> chapter_parameters("per_card")["d_ep"]  # doctest: +SKIP
    Parameter(default=32, type=<class 'int'>, comment='cards per decode EP group')
    """
    path = resolve_chapter(chapter)
    found = _parameters_cell(read_notebook(path))
    if found is None:
        return {}
    return parse_parameters_cell(found[1], where=f"{path.name}: parameters cell")


# ---------------------------------------------------------------------------------------------
# values from the command line
# ---------------------------------------------------------------------------------------------
_PY_WORDS = {"None": None, "True": True, "False": False}
#: Deepest nesting and most items a parsed value may have (no parameter takes more than a short list).
MAX_DEPTH, MAX_ITEMS = 8, 10_000
#: Longest integer literal Python converts without raising (``sys.get_int_max_str_digits``).
_MAX_DIGITS = 4300
_INTEGER = re.compile(r"[-+]?[0-9][0-9_]*")


def _value_error(name: str | None, text: str, why: str) -> ParameterError:
    what = f"parameter {name!r}" if name else f"value {checks.show(text)}"
    return ParameterError(f"{what}: {why}")


def _check_shape(value: Any, name: str | None, text: str) -> None:
    """Refuse values nested deeper than :data:`MAX_DEPTH` or holding more than :data:`MAX_ITEMS` items."""
    seen, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH:
            raise _value_error(name, text, f"nested more than {MAX_DEPTH} deep; no parameter takes that")
        if seen > MAX_ITEMS:
            raise _value_error(name, text, f"more than {MAX_ITEMS:,} items; no parameter takes that")
        if isinstance(item, (list, tuple, set)):
            stack.extend((x, depth + 1) for x in item)
        elif isinstance(item, dict):
            stack.extend((x, depth + 1) for pair in item.items() for x in pair)


def parse_value(text: str, expected: type | None = None, *, name: str | None = None) -> Any:
    """A command-line value as papermill's ``-p`` would read it, given the parameter's type.

    YAML scalars and flow collections (``8``, ``0.85``, ``true``, ``null``, ``[4, 8]``,
    ``{p_act: 5}``); Python's ``None``/``True``/``False`` too; numbers such as ``1e3`` that YAML
    leaves as text become floats (``inf`` and ``nan`` too: :func:`validate` refuses them with the
    parameter's name). A string parameter takes the text as typed (``-p model 123`` is the string
    ``"123"``), and a list parameter also takes ``4,8,16``.

    Parameters
    ----------
    text : str
        The value as typed.
    expected : type, optional
        The type of the parameter's default.
    name : str, optional
        The parameter's name, for error messages.

    Raises
    ------
    ParameterError
        Text no parameter can take: an integer of more than 4,300 digits, a collection nested more
        than :data:`MAX_DEPTH` deep or holding more than :data:`MAX_ITEMS` items. One line, naming
        ``name`` when given.
    """
    if not isinstance(text, str):
        raise _value_error(name, repr(text), f"must be text, got {type(text).__name__}")
    if expected is str:
        return text
    if text.strip() in _PY_WORDS:
        return _PY_WORDS[text.strip()]
    if _INTEGER.fullmatch(text.strip()) and len(text.strip().replace("_", "").lstrip("+-")) > _MAX_DIGITS:
        digits = len(text.strip().replace("_", "").lstrip("+-"))
        raise _value_error(name, text, f"an integer of {digits:,} digits; no parameter takes one that large")
    yaml = need("yaml", "pyyaml")
    try:
        value = yaml.safe_load(text)
    except RecursionError:
        raise _value_error(name, text, f"nested more than {MAX_DEPTH} deep; no parameter takes that") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):  # not YAML (or junk): the text itself
        value = text
    if isinstance(value, str):
        if expected is list and "," in value and not value.strip().startswith(("[", "{")):
            return [parse_value(part.strip(), name=name) for part in value.split(",") if part.strip()]
        try:
            return int(value)
        except ValueError:
            pass
        try:
            return float(value)
        except ValueError:
            return value
    _check_shape(value, name, text)
    return value
