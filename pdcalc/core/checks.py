"""Checks of values a user gives: command-line flags, chapter parameters, file fields.

One set of checks serves the command line (:mod:`pdcalc.cli`), chapter re-runs (:mod:`pdcalc.book.rerun`)
and the package's own constructors, so that a value is accepted or refused the same way everywhere.
Each check takes the name the user knows the value by (``--tp``, ``hidden_size``, ``cards``), returns
the value in its canonical Python type and raises :class:`InputError` with one line that names it and
says what is allowed.

Numbers are finite: ``inf`` and ``nan`` are refused wherever a number is expected. ``bool`` is not
accepted as a number (``True`` is not ``1`` here).
"""

from __future__ import annotations

import math
import numbers

from pdcalc.core.errors import PdcalcError

#: Bounds shared by the command line's flags and the chapters' parameters: generous enough for any real
#: deployment, tight enough that nothing runs away (a cluster of 10**9 cards, a 10**12-token context).
MAX_CARDS = 65_536                 # a cluster, an EP, TP or DP group
MAX_TOKENS = 16_777_216            # a context, a prompt, an output (16M tokens)
MAX_SEQUENCES = 10_000_000         # users, sequences in flight, sequences per card
RATE_PER_S = (1e-6, 1e9)           # requests per second
LATENCY_MS = (1e-3, 1e9)           # a TTFT or TPOT target
BANDWIDTH_GB_S = (1e-3, 1e6)       # a transfer bandwidth
TOKENS_PER_S = (1e-3, 1e12)        # an aggregate throughput target


class InputError(PdcalcError, ValueError):
    """A value outside what its flag, parameter or field allows."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(f"{name}: {message}" if name else message)


def show(value) -> str:
    """A short, one-line rendering of ``value`` for an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 14000 else 'more than 4,000'} digits"
    text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _range_text(low, high, *, low_open: bool = False, fmt=str) -> str:
    if low is not None and high is not None:
        return f"in ({fmt(low)}, {fmt(high)}]" if low_open else f"in {fmt(low)}..{fmt(high)}"
    if low is not None:
        return f"> {fmt(low)}" if low_open else f">= {fmt(low)}"
    if high is not None:
        return f"<= {fmt(high)}"
    return ""


def _num(x) -> str:
    if isinstance(x, int):
        return f"{x:,}" if x.bit_length() <= 100 else show(x)
    if math.isfinite(x) and x.is_integer() and abs(x) < 1e16:
        return f"{int(x):,}"
    return f"{x:g}"


def integer(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` in ``[low, high]``; a float is accepted only when it is a whole number."""
    what = "an integer" + (f" {_range_text(low, high, fmt=_num)}" if low is not None or high is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(name, f"must be {what}, got {show(value)}")
    if not isinstance(value, numbers.Integral):
        f = float(value)
        if not (math.isfinite(f) and f.is_integer() and abs(f) <= 2**53):
            raise InputError(name, f"must be {what}, got {show(value)}")
        value = int(f)
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise InputError(name, f"must be {what}, got {_num(value)}")
    return value


def number(name: str, value, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, unit: str = "") -> float:
    """``value`` as a finite ``float``, at least ``low`` (above it if ``low_open``) and at most ``high``."""
    rng = _range_text(low, high, low_open=low_open, fmt=_num)
    what = "a finite number" + (f" {rng}" if rng else "") + (f" ({unit})" if unit else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(name, f"must be {what}, got {show(value)}")
    try:
        f = float(value)
    except OverflowError:
        raise InputError(name, f"must be {what}, got a number too large for a float") from None
    if not math.isfinite(f):
        raise InputError(name, f"must be {what}, got {show(value)}")
    if low is not None and (f <= low if low_open else f < low):
        raise InputError(name, f"must be {what}, got {_num(f)}")
    if high is not None and f > high:
        raise InputError(name, f"must be {what}, got {_num(f)}")
    return f


def fraction(name: str, value) -> float:
    """A share in (0, 1] (a utilisation, an efficiency)."""
    return number(name, value, low=0.0, high=1.0, low_open=True)


def boolean(name: str, value) -> bool:
    """``True`` or ``False`` exactly (the strings ``"false"`` and ``"0"`` are refused, not read as true)."""
    if not isinstance(value, bool):
        raise InputError(name, f"must be true or false, got {show(value)}")
    return value


def text(name: str, value, *, allow_empty: bool = False) -> str:
    """A string (non-empty unless ``allow_empty``)."""
    if not isinstance(value, str):
        raise InputError(name, f"must be a string, got {show(value)}")
    if not allow_empty and not value.strip():
        raise InputError(name, "must not be empty")
    return value


def tp_problem(tp: int, *, heads: int, o_groups: int | None = None, index_heads: int | None = None) -> str | None:
    """Why TP degree ``tp`` cannot split a model's attention (``None`` if it can).

    TP splits attention by head, DeepSeek-V4's grouped output projection ``wo_a`` by group and its
    indexer by head, so ``tp`` must divide each of them.
    """
    if heads % tp:
        return f"{tp} does not divide the {heads} attention heads (TP splits attention by head)"
    if o_groups is not None and o_groups % tp:
        return f"{tp} does not divide the {o_groups} output groups (o_groups; TP splits wo_a by group)"
    if index_heads is not None and index_heads % tp:
        return f"{tp} does not divide the {index_heads} indexer heads (index_n_heads; TP splits the indexer by head)"
    return None
