"""Searching deployments: every P/D split and co-located layout of a cluster under a workload and targets,
the frontier, and what to run with its launch settings.
May import: every layer below it (core, hardware, model, layout, perf, reality).
"""

from pdcalc.legacy import forward as _forward

#: pdcalc 0.1's ``pdcalc.plan`` module names, kept for one release (:mod:`pdcalc.legacy`).
__getattr__ = _forward(__name__)
