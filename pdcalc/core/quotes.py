"""Quotes that must print the number they are cited for: the check every data file with a
``quote`` field runs (measurements, published kernel costs).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation


def number_in_text(value: float, text: str) -> bool:
    """Whether ``text`` prints the number ``value`` (thousands separators and trailing zeros ignored).

    Parameters
    ----------
    value : float
        The number to look for.
    text : str
        Quoted source text, e.g. ``"6,688 tokens/s"`` or ``"~73.7k tokens/s"``.

    Returns
    -------
    bool
    """
    flat = re.sub(r"(?<=\d)[,\u2009\u202f](?=\d{3})", "", text)
    try:
        want = Decimal(repr(float(value)))
    except InvalidOperation:
        return False
    for tok in re.findall(r"\d+(?:\.\d+)?", flat):
        if Decimal(tok) == want:
            return True
    return False
