"""A table's numbers as text, each at the precision its quantity deserves.

:func:`pdcalc.book.display.format_column` prints a column with one number of decimals, which suits a column
of like quantities. A column that spans orders of magnitude (measured tokens/s from 37 to 73,700) or a ratio
beside the quantities it divides needs each value at its own precision: :func:`sig_text` and
:func:`ratio_text` write it, and :func:`readable` picks one or the other per column, for the ``texts`` of
:func:`pdcalc.book.display.table_html`. :func:`powers_html` shows a power written in Python's notation in a
source's text (``2**30``) as a superscript.
"""

from __future__ import annotations

import re

import pandas as pd


def sig_text(values, sig: int = 4) -> list[str]:
    """Each value as text at ``sig`` significant figures, thousands separators, never in ``e`` notation.

    Unlike a column printed with one number of decimals, a column whose values span several orders of
    magnitude keeps every value readable: ``0.0007127`` and ``277.7``, not ``0.000713`` and
    ``277.700000``. Trailing zeros after the point are dropped (``0.001``, ``24.8``); integers (and whole
    numbers of at least ``sig`` digits) print exactly; a missing value prints as an empty string.

    >>> sig_text([277.746811, 0.000712704, 1.0849, 12345.6, 0.001, 24.8, None])
    ['277.7', '0.0007127', '1.085', '12,350', '0.001', '24.8', '']
    """
    import math

    from pdcalc.core.precision import round_sig

    out = []
    for v in values:
        if v is None or isinstance(v, str):
            out.append("" if v is None else v)
            continue
        x = float(v)
        if not math.isfinite(x):
            out.append("")
            continue
        if float(x).is_integer() and abs(x) >= 10 ** (sig - 1):
            out.append(f"{x:,.0f}")
            continue
        r = round_sig(x, sig)
        if r == 0:
            out.append("0")
            continue
        d = max(0, sig - 1 - math.floor(math.log10(abs(r))))
        text = f"{r:,.{d}f}"
        out.append(text.rstrip("0").rstrip(".") if "." in text else text)
    return out


#: A column name that reads as a ratio: `` / `` inside it or ``/ `` at its start ("predicted / measured",
#: "/ logged"), not a unit such as tokens/s.
_RATIO_NAME = re.compile(r"(?:^|\s)/\s")


def ratio_text(values, sig: int = 3, decimals: int | None = None) -> list[str]:
    """Ratios as text: ``sig`` significant figures each, trailing zeros kept (``1.00``, ``0.935``, ``2.98``), or
    ``decimals`` places for a column held to a narrow band (``1.003``); a missing value as an empty string."""
    import math

    from pdcalc.core.precision import round_sig

    out = []
    for v in values:
        x = float("nan") if v is None else float(v)
        if not math.isfinite(x):
            out.append("")
        elif decimals is not None:
            out.append(f"{x:,.{decimals}f}")
        elif x == 0:
            out.append("0")
        else:
            r = round_sig(x, sig)
            out.append(f"{r:,.{max(0, sig - 1 - math.floor(math.log10(abs(r))))}f}")
    return out


def readable(df: pd.DataFrame, *, sig: int = 4, ratios: tuple = (), ratio_sig: int = 3,
             ratio_decimals: int | None = None) -> dict[str, list[str]]:
    """The cells of ``df``'s float columns as text at the precision each quantity deserves, for the ``texts`` of
    :func:`pdcalc.book.display.table_html`: a ratio (a column named like ``a / b``, or in ``ratios``) at
    ``ratio_sig`` significant figures or ``ratio_decimals`` places (:func:`ratio_text`); any other quantity
    value by value at ``sig`` significant figures, integers and whole measured figures as integers
    (:func:`sig_text`: ``73,700`` beside ``36.91``, not ``73,700.00``)."""
    out = {}
    for col in df.columns:
        if not pd.api.types.is_float_dtype(df[col].dtype):
            continue
        if col in ratios or _RATIO_NAME.search(str(col)):
            out[col] = ratio_text(df[col], ratio_sig, ratio_decimals)
        else:
            out[col] = sig_text(df[col], sig)
    return out


def powers_text(text: str) -> str:
    """A power written in Python's notation as plain text: ``2**30`` -> ``2^30``."""
    import re

    return re.sub(r"(\d+)\*\*(\d+)", r"\1^\2", text)


def powers_html(text: str) -> str:
    """A power written in Python's notation (``10**9``, ``2**30``) in escaped HTML as a superscript."""
    import re

    return re.sub(r"(\d+)\*\*(\d+)", r"\1<sup>\2</sup>", text)
