"""Recomputations of the articles' numbers, one module per chapter.

Importing this package registers every recomputation with :func:`pdcalc.claims.recomputes`.
"""

from pdcalc.audit import architecture, budgets, mooncake, pd_split, per_card, v3_deploy  # noqa: F401
