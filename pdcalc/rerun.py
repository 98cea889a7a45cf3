"""Re-run a chapter of the book with other parameter values (``pdcalc rerun``).

Every notebook chapter starts with a cell tagged ``parameters``: plain assignments of literals,
each with a comment saying what it is. :func:`rerun` executes a *copy* of a chapter with papermill,
the new values injected after that cell, in the chapter's own directory (``book/``, as Jupyter
Book and nbval run it), and writes the executed copy to an output folder outside ``book/``. With
``html=True`` it also writes a standalone HTML page of the result whose Altair charts draw offline.
The committed chapters are only read.

Parameters are checked before anything runs (:func:`validate`): the name must be one of the
chapter's, the value must have the type of the default (a ``None`` default accepts ``None`` or what
its validator allows), and parameters with a known meaning are checked against pdcalc itself
(:data:`VALIDATORS`): presets must exist, fractions lie in (0, 1], an EP group must be able to
hold the model's routed experts, and so on. papermill alone accepts any name and any value.

Examples
--------
>>> from pdcalc.rerun import rerun  # doctest: +SKIP
>>> result = rerun("per_card", {"card": "ascend-910b4-32g", "d_ep": 16}, html=True)  # doctest: +SKIP
>>> result.notebook_path, result.html_path  # doctest: +SKIP
(PosixPath('pdcalc-runs/per_card.ipynb'), PosixPath('pdcalc-runs/per_card.html'))
"""

from __future__ import annotations

import ast
import base64
import html as _html
import io
import json
import math
import re
import subprocess
import tempfile
import time
import tokenize
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

from pdcalc.errors import PdcalcError, UnknownNameError

#: The repository holding the book (``_toc.yml`` at its root, the chapters under ``book/``).
REPO = Path(__file__).resolve().parent.parent
#: Where runs go unless told otherwise (relative to the current directory).
DEFAULT_OUTDIR = Path("pdcalc-runs")
#: Seconds one cell may run before the run is abandoned.
DEFAULT_TIMEOUT_S = 600
_ANSI = re.compile("\x1b\\[[0-9;?]*[A-Za-z]")


#: Characters that end a line (``str.splitlines``) or are other controls: never printed raw in a message.
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
#: Longest message an error of this module carries (a pasted value can be huge).
MAX_MESSAGE = 2000


def one_line(text: str, *, limit: int = MAX_MESSAGE) -> str:
    """``text`` as one line: line breaks and other control characters escaped (``\\n``), at most ``limit`` characters."""
    out = "".join(repr(ch)[1:-1] if ch in _LINE_BREAKS or unicodedata.category(ch) == "Cc" else ch
                  for ch in str(text))
    return out if len(out) <= limit else out[:limit - 3] + "..."


class _OneLineError(PdcalcError):
    """An error whose message is always one line (see :func:`one_line`)."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


class ParameterError(_OneLineError, ValueError):
    """A parameter value a chapter cannot take (unknown name, wrong type, out of range, impossible)."""


class RerunError(_OneLineError):
    """A re-run that cannot start: a bad output folder, a chapter that is not a notebook, a missing tool."""


class ChapterFailed(_OneLineError, RuntimeError):
    """A cell of the re-run chapter raised; the executed copy is kept at :attr:`notebook_path`.

    The command line exits with status 1 for this error (a chapter that fails is not a usage error).
    The message is one line whatever the exception's text (its whitespace is collapsed).
    """

    exit_code = 1

    def __init__(self, chapter: str, notebook_path: Path, cell: str, ename: str, evalue: str):
        self.chapter, self.notebook_path, self.cell, self.ename, self.evalue = (
            chapter, notebook_path, cell, ename, evalue)
        evalue = " ".join(_ANSI.sub("", str(evalue)).split())
        if len(evalue) > 300:
            evalue = evalue[:297] + "..."
        super().__init__(f"{chapter}: {cell} raised {' '.join(str(ename).split())}: {evalue} "
                         f"(executed copy: {notebook_path})")


class Parameter(NamedTuple):
    """One assignment of a chapter's ``parameters`` cell."""

    default: Any
    type: type          # type of the default; ``type(None)`` for a ``None`` default
    comment: str        # the comment on the assignment's line, without ``#``


@dataclass(frozen=True)
class RunResult:
    """What :func:`rerun` wrote."""

    notebook_path: Path          # the executed copy
    html_path: Path | None       # the standalone page, when asked for
    seconds: float               # wall time of the execution (HTML rendering excluded)


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
    yaml = _need("yaml", "pyyaml")
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


def _chapter_name(path: Path) -> str:
    return path.stem


def _need(module: str, package: str):
    """Import ``module`` or raise :class:`RerunError` naming the extra that installs ``package``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RerunError(f"pdcalc rerun needs {package}: pip install 'pdcalc[book]'") from None


def _read_notebook(path: Path):
    nbformat = _need("nbformat", "nbformat")
    try:
        return nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a user error here
        raise RerunError(f"{path}: not a readable notebook ({type(exc).__name__}: {exc})") from None


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
    found = _parameters_cell(_read_notebook(path))
    if found is None:
        return {}
    return parse_parameters_cell(found[1], where=f"{path.name}: parameters cell")


# ---------------------------------------------------------------------------------------------
# values from the command line
# ---------------------------------------------------------------------------------------------
_PY_WORDS = {"None": None, "True": True, "False": False}


def parse_value(text: str, expected: type | None = None) -> Any:
    """A command-line value as papermill's ``-p`` would read it, given the parameter's type.

    YAML scalars and flow collections (``8``, ``0.85``, ``true``, ``null``, ``[4, 8]``,
    ``{p_act: 5}``); Python's ``None``/``True``/``False`` too; numbers such as ``1e3`` that YAML
    leaves as text become floats. A string parameter takes the text as typed (``-p model 123`` is
    the string ``"123"``), and a list parameter also takes ``4,8,16``.

    Parameters
    ----------
    text : str
        The value as typed.
    expected : type, optional
        The type of the parameter's default.
    """
    if expected is str:
        return text
    if text.strip() in _PY_WORDS:
        return _PY_WORDS[text.strip()]
    yaml = _need("yaml", "pyyaml")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if isinstance(value, str):
        if expected is list and "," in value and not value.strip().startswith(("[", "{")):
            return [parse_value(part.strip()) for part in value.split(",") if part.strip()]
        try:
            return int(value)
        except ValueError:
            pass
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return value


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping", tuple: "a tuple"}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fail(name: str, message: str) -> ParameterError:
    return ParameterError(f"parameter {name!r}: {message}")


def _check_type(name: str, value: Any, param: Parameter) -> Any:
    """``value`` converted to the type of the default (int -> float only), or ParameterError."""
    want = param.type
    if want is type(None):
        return value
    ok = False
    if want is bool:
        ok = isinstance(value, bool)
    elif want is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif want is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = float(value)
            ok = math.isfinite(value)
    elif want in (list, tuple):
        ok = isinstance(value, (list, tuple))
        if ok:
            value = list(value)
            kinds = {type(x) for x in param.default}
            if len(kinds) == 1:
                (kind,) = kinds
                for item in value:
                    try:
                        _check_type(name, item, Parameter(param.default[0], kind, ""))
                    except ParameterError:
                        raise _fail(name, f"every item must be {_TYPE_WORDS.get(kind, kind.__name__)}, like those "
                                          f"of its default {_show(param.default)}, got {_show(item)}") from None
            value = want(value)
    else:
        ok = isinstance(value, want)
    if not ok:
        raise _fail(name, f"must be {_TYPE_WORDS.get(want, want.__name__)} like its default "
                          f"{_show(param.default)}, got {_show(value)}")
    return value


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(name, f"must be a positive integer, got {_show(value)}")
    return value


def _fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise _fail(name, f"must lie in (0, 1], got {_show(value)}")
    return float(value)


def _as_path_if_file(value: Any) -> Any:
    """A relative path that exists from the current directory, made absolute (the run's cwd is ``book/``)."""
    if isinstance(value, str) and not Path(value).is_absolute() and Path(value).exists():
        return str(Path(value).resolve())
    return value


def _model_types_named(comment: str) -> set[str]:
    from pdcalc.model import SUPPORTED_MODEL_TYPES

    return {t for t in SUPPORTED_MODEL_TYPES if t in comment}


def _official_model(name: str, value: Any, values: dict, params: dict) -> Any:
    """An official preset or a ``config.json``; a model type named in the comment is enforced."""
    from pdcalc.inventory import ARTICLE_PRESETS
    from pdcalc.model import CONFIG_PRESETS, load_config

    if not isinstance(value, str) or not value:
        raise _fail(name, f"must be a model preset or a config.json path, got {_show(value)}")
    if value in ARTICLE_PRESETS:
        raise _fail(name, f"{value!r} is an article's architecture, not an official config; "
                          f"use {', '.join(CONFIG_PRESETS)} or a config.json path")
    value = _as_path_if_file(value)
    try:
        cfg = load_config(value)
    except PdcalcError as exc:
        raise _fail(name, str(exc)) from None
    allowed = _model_types_named(params[name].comment)
    if allowed and cfg.model_type not in allowed:
        raise _fail(name, f"this chapter takes a {' or '.join(sorted(allowed))} model, "
                          f"{value!r} is {cfg.model_type}")
    return value


def _any_model(name: str, value: Any, values: dict, params: dict) -> Any:
    """Any model pdcalc knows: official or article preset, or a ``config.json``."""
    from pdcalc.inventory import get_inventory

    if not isinstance(value, str) or not value:
        raise _fail(name, f"must be a model preset or a config.json path, got {_show(value)}")
    value = _as_path_if_file(value)
    try:
        get_inventory(value)
    except PdcalcError as exc:
        raise _fail(name, str(exc)) from None
    return value


def _lookup(getter: Callable[[str], Any], *, path_ok: bool = False) -> Callable:
    def check(name: str, value: Any, values: dict, params: dict) -> Any:
        if not isinstance(value, str) or not value:
            raise _fail(name, f"must be a name, got {_show(value)}")
        if path_ok:
            value = _as_path_if_file(value)
        try:
            getter(value)
        except PdcalcError as exc:
            raise _fail(name, str(exc)) from None
        return value

    check.__doc__ = f"A name :func:`{getter.__module__}.{getter.__name__}` accepts."
    return check


def _get_card(value):
    from pdcalc.hardware import get_card

    return get_card(value)


def _get_scheme(value):
    from pdcalc.quant import get_scheme

    return get_scheme(value)


def _get_engine(value):
    from pdcalc.kv_cache import ENGINES

    if value not in ENGINES:
        raise UnknownNameError("engine", value, ENGINES)
    return value


def _get_deployment(value):
    from pdcalc.deployment import get_deployment

    return get_deployment(value)


def _get_measurement(value):
    from pdcalc.transfer import measurement

    return measurement(value)


def _expert_models(values: dict) -> list[str]:
    """The models of this run whose routed experts an EP group has to hold."""
    return [values[k] for k in ("model", "article_model") if isinstance(values.get(k), str)]


def _check_ep(name: str, ep: int, values: dict) -> None:
    from pdcalc.inventory import get_inventory
    from pdcalc.parallel import place_experts

    for model in _expert_models(values):
        try:
            place_experts(get_inventory(model).n_routed_experts, ep)
        except PdcalcError as exc:
            raise _fail(name, f"{ep} cards for {model}: {exc}") from None


def _ep_size(name: str, value: Any, values: dict, params: dict) -> int:
    """Cards of an EP (or TP) group: a positive integer that the model's experts can be spread over."""
    value = _positive_int(name, value)
    _check_ep(name, value, values)
    return value


def _ep_sizes(name: str, value: Any, values: dict, params: dict) -> list[int]:
    """A sweep of EP group sizes: a non-empty list of distinct sizes, each valid as in :func:`_ep_size`."""
    value = _positive_ints(name, value, values, params)
    if len(set(value)) != len(value):
        raise _fail(name, f"lists a size twice: {_show(list(value))}")
    for item in value:
        _check_ep(name, item, values)
    return list(value)


def _positive(name: str, value: Any, values: dict, params: dict) -> int:
    """A positive integer."""
    return _positive_int(name, value)


def _fraction_check(name: str, value: Any, values: dict, params: dict) -> float:
    """A fraction in (0, 1]."""
    return _fraction(name, value)


def _block_size(name: str, value: Any, values: dict, params: dict) -> int | None:
    """A positive integer the engine accepts for the model (``None``: the engine's default)."""
    _positive_int(name, value)
    engine, model = values.get("engine"), values.get("model")
    if isinstance(engine, str) and isinstance(model, str):
        from pdcalc.kv_cache import engine_layout

        try:
            engine_layout(engine, model, block_size=value)
        except PdcalcError as exc:
            raise _fail(name, f"{value} with engine {engine!r}: {exc}") from None
    return value


def _positive_number(name: str, value: Any, values: dict, params: dict) -> float:
    """A positive finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
        raise _fail(name, f"must be a positive number, got {_show(value)}")
    return float(value)


def _positive_ints(name: str, value: Any, values: dict, params: dict) -> list[int]:
    """A non-empty list of positive integers."""
    if not isinstance(value, (list, tuple)) or not value:
        raise _fail(name, f"must be a non-empty list of positive integers, got {_show(value)}")
    for item in value:
        _positive_int(name, item)
    return list(value)


def _output_tokens(name: str, value: Any, values: dict, params: dict) -> int:
    """A positive integer, smaller than ``context`` when the chapter has one."""
    n = _positive_int(name, value)
    ctx = values.get("context")
    if isinstance(ctx, int) and not isinstance(ctx, bool) and n >= ctx:
        raise _fail(name, f"must be smaller than context ({ctx}): the prompt is the rest of the context, got {n}")
    return n


OVERHEAD_KEYS = ("p_act", "p_fw", "d_act", "d_fw")


def _overhead(name: str, value: Any, values: dict, params: dict) -> dict | None:
    """A mapping of every key of :data:`OVERHEAD_KEYS` to a non-negative number (GB)."""
    if not isinstance(value, dict) or set(value) != set(OVERHEAD_KEYS):
        raise _fail(name, f"must be None or a mapping with exactly the keys {', '.join(OVERHEAD_KEYS)} "
                          f"(GB each), got {_show(value)}")
    for key, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
            raise _fail(name, f"{key} must be a non-negative number of GB, got {_show(v)}")
    return {k: float(value[k]) for k in OVERHEAD_KEYS}


#: Checks by parameter name, applied in this order (models first: later checks use them). Each
#: takes ``(name, value, values, params)``, where ``values`` are the run's values of every
#: parameter and ``params`` the chapter's declarations, and returns the value to inject.
#: A parameter without an entry gets only the type check. ``None`` is accepted without a check
#: where the chapter's default is ``None`` (the chapter then uses its own value).
VALIDATORS: dict[str, Callable[[str, Any, dict, dict], Any]] = {
    "model": _official_model,
    "v3_model": _official_model,
    "article_model": _any_model,
    "quant": _lookup(_get_scheme),
    "card": _lookup(_get_card, path_ok=True),
    "engine": _lookup(_get_engine),
    "deployment": _lookup(_get_deployment),
    "measurement": _lookup(_get_measurement),
    "p_ep": _ep_size,
    "d_ep": _ep_size,
    "tp_alt": _ep_size,
    "p_sizes": _ep_sizes,
    "d_sizes": _ep_sizes,
    "utilization": _fraction_check,
    "mfu": _fraction_check,
    "mbu": _fraction_check,
    "comm_eff": _fraction_check,
    "bandwidth_gb_s": _positive_number,
    "target_tokens_s": _positive_number,
    "max_num_seqs": _positive,
    "max_model_len": _positive,
    "context": _positive,
    "users": _positive,
    "card_counts": _positive_ints,
    "block_size": _block_size,
    "overhead_gb": _overhead,
    "cards": _positive,
    "output_tokens": _output_tokens,
    "concurrency": _positive,
    "rate_per_s": _positive_number,
    "ttft_ms": _positive_number,
    "tpot_ms": _positive_number,
    "tp_options": _positive_ints,
}

#: Values a chapter's code looks up in a swept list (its text discusses them): chapter -> {parameter: values}.
REQUIRED_ITEMS: dict[str, dict[str, tuple]] = {}


def validate(chapter: str | Path, params: dict[str, Any]) -> dict[str, Any]:
    """Check ``params`` against ``chapter``'s parameters cell and pdcalc; return the values to inject.

    Parameters
    ----------
    chapter : str or Path
        A chapter name or a notebook path.
    params : dict
        New values by parameter name (Python values; see :func:`parse_value` for command-line text).

    Returns
    -------
    dict
        ``params`` with numbers converted to the default's type (``1`` -> ``1.0`` for a float) and
        relative file paths that exist from the current directory made absolute.

    Raises
    ------
    UnknownNameError
        ``chapter`` is not a chapter.
    ParameterError
        An unknown name (the message lists the chapter's parameters), a wrong type, a value out of
        range, or a combination that cannot exist (e.g. an EP group larger than the experts it holds).
        Defaults are checked too, since a new value of one parameter can make another's default impossible.
    """
    path = resolve_chapter(chapter)
    name = _chapter_name(path)
    declared = chapter_parameters(path)
    unknown = [k for k in params if k not in declared]
    if unknown:
        listing = ", ".join(declared) if declared else "none (no cell tagged 'parameters')"
        raise ParameterError(f"unknown parameter {unknown[0]!r} for chapter {name}; its parameters: {listing}")
    values = {k: p.default for k, p in declared.items()}
    for key, value in params.items():
        values[key] = _check_type(key, value, declared[key])
    for key, check in VALIDATORS.items():
        if key in declared and not (values[key] is None and declared[key].default is None):
            try:
                values[key] = check(key, values[key], values, declared)
            except ParameterError as exc:
                if key not in params:
                    raise ParameterError(f"{exc} (its default, with the values given)") from None
                raise
    for key, required in REQUIRED_ITEMS.get(name, {}).items():
        missing = [v for v in required if key in declared and v not in values[key]]
        if missing:
            raise _fail(key, f"must include {' and '.join(map(str, required))} (the chapter's text discusses "
                             f"{'them' if len(required) > 1 else 'it'}), got {_show(values[key])}")
    return {k: values[k] for k in params}


# ---------------------------------------------------------------------------------------------
# execution
# ---------------------------------------------------------------------------------------------
def _outdir_allowed(outdir: Path, notebook: Path) -> None:
    roots = []
    root = book_root()
    if root is not None:
        roots.append((root / "book").resolve())
    if notebook.parent.resolve() not in roots and (outdir / notebook.name).resolve() == notebook.resolve():
        roots.append(notebook.parent.resolve())
    for forbidden in roots:
        if outdir == forbidden or forbidden in outdir.parents:
            raise RerunError(f"output folder {outdir} is inside the book's chapters ({forbidden}); "
                             f"re-runs never write there: choose another, e.g. the default {DEFAULT_OUTDIR}/")


def _resolve_outdir(outdir: str | Path) -> Path:
    """``outdir`` made absolute, or :class:`RerunError` for a path that cannot be one."""
    try:
        return Path(outdir).expanduser().resolve()
    except (OSError, RuntimeError, ValueError, TypeError) as exc:  # symlink loop, NUL byte, no home
        raise RerunError(f"output folder {str(outdir)!r}: not a usable path ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    """An OS error's own words (``Permission denied``), else its message."""
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _prepare_outdir(out: Path, targets: list[Path]) -> None:
    """Create ``out`` if needed and make sure the run can write ``targets`` there, before anything runs.

    Raises
    ------
    RerunError
        ``out`` (or a parent) is a file, cannot be created (read-only or missing file system, no
        permission), cannot be written to, or a target exists and is not a regular file.
    """
    if out.exists() and not out.is_dir():
        kind = "a file" if out.is_file() else "not a folder (a device, socket or pipe)"
        raise RerunError(f"output folder {out} is {kind}: give a folder, existing or to create (-o DIR)")
    if not out.exists():
        parent = next((p for p in out.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise RerunError(f"output folder {out} cannot be created: {parent} is a file, not a folder")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RerunError(f"output folder {out} cannot be created ({_reason(exc)}): "
                             f"choose a folder you can write to (-o DIR)") from None
    for target in targets:
        if target.exists() and not target.is_file():
            raise RerunError(f"output folder {out}: {target.name} exists and is not a file; "
                             f"move it away or choose another folder")
    try:  # permissions, read-only mounts and full disks show only when writing
        with tempfile.NamedTemporaryFile(dir=out, prefix=".pdcalc-write-test-"):
            pass
    except OSError as exc:
        raise RerunError(f"output folder {out} is not writable ({_reason(exc)}): "
                         f"choose a folder you can write to (-o DIR)") from None


def _kernel_manager_class():
    """An AsyncKernelManager whose ``python3`` is this interpreter's ipykernel, its stderr silenced.

    A stray ``python3`` kernelspec elsewhere on JUPYTER_PATH therefore cannot run the chapter with
    another environment's pdcalc; errors reach the notebook through the kernel protocol anyway.
    """
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class CurrentEnvKernelSpecManager(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            if kernel_name == "python3":
                return self.kernel_spec_class(resource_dir=ipykernel.kernelspec.RESOURCES,
                                              **ipykernel.kernelspec.get_kernel_dict())
            return super().get_kernel_spec(kernel_name)

    class CurrentEnvKernelManager(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self):
            return CurrentEnvKernelSpecManager(data_dir=self.data_dir)

        async def start_kernel(self, **kw):
            kw.setdefault("stderr", subprocess.DEVNULL)
            return await super().start_kernel(**kw)

    return CurrentEnvKernelManager


def _describe_cell(nb, index: int, exec_count) -> str:
    cell = nb.cells[index] if 0 <= index < len(nb.cells) else None
    first = ""
    if cell is not None:
        lines = [ln.strip() for ln in cell.source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        first = lines[0] if lines else ""
        if len(first) > 60:
            first = first[:57] + "..."
    where = f"cell In [{exec_count}]" if exec_count is not None else f"cell {index}"
    return f"{where} ({first})" if first else where


def rerun(chapter: str | Path, params: dict[str, Any] | None = None, outdir: str | Path = DEFAULT_OUTDIR,
          html: bool = False, *, timeout_s: int = DEFAULT_TIMEOUT_S) -> RunResult:
    """Execute a copy of ``chapter`` with ``params`` into ``outdir``; optionally write an HTML page.

    Parameters
    ----------
    chapter : str or Path
        A chapter name (``per_card``, ``kv_memory`` ...) or a notebook path.
    params : dict, optional
        New parameter values (Python values). Validated with :func:`validate` before anything runs
        or is written.
    outdir : str or Path
        Output folder, created if needed; never inside ``book/``. The executed copy is
        ``OUTDIR/<chapter>.ipynb`` (and ``OUTDIR/<chapter>.html``), replaced if present.
    html : bool
        Also write a standalone HTML page (see :func:`write_html`).
    timeout_s : int
        Seconds a single cell may run.

    Returns
    -------
    RunResult
        The paths written and the execution's wall time in seconds.

    Raises
    ------
    UnknownNameError, ParameterError, RerunError
        Before anything runs; nothing is written.
    ChapterFailed
        A cell raised; the executed copy, with the error, is written for inspection.

    Notes
    -----
    papermill executes the copy with kernel ``python3`` (this interpreter), in the chapter's own
    directory, and records the parameters in the copy's metadata. The chapter file is only read.
    """
    params = dict(params or {})
    path = resolve_chapter(chapter)
    name = _chapter_name(path)
    values = validate(path, params)
    out = _resolve_outdir(outdir)
    _outdir_allowed(out, path)
    papermill = _need("papermill", "papermill")
    PapermillExecutionError = _need("papermill.exceptions", "papermill").PapermillExecutionError
    if html:
        _need("nbconvert", "nbconvert")
    nb_path = out / f"{name}.ipynb"
    _prepare_outdir(out, [nb_path] + ([out / f"{name}.html"] if html else []))
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(path), str(nb_path), parameters=values, cwd=str(path.parent), kernel_name="python3",
            progress_bar=False, log_output=False, execution_timeout=timeout_s,
            kernel_manager_class=_kernel_manager_class(),
        )
    except PapermillExecutionError as exc:
        # papermill has since added marker cells to the copy; its cell_index counts without them.
        executed = _read_notebook(nb_path)
        executed.cells = [c for c in executed.cells
                          if "papermill-error-cell-tag" not in c.get("metadata", {}).get("tags", [])]
        raise ChapterFailed(name, nb_path, _describe_cell(executed, exc.cell_index, exc.exec_count),
                            exc.ename, exc.evalue) from None
    except Exception as exc:  # kernel died, timeout: not a cell's own exception
        raise ChapterFailed(name, nb_path, "the run", type(exc).__name__, str(exc)) from None
    seconds = time.perf_counter() - t0
    html_path = write_html(nb_path, out / f"{name}.html") if html else None
    return RunResult(notebook_path=nb_path, html_path=html_path, seconds=seconds)


# ---------------------------------------------------------------------------------------------
# standalone HTML
# ---------------------------------------------------------------------------------------------
#: Markers of an Altair chart in an output (as in ``book/_ext/vega_offline.py``).
CHART_MARKERS = ("altair-viz-", "vegaEmbed(")
_CDN_URL = re.compile(r"""(["'])https?://cdn\.jsdelivr\.net/[^"']*\1""")
_ASKED = re.compile(r'maybeLoadScript\("([a-z-]+)", "([^"]+)"\)')


def altair_versions() -> dict[str, str]:
    """The ``VEGA_DEBUG`` keys and versions Altair's HTML loader asks for (from ``altair.vegalite``)."""
    import importlib

    import altair

    display = importlib.import_module(f"altair.vegalite.{altair.SCHEMA_VERSION.split('.')[0]}.display")
    return {"vega_version": str(display.VEGA_VERSION), "vegalite_version": str(display.VEGALITE_VERSION),
            "vegaembed_version": str(display.VEGAEMBED_VERSION)}


def vega_bundle(vegalite_version: str) -> str:
    """vega + vega-lite + vega-embed as one script for ``vegalite_version``, from ``vl_convert``.

    Wrapped in a function so that its top-level names stay private; it publishes ``window.vegaEmbed``,
    ``window.vega`` and ``window.vegaLite`` itself. Safe to inline in a ``<script>`` element.
    """
    try:
        import vl_convert
    except ImportError:
        raise RerunError("--html needs vl-convert-python: pip install 'pdcalc[book]'") from None
    available = list(vl_convert.get_vegalite_versions())
    parts = vegalite_version.lstrip("v").split(".")
    wanted = ".".join(parts[:2])
    if wanted not in available:
        same = [v for v in available if v.split(".")[0] == parts[0]]
        if not same:
            raise RerunError(f"vl-convert-python offers Vega-Lite {available}, none matches the charts' "
                             f"Vega-Lite {vegalite_version}; upgrade vl-convert-python")
        wanted = max(same, key=lambda v: tuple(int(x) for x in v.split(".")))
    body = vl_convert.javascript_bundle(vl_version=wanted)
    body = body.replace("</script", "<\\/script").replace("<!--", "<\\!--")
    return "(function () {\n" + body + "\n}).call(window);\n"


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _glue_values(nb) -> dict[str, Any]:
    """Values recorded with ``myst_nb.glue`` in ``nb``'s outputs, by name (parsed when literal)."""
    out: dict[str, Any] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook", {})
            data = output.get("data", {})
            key = f"{meta.get('mime_prefix', 'application/papermill.record/')}text/plain"
            if "name" in meta and key in data:
                text = _text(data[key])
                try:
                    out[meta["name"]] = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    out[meta["name"]] = text
    return out


_GLUE_ROLE = re.compile(r"\{glue(?::text)?\}`([^`]+)`")
_OTHER_ROLE = re.compile(r"\{([\w:-]+)\}`([^`]+)`")
_FENCE = re.compile(r"^(`{3,})\{([\w-]+)\}[ \t]*(.*?)\n(.*?)^\1[ \t]*$", re.M | re.S)


def _myst_to_markdown(source: str, glued: dict[str, Any]) -> str:
    """MyST of the chapters as plain Markdown + HTML: glue values filled in, admonitions and math kept."""

    def glue(m):
        key, _, fmt = m.group(1).partition(":")
        if key not in glued:
            return f"`{m.group(1)}`"
        value = glued[key]
        try:
            return format(value, fmt) if fmt else str(value)
        except (ValueError, TypeError):
            return str(value)

    def role(m):
        kind, text = m.group(1), m.group(2)
        if kind == "eq":
            return f"({text})"
        return f"`{text}`"

    def fence(m):
        kind, arg, body = m.group(2), m.group(3).strip(), m.group(4)
        options = {}
        lines = body.splitlines()
        while lines and lines[0].startswith(":") and ":" in lines[0][1:]:
            key, _, val = lines.pop(0)[1:].partition(":")
            options[key.strip()] = val.strip()
        body = "\n".join(lines)
        if kind == "math":
            return f"$$\n{body.strip()}\n$$"
        title = arg or kind.capitalize()
        css = _html.escape(options.get("class", kind))
        return (f'<div class="admonition {css}"><p class="admonition-title">{_html.escape(title)}</p>\n\n'
                f"{body}\n\n</div>")

    source = _FENCE.sub(fence, source)
    source = _GLUE_ROLE.sub(glue, source)
    return _OTHER_ROLE.sub(role, source)


def _markdown_html(source: str) -> str:
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        return f'<pre class="markdown">{_html.escape(source)}</pre>'
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    try:
        from mdit_py_plugins.dollarmath import dollarmath_plugin

        md.use(dollarmath_plugin, allow_labels=True, double_inline=True)
    except ImportError:
        pass
    return md.render(source)


def _code_html(source: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return f'<pre class="source">{_html.escape(source)}</pre>'
    return highlight(source, PythonLexer(), HtmlFormatter(cssclass="source highlight", nowrap=False))


def _pygments_css() -> str:
    try:
        from pygments.formatters import HtmlFormatter
    except ImportError:
        return ""
    return HtmlFormatter(style="default").get_style_defs(".highlight")


def _output_html(output) -> str:
    kind = output.get("output_type")
    if kind == "stream":
        return f'<pre class="stream {output.get("name", "")}">{_html.escape(_text(output.get("text", "")))}</pre>'
    if kind == "error":
        trace = _ANSI.sub("", "\n".join(output.get("traceback", [])))
        return (f'<pre class="error">{_html.escape(output.get("ename", ""))}: '
                f'{_html.escape(output.get("evalue", ""))}\n\n{_html.escape(trace)}</pre>')
    data = output.get("data", {})
    if "text/html" in data:
        body = _text(data["text/html"])
        if any(marker in body for marker in CHART_MARKERS):
            body = _CDN_URL.sub(r'\1(bundled in this page)\1', body)
        return f'<div class="output html">{body}</div>'
    if "image/svg+xml" in data:
        return f'<div class="output svg">{_text(data["image/svg+xml"])}</div>'
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            b64 = "".join(_text(data[mime]).split())
            base64.b64decode(b64, validate=True)
            return f'<div class="output image"><img src="data:{mime};base64,{b64}" alt="output"></div>'
    if "text/markdown" in data:
        return f'<div class="output markdown">{_markdown_html(_text(data["text/markdown"]))}</div>'
    if "text/plain" in data:
        return f'<pre class="output text">{_html.escape(_text(data["text/plain"]))}</pre>'
    return ""


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; line-height: 1.5; color: #222; }
.run { background: #f3f6fa; border: 1px solid #cfd8e3; padding: .6em 1em; border-radius: 4px; }
.run code { background: none; }
.cell { margin: 1em 0; }
.injected { border-left: 4px solid #d08000; padding-left: .6em; }
.injected-label { font-size: .85em; color: #a06000; }
pre { background: #f7f7f7; padding: .5em .8em; overflow-x: auto; font-size: .85em; margin: .3em 0; }
.highlight { background: #f7f7f7; }
pre.error { background: #fdecec; color: #700; }
.output { overflow-x: auto; margin: .3em 0; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; vertical-align: top; }
th { background: #f2f2f2; }
code { background: #f2f2f2; padding: 0 .2em; }
.math { font-family: monospace; white-space: pre-wrap; color: #333; }
div.math { background: #fafafa; padding: .5em; margin: .5em 0; }
.admonition { border-left: 4px solid #3a7; background: #f2fbf6; padding: .2em 1em; margin: 1em 0; }
.admonition-title { font-weight: bold; margin: .4em 0; }
"""


def write_html(notebook: str | Path, html_path: str | Path) -> Path:
    """Write a standalone HTML page of an executed chapter, with charts that draw offline.

    Markdown cells are rendered (glued values filled in; math left as TeX), code cells shown with
    their outputs. When the page holds Altair charts, the vega + vega-lite + vega-embed bundle of
    :func:`vega_bundle` is inlined and ``window.VEGA_DEBUG`` preset with the versions the charts ask
    for, so that Altair's loader uses the bundle and requests nothing (as ``book/_ext/vega_offline.py``
    does for the book); the charts' CDN addresses are removed. The page loads no external script.

    Parameters
    ----------
    notebook : str or Path
        An executed notebook.
    html_path : str or Path
        Where to write the page.

    Returns
    -------
    Path
        ``html_path``.
    """
    notebook, html_path = Path(notebook), Path(html_path)
    nb = _read_notebook(notebook)
    glued = _glue_values(nb)
    pm = nb.metadata.get("papermill", {})
    parts: list[str] = []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown":
            parts.append(f'<div class="cell markdown">{_markdown_html(_myst_to_markdown(cell.source, glued))}</div>')
        elif cell.cell_type == "code":
            injected = "injected-parameters" in tags
            label = ('<div class="injected-label">parameters of this run (injected by pdcalc rerun)</div>'
                     if injected else "")
            outputs = "".join(_output_html(o) for o in cell.get("outputs", []))
            parts.append(f'<div class="cell code{" injected" if injected else ""}">{label}'
                         f'{_code_html(cell.source)}{outputs}</div>')
        elif cell.cell_type == "raw":
            parts.append(f'<pre class="raw">{_html.escape(cell.source)}</pre>')
    body = "\n".join(parts)

    head_scripts = ""
    if any(marker in body for marker in CHART_MARKERS):
        asked = {f"{lib.replace('-', '')}_version": v for lib, v in _ASKED.findall(body)} or altair_versions()
        preset = f"window.VEGA_DEBUG = Object.assign(window.VEGA_DEBUG || {{}}, {json.dumps(asked, sort_keys=True)});"
        bundle = vega_bundle(asked.get("vegalite_version") or altair_versions()["vegalite_version"])
        head_scripts = f"<script>{preset}</script>\n<script>{bundle}</script>"

    title = _chapter_title(nb) or notebook.stem
    params = pm.get("parameters") or {}
    run_line = ", ".join(f"<code>{_html.escape(k)} = {_html.escape(repr(v))}</code>" for k, v in params.items())
    summary = (f'<p class="run">Re-run of <code>{_html.escape(Path(str(pm.get("input_path", notebook))).name)}</code>'
               f' with {run_line or "its default parameters"}.</p>')
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_html.escape(title)}</title>\n<style>{_CSS}\n{_pygments_css()}</style>\n{head_scripts}\n"
        f"</head>\n<body>\n{summary}\n{body}\n</body>\n</html>\n"
    )
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(page, encoding="utf-8")
    return html_path


def _chapter_title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""
