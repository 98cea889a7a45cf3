"""How precisely numbers leave pdcalc for a page: rounding at the edge, to significant figures.

Inside the package every quantity keeps full float precision. What a chapter shows, glues into its
prose or hands to a chart is rounded first, for two reasons:

- a printed number should carry the precision the quantity deserves, not the 17 digits of a float;
- the last bits of floating-point results differ between machines (OpenBLAS picks a kernel per CPU,
  numpy's SIMD ``exp``/``log`` differ by an ulp), while the book's regression tests (nbval) compare
  outputs as text. A number rounded to a few significant figures is the same on every machine.

The policy
----------
- :data:`MAX_SIG` significant figures at most for any non-integer number in a committed output
  (text, HTML tables, glued values, chart data). ``tests/test_precision.py`` scans every chapter's
  stored outputs and fails on a longer one, on any machine.
- :data:`SIG` significant figures by default for derived quantities: bytes in GB or GiB, times, rates,
  ratios, chart coordinates. Model inputs and printed article values are usually shorter already.
- Integers (counts, exact byte and parameter totals) are exact and stay as they are; a whole-number
  float is shown as an integer.
- A glued value is rounded to the precision its sentence shows it with (``decimals=2`` for a
  ``{glue:text}`x:.2f``` reference), so that the page displays exactly what is stored and never rounds
  twice; ``tests/test_precision.py`` checks every reference.

Rounding goes through the decimal string of the float (``format(x, ".4g")``), which is correctly
rounded, rather than through ``x * 10**k``, which is not.
"""

from __future__ import annotations

import math
import numbers
import re

import numpy as np

#: Most significant figures any non-integer number in a committed output may have.
MAX_SIG = 6
#: Significant figures of a derived quantity unless it states its own.
SIG = 4


def round_sig(x, sig: int = SIG):
    """``x`` rounded to ``sig`` significant figures (floats, numpy arrays, nested lists and tuples).

    Integers, booleans, strings, ``None``, NaN and infinities pass through unchanged; numpy scalars
    become Python numbers.

    >>> round_sig(0.3800165107965131)
    0.38
    >>> round_sig(6218.5, 6), round_sig(47.43, 3), round_sig(12345, 2)
    (6218.5, 47.4, 12345)
    """
    if not 1 <= sig <= 17:
        raise ValueError(f"sig must be in 1..17, got {sig}")
    if isinstance(x, (bool, np.bool_)) or x is None or isinstance(x, str):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.kind != "f":
            return x
        return np.array([_round_one(float(v), sig) for v in x.ravel()], dtype=x.dtype).reshape(x.shape)
    if isinstance(x, (list, tuple)):
        return type(x)(round_sig(v, sig) for v in x)
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return _round_one(float(x), sig)
    return x


def _round_one(v: float, sig: int) -> float:
    if v == 0 or not math.isfinite(v):
        return v
    return float(f"{v:.{sig}g}")


def round_decimals(x, decimals: int):
    """``x`` rounded to ``decimals`` places after the point (correctly rounded, as ``format(x, ".2f")``)."""
    if isinstance(x, np.ndarray):
        return np.array([float(f"{v:.{decimals}f}") if math.isfinite(v) else v for v in x.ravel().astype(float)]
                        ).reshape(x.shape)
    if isinstance(x, (list, tuple)):
        return type(x)(round_decimals(v, decimals) for v in x)
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real) or isinstance(x, numbers.Integral):
        return x
    v = float(x)
    return float(f"{v:.{decimals}f}") if math.isfinite(v) else v


def tidy(df, sig: int = SIG, *, exact: tuple = ()):
    """A copy of DataFrame ``df`` for display: float columns rounded to ``sig`` significant figures,
    float columns holding only whole numbers turned into integers (counts and byte totals), and a float
    index rounded the same way. Columns named in ``exact`` are left as they are.
    """
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        if col in exact:
            continue
        s = out[col]
        if pd.api.types.is_float_dtype(s.dtype):
            out[col] = _tidy_series(s, sig)
        elif s.dtype == object:
            out[col] = [round_sig(v, sig) if isinstance(v, (float, np.floating)) else v for v in s]
    if pd.api.types.is_float_dtype(out.index.dtype):
        out.index = pd.Index(_tidy_series(out.index.to_series(), sig), name=out.index.name)
    return out


def _tidy_series(s, sig: int):
    import pandas as pd

    v = s.to_numpy(dtype=float)
    finite = np.isfinite(v)
    if finite.all() and np.all(v == np.round(v)) and np.all(np.abs(v) < 2**53):
        return pd.Series(v.astype(np.int64), index=s.index, name=s.name)
    return pd.Series(round_sig(v, sig), index=s.index, name=s.name)


def rounded(value, *, sig: int | None = None, decimals: int | None = None):
    """``value`` as a page should hold it: to ``decimals`` places if given, else to ``sig`` (default
    :data:`MAX_SIG`) significant figures; DataFrames through :func:`tidy`."""
    if sig is not None and decimals is not None:
        raise ValueError("give sig or decimals, not both")
    if hasattr(value, "to_numpy") and hasattr(value, "columns"):
        return tidy(value, sig or SIG)
    if decimals is not None:
        return round_decimals(value, decimals)
    return round_sig(value, sig or MAX_SIG)


# ---------------------------------------------------------------------------------------------
# scanning text for numbers that carry too many digits
# ---------------------------------------------------------------------------------------------
#: A decimal number with a point or an exponent, not part of a word, a version (``6.1.0``), a path or
#: a colour/hash (``#3f2a``).
_NUMBER = re.compile(r"(?<![\w.#@/\\-])-?(\d+\.\d*|\.\d+|\d+(?=[eE][-+]?\d))([eE][-+]?\d+)?(?![\w.]|\.\d)")
#: Identifiers that look like decimals: arXiv ids (``arXiv 2506.12708``).
_NOT_A_NUMBER = re.compile(r"arXiv[:\s]*$", re.I)


def significant_figures(token: str) -> int:
    """Significant figures of a decimal token: ``"0.3800"`` -> 2, ``"5505024.0"`` -> 7, ``"1.5e+07"`` -> 2.

    Leading zeros never count, trailing zeros (after the point, or of a whole number) do not either.
    """
    mantissa = re.split(r"[eE]", token.lstrip("-+"))[0]
    whole, _, frac = mantissa.partition(".")
    frac = frac.rstrip("0")
    digits = (whole + frac).lstrip("0") if frac else whole.lstrip("0").rstrip("0")
    return len(digits)


def too_precise(text: str, max_sig: int = MAX_SIG) -> list[str]:
    """Decimal numbers in ``text`` with more than ``max_sig`` significant figures."""
    out = []
    for m in _NUMBER.finditer(text):
        if _NOT_A_NUMBER.search(text[max(0, m.start() - 12):m.start()]):
            continue
        token = m.group(0)
        if significant_figures(token) > max_sig:
            out.append(token)
    return out
