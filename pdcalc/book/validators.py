"""Every parameter of a chapter checked before anything runs: by name, by the type of its default, against
pdcalc itself (:data:`VALIDATORS`, with the rules of :mod:`pdcalc.core.checks` the command line's flags follow),
then in combination (:data:`CROSS_CHECKS`): a card must have the peak FLOP/s a chapter's throughput needs for its
scheme, a rate and a concurrency exclude each other, and so on. Errors are one line (:class:`ParameterError`).
"""

from __future__ import annotations

import inspect
import numbers
import re
from pathlib import Path
from typing import Any, Callable, NamedTuple

from pdcalc.book.parameters import Parameter, ParameterError, chapter_name, chapter_parameters, resolve_chapter
from pdcalc.core import checks
from pdcalc.core.checks import (BANDWIDTH_GB_S, LATENCY_MS, MAX_CARDS, MAX_SEQUENCES, MAX_TOKENS, RATE_PER_S,
                                TOKENS_PER_S)
from pdcalc.core.errors import PdcalcError, UnknownNameError

# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
# Cards, tokens, sequences, rates, latencies and bandwidths are bounded as the command line bounds its
# flags (pdcalc.core.checks); a few bounds are the chapters' own:
MAX_BLOCK_TOKENS = 1 << 20       # a scheduler block
MAX_NAME = 4096                  # a preset name or a file path (PATH_MAX)

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping", tuple: "a tuple"}


def _show(value: Any) -> str:
    """A short one-line rendering of ``value`` (huge integers summarised): :func:`pdcalc.core.checks.show`."""
    return checks.show(value)


def _label(name: str) -> str:
    return f"parameter {name!r}"


def _fail(name: str, message: str) -> ParameterError:
    return ParameterError(f"{_label(name)}: {message}")


def _checked(check: Callable, label: str, value: Any, **bounds) -> Any:
    """``check(label, value, **bounds)`` of :mod:`pdcalc.core.checks`, its InputError as a ParameterError."""
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

    check.__doc__ = f"An integer in {low}..{high} (:func:`pdcalc.core.checks.integer`)."
    return check


def _number(bounds: tuple[float, float], *, unit: str = "") -> Callable:
    low, high = bounds

    def check(name: str, value: Any, values: dict, params: dict) -> float:
        return _checked(checks.number, _label(name), value, low=low, high=high, unit=unit)

    check.__doc__ = f"A finite number in {low:g}..{high:g} (:func:`pdcalc.core.checks.number`)."
    return check


def _fraction(name: str, value: Any, values: dict, params: dict) -> float:
    """A share in (0, 1] (:func:`pdcalc.core.checks.fraction`)."""
    return _checked(checks.fraction, _label(name), value)


def _boolean(name: str, value: Any, values: dict, params: dict) -> bool:
    """``True`` or ``False`` (:func:`pdcalc.core.checks.boolean`)."""
    return _checked(checks.boolean, _label(name), value)


def _cost_model(name: str, value: Any, values: dict, params: dict) -> str:
    """The planner's step model (:data:`pdcalc.plan.workload.PLAN_COSTS`): served, published or roofline."""
    from pdcalc.plan.workload import PLAN_COSTS

    if value not in PLAN_COSTS:
        raise _fail(name, f"must be one of {', '.join(repr(c) for c in PLAN_COSTS)}, got {_show(value)}")
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
    """Why ``model``'s attention cannot be split over ``tp`` cards (:func:`pdcalc.core.checks.tp_problem`)."""
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
#: :mod:`pdcalc.core.checks`, as the command line's flags do: finite, fractions in (0, 1], integers in bounds.
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
    """Peak FLOP/s dtypes :func:`pdcalc.perf.step.step` reads from a card for ``quant``: dtype -> uses."""
    from pdcalc.perf.inputs import COMPUTE_DTYPE
    from pdcalc.perf.step import step

    scheme = _get_scheme(quant).name
    attention = inspect.signature(step).parameters["attn_dtype"].default
    needs: dict[str, list[str]] = {}
    needs.setdefault(COMPUTE_DTYPE.get(scheme, f"(none known for {scheme})"), []).append(
        f"the linear layers of {scheme}")
    needs.setdefault(attention, []).append("attention")
    return needs


def _prefill_flops(quant: str | None) -> dict[str, list[str]]:
    """Peak FLOP/s dtypes :func:`pdcalc.perf.flops.prefill_compute_seconds` reads with its default dtypes."""
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
    "plan": (ComputeNeed("card", "quant", _throughput_flops, "prefill and decode steps (pdcalc.perf.step.step)"),),
    "what_to_run": (ComputeNeed("card", "quant", _throughput_flops,
                                "the recommended split's prefill and decode steps (pdcalc.perf.step.step)"),),
    "v3_throughput": (
        ComputeNeed("card", "quant", _throughput_flops, "prefill and decode steps (pdcalc.perf.step.step)"),
        ComputeNeed("other_card", "other_quant", _throughput_flops,
                    "the second card's steps (pdcalc.perf.step.step)")),
    "transfer": (ComputeNeed("card", None, _prefill_flops,
                             "the prefill compute time (pdcalc.perf.flops.prefill_compute_seconds)"),),
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
NONE_MEANS: dict[tuple[str, str], Callable[[], Any]] = {("plan", "context"): _article_context,
                                                        ("what_to_run", "context"): _article_context}


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


def _plan_size(values: dict, chapter: str) -> str | None:
    """A chapter's plan no larger than the command line's (:func:`pdcalc.plan.search.check_plan_size`)."""
    from pdcalc.plan.search import check_plan_size
    from pdcalc.plan.workload import Setup

    setup = Setup(model=values["model"], quant=values.get("quant"), card=values["card"], cards=values["cards"],
                  tp_options=tuple(values["tp_options"]))
    try:
        check_plan_size(setup)
    except checks.InputError as exc:
        return str(exc).removeprefix(f"{exc.name}: ")
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
    CrossCheck(("cards", "tp_options", "model", "card"), ("plan", "what_to_run"), _plan_size),
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
    name = chapter_name(path)
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
