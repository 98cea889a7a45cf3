"""Glue a value into a chapter's prose, rounded by the precision policy (:mod:`pdcalc.core.precision`).
"""

from __future__ import annotations

from pdcalc.core.precision import rounded


def glue(name: str, value, display: bool = True, *, sig: int | None = None, decimals: int | None = None):
    """:func:`myst_nb.glue` of ``value`` rounded by :func:`rounded` (the chapters' only way to glue)."""
    from myst_nb import glue as _glue

    return _glue(name, rounded(value, sig=sig, decimals=decimals), display=display)
