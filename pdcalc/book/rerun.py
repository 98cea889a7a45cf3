"""Re-run a chapter of the book with other parameter values (``pdcalc rerun``).

Every notebook chapter starts with a cell tagged ``parameters``: plain assignments of literals,
each with a comment saying what it is. :func:`rerun` executes a *copy* of a chapter with papermill,
the new values injected after that cell, in the chapter's own directory (``book/``, as Jupyter
Book and nbval run it), and writes the executed copy to an output folder outside ``book/``. With
``html=True`` it also writes a standalone HTML page of the result, whose Altair charts and math draw
offline (:func:`pdcalc.page.write_html`, nbconvert's ``HTMLExporter``). The committed chapters are only read.

Everything is checked before anything runs: the output folder (:func:`rerun`) and the parameters
(:func:`validate`). The name must be one of the chapter's, the value must have the type of the
default (a ``None`` default accepts ``None`` or what its validator allows), and every parameter is
checked against pdcalc itself (:data:`VALIDATORS`, with the rules of :mod:`pdcalc.checks` that the
command line's flags follow): presets must exist, numbers be finite, fractions lie in (0, 1], an EP
group must be able to hold the model's routed experts, and so on; then combinations
(:data:`CROSS_CHECKS`): a card must have the peak FLOP/s a chapter's throughput needs for its
scheme, a rate and a concurrency exclude each other... papermill alone accepts any name and any
value. Errors are one line (:class:`ParameterError`, :class:`RerunError`: exit status 2 on the
command line; :class:`ChapterFailed`, a cell that raised: exit status 1).

Examples
--------
>>> from pdcalc.rerun import rerun  # doctest: +SKIP
>>> result = rerun("per_card", {"card": "ascend-910b4-32g", "d_ep": 16}, html=True)  # doctest: +SKIP
>>> result.notebook_path, result.html_path  # doctest: +SKIP
(PosixPath('pdcalc-runs/per_card.ipynb'), PosixPath('pdcalc-runs/per_card.html'))
"""

from __future__ import annotations

import ast
import inspect
import io
import numbers
import re
import subprocess
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

from pdcalc.book.page import error_reason, need, read_notebook, write_html
from pdcalc.core import checks
from pdcalc.core.checks import (
    BANDWIDTH_GB_S,
    LATENCY_MS,
    MAX_CARDS,
    MAX_SEQUENCES,
    MAX_TOKENS,
    RATE_PER_S,
    TOKENS_PER_S,
)
from pdcalc.core.errors import OneLineError, PdcalcError, RerunError, UnknownNameError

#: The repository holding the book (``_toc.yml`` at its root, the chapters under ``book/``).
REPO = Path(__file__).resolve().parents[2]
#: Where runs go unless told otherwise (relative to the current directory).
DEFAULT_OUTDIR = Path("pdcalc-runs")
#: Seconds one cell may run before the run is abandoned.
DEFAULT_TIMEOUT_S = 600
_ANSI = re.compile("\x1b\\[[0-9;?]*[A-Za-z]")


class ParameterError(OneLineError, ValueError):
    """A parameter value a chapter cannot take (unknown name, wrong type, out of range, impossible)."""


class ChapterFailed(OneLineError, RuntimeError):
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


def _chapter_name(path: Path) -> str:
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
    what = f"parameter {name!r}" if name else f"value {_show(text)}"
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


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
# Cards, tokens, sequences, rates, latencies and bandwidths are bounded as the command line bounds its
# flags (pdcalc.checks); a few bounds are the chapters' own:
MAX_BLOCK_TOKENS = 1 << 20       # a scheduler block
MAX_NAME = 4096                  # a preset name or a file path (PATH_MAX)

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping", tuple: "a tuple"}


def _show(value: Any) -> str:
    """A short one-line rendering of ``value`` (huge integers summarised): :func:`pdcalc.checks.show`."""
    return checks.show(value)


def _label(name: str) -> str:
    return f"parameter {name!r}"


def _fail(name: str, message: str) -> ParameterError:
    return ParameterError(f"{_label(name)}: {message}")


def _checked(check: Callable, label: str, value: Any, **bounds) -> Any:
    """``check(label, value, **bounds)`` of :mod:`pdcalc.checks`, its InputError as a ParameterError."""
    try:
        return check(label, value, **bounds)
    except checks.InputError as exc:
        raise ParameterError(str(exc)) from None


def _check_type(name: str, value: Any, param: Parameter) -> Any:
    """``value`` converted to the type of the default (int -> float only), or ParameterError.

    Floats must be finite (``inf``, ``nan`` refused: here, or by the parameter's validator, which says
    the range); list items must have the type of the default's items.
    """
    want = param.type
    if want is type(None):
        return value
    ok = False
    if want is bool:
        ok = isinstance(value, bool)
    elif want is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif want is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok and name not in VALIDATORS:  # else its validator says what range a finite number must lie in
            value = _checked(checks.number, _label(name), value)
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


def _as_path_if_file(value: Any) -> Any:
    """A relative path that exists from the current directory, made absolute (the run's cwd is ``book/``)."""
    if isinstance(value, str) and not Path(value).is_absolute() and Path(value).exists():
        return str(Path(value).resolve())
    return value


def _name_or_path(name: str, value: Any, what: str) -> str:
    """A non-empty string short enough to be a preset name or a file path."""
    if not isinstance(value, str) or not value.strip():
        raise _fail(name, f"must be {what}, got {_show(value)}")
    if len(value) > MAX_NAME:
        raise _fail(name, f"must be {what}, got a string of {len(value):,} characters")
    if "\x00" in value:
        raise _fail(name, f"must be {what}, got a string holding a NUL character")
    return value


def _model_types_named(comment: str) -> set[str]:
    from pdcalc.model.config import SUPPORTED_MODEL_TYPES

    return {t for t in SUPPORTED_MODEL_TYPES if re.search(rf"\b{t}\b", comment)}


def _official_model(name: str, value: Any, values: dict, params: dict) -> Any:
    """An official preset or a ``config.json``; a model type named in the comment is enforced."""
    from pdcalc.model.config import ARTICLE_PRESETS, CONFIG_PRESETS, load_config

    _name_or_path(name, value, "a model preset or a config.json path")
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
    from pdcalc.model.inventory import get_inventory

    _name_or_path(name, value, "a model preset or a config.json path")
    value = _as_path_if_file(value)
    try:
        get_inventory(value)
    except PdcalcError as exc:
        raise _fail(name, str(exc)) from None
    return value


def _lookup(getter: Callable[[str], Any], *, path_ok: bool = False) -> Callable:
    def check(name: str, value: Any, values: dict, params: dict) -> Any:
        _name_or_path(name, value, "a name" + (" or a file path" if path_ok else ""))
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
    from pdcalc.hardware.cards import get_card

    return get_card(value)


def _get_scheme(value):
    from pdcalc.model.quant import get_scheme

    return get_scheme(value)


def _get_engine(value):
    from pdcalc.model.kv_layout import ENGINES

    if value not in ENGINES:
        raise UnknownNameError("engine", value, ENGINES)
    return value


def _get_deployment(value):
    from pdcalc.layout.deployment import get_deployment

    return get_deployment(value)


def _get_measurement(value):
    from pdcalc.perf.transfer import measurement

    return measurement(value)


def _integer(low: int = 1, high: int | None = None) -> Callable:
    def check(name: str, value: Any, values: dict, params: dict) -> int:
        return _checked(checks.integer, _label(name), value, low=low, high=high)

    check.__doc__ = f"An integer in {low}..{high} (:func:`pdcalc.checks.integer`)."
    return check


def _number(bounds: tuple[float, float], *, unit: str = "") -> Callable:
    low, high = bounds

    def check(name: str, value: Any, values: dict, params: dict) -> float:
        return _checked(checks.number, _label(name), value, low=low, high=high, unit=unit)

    check.__doc__ = f"A finite number in {low:g}..{high:g} (:func:`pdcalc.checks.number`)."
    return check


def _fraction(name: str, value: Any, values: dict, params: dict) -> float:
    """A share in (0, 1] (:func:`pdcalc.checks.fraction`)."""
    return _checked(checks.fraction, _label(name), value)


def _boolean(name: str, value: Any, values: dict, params: dict) -> bool:
    """``True`` or ``False`` (:func:`pdcalc.checks.boolean`)."""
    return _checked(checks.boolean, _label(name), value)


def _cost_model(name: str, value: Any, values: dict, params: dict) -> str:
    """A step-time model of :data:`pdcalc.throughput.COSTS`."""
    from pdcalc.perf.step import COSTS

    if value not in COSTS:
        raise _fail(name, f"must be one of {', '.join(repr(c) for c in COSTS)}, got {_show(value)}")
    return value


def _integer_list(name: str, value: Any, *, low: int, high: int) -> list[int]:
    if not isinstance(value, (list, tuple)) or not value:
        raise _fail(name, f"must be a non-empty list of integers in {low}..{high:,}, got {_show(value)}")
    return [_checked(checks.integer, f"{_label(name)}, item {i}", v, low=low, high=high)
            for i, v in enumerate(value, 1)]


def _integers(low: int = 1, high: int = MAX_CARDS) -> Callable:
    def check(name: str, value: Any, values: dict, params: dict) -> list[int]:
        return _integer_list(name, value, low=low, high=high)

    check.__doc__ = f"A non-empty list of integers in {low}..{high}."
    return check


def _expert_models(values: dict) -> list[str]:
    """The models of this run whose routed experts an EP group has to hold."""
    return [values[k] for k in ("model", "article_model") if isinstance(values.get(k), str)]


def _check_ep(name: str, ep: int, values: dict) -> None:
    from pdcalc.layout.parallel import place_experts
    from pdcalc.model.inventory import get_inventory

    for model in _expert_models(values):
        try:
            place_experts(get_inventory(model).n_routed_experts, ep)
        except PdcalcError as exc:
            raise _fail(name, f"{ep} cards for {model}: {exc}") from None


def _tp_problem(model: str, tp: int) -> str | None:
    """Why ``model``'s attention cannot be split over ``tp`` cards (:func:`pdcalc.checks.tp_problem`)."""
    from pdcalc.model.config import load_config

    cfg = load_config(model)
    return checks.tp_problem(tp, heads=cfg.num_attention_heads, o_groups=getattr(cfg, "o_groups", None),
                             index_heads=getattr(cfg, "index_n_heads", None))


def _check_tp(name: str, tp: int, values: dict) -> None:
    model = values.get("model")
    if isinstance(model, str):
        problem = _tp_problem(model, tp)
        if problem:
            raise _fail(name, f"TP {tp} for {model}: {problem}")


def _ep_size(name: str, value: Any, values: dict, params: dict) -> int:
    """Cards of an EP group: an integer in 1..MAX_CARDS that the model's experts can be spread over."""
    value = _checked(checks.integer, _label(name), value, low=1, high=MAX_CARDS)
    _check_ep(name, value, values)
    return value


def _ep_sizes(name: str, value: Any, values: dict, params: dict) -> list[int]:
    """A sweep of EP group sizes: a non-empty list of distinct sizes, each valid as in :func:`_ep_size`."""
    value = _integer_list(name, value, low=1, high=MAX_CARDS)
    if len(set(value)) != len(value):
        raise _fail(name, f"lists a size twice: {_show(list(value))}")
    for item in value:
        _check_ep(name, item, values)
    return value


def _tp_degree(name: str, value: Any, values: dict, params: dict) -> int:
    """A TP degree that also serves as the EP group (``tp_alt``): it must split the model's attention."""
    value = _checked(checks.integer, _label(name), value, low=1, high=MAX_CARDS)
    _check_tp(name, value, values)
    _check_ep(name, value, values)
    return value


def _tp_degrees(name: str, value: Any, values: dict, params: dict) -> list[int]:
    """TP degrees to try: each must split the model's attention (heads, output groups, indexer heads)."""
    value = _integer_list(name, value, low=1, high=MAX_CARDS)
    for item in value:
        _check_tp(name, item, values)
    return value


def _block_size(name: str, value: Any, values: dict, params: dict) -> int | None:
    """A positive integer the engine accepts for the model (``None``: the engine's default)."""
    value = _checked(checks.integer, _label(name), value, low=1, high=MAX_BLOCK_TOKENS)
    engine, model = values.get("engine"), values.get("model")
    if isinstance(engine, str) and isinstance(model, str):
        from pdcalc.model.kv_layout import engine_layout

        try:
            engine_layout(engine, model, block_size=value)
        except PdcalcError as exc:
            raise _fail(name, f"{value} with engine {engine!r}: {exc}") from None
    return value


OVERHEAD_KEYS = ("p_act", "p_fw", "d_act", "d_fw")


def _overhead(name: str, value: Any, values: dict, params: dict) -> dict | None:
    """A mapping of every key of :data:`OVERHEAD_KEYS` to a non-negative number (GB)."""
    if not isinstance(value, dict) or set(value) != set(OVERHEAD_KEYS):
        raise _fail(name, f"must be None or a mapping with exactly the keys {', '.join(OVERHEAD_KEYS)} "
                          f"(GB each), got {_show(value)}")
    return {k: _checked(checks.number, f"{_label(name)}, key {k!r}", value[k], low=0.0, unit="GB")
            for k in OVERHEAD_KEYS}


#: Checks by parameter name, applied in this order (models first: later checks use them). Each
#: takes ``(name, value, values, params)``, where ``values`` are the run's values of every
#: parameter and ``params`` the chapter's declarations, and returns the value to inject.
#: A parameter without an entry gets only the type check. ``None`` is accepted without a check
#: where the chapter's default is ``None`` (the chapter then uses its own value). Numbers follow
#: :mod:`pdcalc.checks`, as the command line's flags do: finite, fractions in (0, 1], integers in bounds.
VALIDATORS: dict[str, Callable[[str, Any, dict, dict], Any]] = {
    "model": _official_model,
    "v3_model": _official_model,
    "article_model": _any_model,
    "quant": _lookup(_get_scheme),
    "other_quant": _lookup(_get_scheme),
    "scheme": _lookup(_get_scheme),
    "card": _lookup(_get_card, path_ok=True),
    "other_card": _lookup(_get_card, path_ok=True),
    "engine": _lookup(_get_engine),
    "deployment": _lookup(_get_deployment),
    "measurement": _lookup(_get_measurement),
    "mtp": _boolean,
    "overlap": _boolean,
    "beyond": _boolean,
    "measured_weights": _boolean,
    "p_ep": _ep_size,
    "d_ep": _ep_size,
    "tp_alt": _tp_degree,
    "p_sizes": _ep_sizes,
    "d_sizes": _ep_sizes,
    "tp_options": _tp_degrees,
    "cards": _integer(2, MAX_CARDS),
    "card_counts": _integers(1, MAX_CARDS),
    "utilization": _fraction,
    "mfu": _fraction,
    "mbu": _fraction,
    "comm_eff": _fraction,
    "costs": _cost_model,
    "bandwidth_gb_s": _number(BANDWIDTH_GB_S, unit="GB/s"),
    "target_tokens_s": _number(TOKENS_PER_S, unit="tokens/s"),
    "rate_per_s": _number(RATE_PER_S, unit="requests/s"),
    "ttft_ms": _number(LATENCY_MS, unit="ms"),
    "tpot_ms": _number(LATENCY_MS, unit="ms"),
    "context": _integer(1, MAX_TOKENS),
    "max_model_len": _integer(1, MAX_TOKENS),
    "output_tokens": _integer(1, MAX_TOKENS),
    "max_num_seqs": _integer(1, MAX_SEQUENCES),
    "users": _integer(1, MAX_SEQUENCES),
    "concurrency": _integer(1, MAX_SEQUENCES),
    "block_size": _block_size,
    "overhead_gb": _overhead,
}


# ---- combinations --------------------------------------------------------------------------
def _throughput_flops(quant: str) -> dict[str, list[str]]:
    """Peak FLOP/s dtypes :func:`pdcalc.throughput.step` reads from a card for ``quant``: dtype -> uses."""
    from pdcalc.perf.step import COMPUTE_DTYPE, step

    scheme = _get_scheme(quant).name
    attention = inspect.signature(step).parameters["attn_dtype"].default
    needs: dict[str, list[str]] = {}
    needs.setdefault(COMPUTE_DTYPE.get(scheme, f"(none known for {scheme})"), []).append(
        f"the linear layers of {scheme}")
    needs.setdefault(attention, []).append("attention")
    return needs


def _prefill_flops(quant: str | None) -> dict[str, list[str]]:
    """Peak FLOP/s dtypes :func:`pdcalc.flops.prefill_compute_seconds` reads with its default dtypes."""
    from pdcalc.perf.flops import prefill_compute_seconds

    sig = inspect.signature(prefill_compute_seconds).parameters
    needs: dict[str, list[str]] = {}
    needs.setdefault(sig["matmul_dtype"].default, []).append("the weight matmuls")
    needs.setdefault(sig["attn_dtype"].default, []).append("attention")
    return needs


def _fp16_flops(quant: str | None) -> dict[str, list[str]]:
    return {"fp16": ["the card's FP16 peak beside the article's"]}


class ComputeNeed(NamedTuple):
    """A chapter's computation that reads a card's peak FLOP/s (see :data:`COMPUTE_NEEDS`)."""

    card: str                                   # the card parameter
    quant: str | None                           # the quantization parameter that sets the dtype, if any
    dtypes: Callable[[Any], dict[str, list[str]]]  # quant -> {dtype: what needs it}
    what: str                                   # the computation, for messages


#: Chapters that compute throughput or prefill time, by chapter name: the card must define the peak
#: FLOP/s these computations read (``Card.flops(dtype)`` raises otherwise, after the chapter started).
COMPUTE_NEEDS: dict[str, tuple[ComputeNeed, ...]] = {
    "plan": (ComputeNeed("card", "quant", _throughput_flops, "prefill and decode steps (pdcalc.throughput.step)"),),
    "v3_throughput": (
        ComputeNeed("card", "quant", _throughput_flops, "prefill and decode steps (pdcalc.throughput.step)"),
        ComputeNeed("other_card", "other_quant", _throughput_flops,
                    "the second card's steps (pdcalc.throughput.step)")),
    "transfer": (ComputeNeed("card", None, _prefill_flops,
                             "the prefill compute time (pdcalc.flops.prefill_compute_seconds)"),),
    "v3_article": (ComputeNeed("card", None, _fp16_flops, "its targets table"),),
}


def _compute_problem(need: ComputeNeed, values: dict, chapter: str) -> str | None:
    from pdcalc.hardware.cards import card_names, get_card
    from pdcalc.model.quant import SCHEMES

    card, quant = values[need.card], values[need.quant] if need.quant else None
    have = get_card(card).flops_per_s
    needs = need.dtypes(quant)
    missing = [d for d in needs if d not in have]
    if not missing:
        return None
    wanted = " and ".join(f"{d} ({' and '.join(needs[d])})" for d in missing)
    text = (f"card {card!r} defines peak FLOP/s for {', '.join(sorted(have))} only; chapter {chapter} computes "
            f"{need.what}" + (f" with {need.quant} {quant!r}" if need.quant else "") + f", which needs {wanted}")
    able = [c for c in card_names() if all(d in get_card(c).flops_per_s for d in needs)]
    text += f"; cards that can: {', '.join(able)}" if able else "; no card preset can"
    if need.quant:
        fits = [s for s in SCHEMES if all(d in have for d in need.dtypes(s))]
        text += f"; schemes this card can run: {', '.join(fits) if fits else 'none'}"
    return text


def _chosen_in_sweep(chosen: str, sweep: str) -> Callable[[dict, str], str | None]:
    def check(values: dict, chapter: str) -> str | None:
        if values[chosen] not in values[sweep]:
            return (f"{chosen} = {values[chosen]} must be one of {sweep} {_show(values[sweep])}: the chapter "
                    f"compares the chosen size with its neighbours in that sweep")
        return None

    return check


def _rate_or_concurrency(values: dict, chapter: str) -> str | None:
    if values["rate_per_s"] is not None and values["concurrency"] is not None:
        return ("give rate_per_s or concurrency, not both (with neither, the chapter uses its own concurrency)")
    return None


def _article_context() -> int:
    """The V4 article's scenario B context, which the plan chapter uses when ``context`` is None."""
    from pdcalc.audit.registry import printed_value

    return int(printed_value("v4-6.3-b-ctx"))


#: What a ``None`` parameter stands for in a chapter, where other checks need the number.
NONE_MEANS: dict[tuple[str, str], Callable[[], Any]] = {("plan", "context"): _article_context}


def _output_below_context(values: dict, chapter: str) -> str | None:
    n, ctx = values["output_tokens"], values["context"]
    default = ""
    if ctx is None and (chapter, "context") in NONE_MEANS:
        ctx, default = NONE_MEANS[(chapter, "context")](), ", the chapter's default"
    if ctx is not None and n >= ctx:
        return (f"output_tokens ({n:,}) must be smaller than context ({ctx:,}{default}): the prompt is the rest "
                f"of the context")
    if chapter == "plan" and n >= _article_context():
        return (f"output_tokens ({n:,}) must be smaller than {_article_context():,}: the chapter also replays the "
                f"V4 article's scenario B (that context) with the same output length")
    return None


#: The fixed layouts of the V3 throughput chapter: its TP degrees and its EP group.
V3_THROUGHPUT_TP, V3_THROUGHPUT_EP = (4, 8, 16), 32


def _v3_layouts(values: dict, chapter: str) -> str | None:
    from pdcalc.model.config import load_config

    model = values["model"]
    for tp in V3_THROUGHPUT_TP:
        problem = _tp_problem(model, tp)
        if problem:
            return f"the chapter's layouts use TP {', '.join(map(str, V3_THROUGHPUT_TP))}: {model}: {problem}"
    experts = load_config(model).n_routed_experts
    if experts < V3_THROUGHPUT_EP:
        return f"the chapter's layouts use EP {V3_THROUGHPUT_EP}: {model} has only {experts} routed experts"
    return None


class CrossCheck(NamedTuple):
    """A rule over several parameters (see :data:`CROSS_CHECKS`)."""

    names: tuple[str, ...]                 # the parameters; the error names the one the user gave first
    chapters: tuple[str, ...] | None       # None: every chapter declaring all of ``names``
    problem: Callable[[dict, str], str | None]   # (values, chapter name) -> what is wrong, or None


#: Rules over combinations of parameters, applied after every parameter passed its own check.
CROSS_CHECKS: tuple[CrossCheck, ...] = (
    CrossCheck(("p_ep", "p_sizes"), None, _chosen_in_sweep("p_ep", "p_sizes")),
    CrossCheck(("d_ep", "d_sizes"), None, _chosen_in_sweep("d_ep", "d_sizes")),
    CrossCheck(("rate_per_s", "concurrency"), None, _rate_or_concurrency),
    CrossCheck(("output_tokens", "context"), None, _output_below_context),
    CrossCheck(("model",), ("v3_throughput",), _v3_layouts),
    *(CrossCheck((need.card,) + ((need.quant,) if need.quant else ()), (chapter,),
                 lambda values, ch, need=need: _compute_problem(need, values, ch))
      for chapter, needs in COMPUTE_NEEDS.items() for need in needs),
)


def _run_check(check: Callable, key: str, values: dict, declared: dict) -> Any:
    """``check``'s value; whatever it raises becomes one ParameterError naming ``key``."""
    try:
        return check(key, values[key], values, declared)
    except ParameterError:
        raise
    except PdcalcError as exc:
        raise _fail(key, str(exc)) from None
    except (OSError, ValueError, TypeError, ArithmeticError, RecursionError, LookupError) as exc:
        raise _fail(key, f"{_show(values[key])} cannot be used ({type(exc).__name__}: {exc})") from None


def validate(chapter: str | Path, params: dict[str, Any]) -> dict[str, Any]:
    """Check ``params`` against ``chapter``'s parameters cell and pdcalc; return the values to inject.

    Nothing runs and nothing is written: every value is judged here, so that a chapter never starts
    with a value it cannot take.

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
        range, or a combination that cannot exist (e.g. an EP group larger than the experts it holds,
        a card without the FLOP/s the chapter's throughput needs, a rate and a concurrency together:
        :data:`VALIDATORS`, :data:`CROSS_CHECKS`). Defaults are checked too, since a new value of one
        parameter can make another's default impossible. The message is one line and names the parameter.
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
                values[key] = _run_check(check, key, values, declared)
            except ParameterError as exc:
                if key not in params:
                    raise ParameterError(f"{exc} (its default, with the values given)") from None
                raise
    for rule in CROSS_CHECKS:
        if all(k in declared for k in rule.names) and (rule.chapters is None or name in rule.chapters):
            given = [k for k in params if k in rule.names]
            named = (given or list(rule.names))[0]
            try:
                problem = rule.problem(values, name)
            except PdcalcError as exc:
                problem = str(exc)
            if problem:
                raise _fail(named, problem + ("" if given else " (the chapter's defaults)"))
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
        raise RerunError(f"output folder {str(outdir)!r}: not a usable path ({error_reason(exc)})") from None


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
            raise RerunError(f"output folder {out} cannot be created ({error_reason(exc)}): "
                             f"choose a folder you can write to (-o DIR)") from None
    for target in targets:
        if target.exists() and not target.is_file():
            raise RerunError(f"output folder {out}: {target.name} exists and is not a file; "
                             f"move it away or choose another folder")
    try:  # permissions, read-only mounts and full disks show only when writing
        with tempfile.NamedTemporaryFile(dir=out, prefix=".pdcalc-write-test-"):
            pass
    except OSError as exc:
        raise RerunError(f"output folder {out} is not writable ({error_reason(exc)}): "
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
        Also write a standalone HTML page (see :func:`pdcalc.page.write_html`).
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
    papermill = need("papermill", "papermill")
    PapermillExecutionError = need("papermill.exceptions", "papermill").PapermillExecutionError
    if html:
        need("nbconvert", "nbconvert")
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
        executed = read_notebook(nb_path)
        executed.cells = [c for c in executed.cells
                          if "papermill-error-cell-tag" not in c.get("metadata", {}).get("tags", [])]
        raise ChapterFailed(name, nb_path, _describe_cell(executed, exc.cell_index, exc.exec_count),
                            exc.ename, exc.evalue) from None
    except Exception as exc:  # kernel died, timeout: not a cell's own exception
        raise ChapterFailed(name, nb_path, "the run", type(exc).__name__, str(exc)) from None
    seconds = time.perf_counter() - t0
    html_path = write_html(nb_path, out / f"{name}.html") if html else None
    return RunResult(notebook_path=nb_path, html_path=html_path, seconds=seconds)
