"""The module names of the flat layout of pdcalc 0.1, kept importable for one release.

``import pdcalc.throughput`` or ``from pdcalc.memory import card_weights`` still work: each old module is an
alias whose public names are looked up, on first use, in the modules of the layered package that now hold
them (:data:`MOVED`), with a :class:`DeprecationWarning` naming the new place. ``pdcalc.model``,
``pdcalc.hardware`` and ``pdcalc.plan`` are packages now; their ``__init__`` forwards the old module's names
the same way (:func:`forward`). Private names (a leading underscore) are not forwarded. New code imports from
the new places (the README's "Python API").

This module imports nothing of pdcalc until an old name is used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

#: Old module -> the modules that hold its public names now, searched in this order.
MOVED: dict[str, tuple[str, ...]] = {
    "pdcalc.units": ("pdcalc.core.units",),
    "pdcalc.errors": ("pdcalc.core.errors",),
    "pdcalc.checks": ("pdcalc.core.checks",),
    "pdcalc.precision": ("pdcalc.core.precision", "pdcalc.book.glue"),
    "pdcalc.hardware": ("pdcalc.hardware.cards",),
    "pdcalc.model": ("pdcalc.model.config",),
    "pdcalc.inventory": ("pdcalc.model.inventory",),
    "pdcalc.quant": ("pdcalc.model.quant",),
    "pdcalc.kv_cache": ("pdcalc.model.kv_layout", "pdcalc.model.kv_cache"),
    "pdcalc.parallel": ("pdcalc.layout.parallel",),
    "pdcalc.memory": ("pdcalc.layout.memory",),
    "pdcalc.deployment": ("pdcalc.layout.deployment",),
    "pdcalc.flops": ("pdcalc.perf.flops",),
    "pdcalc.costs": ("pdcalc.perf.costs", "pdcalc.perf.cost_points"),
    "pdcalc.transfer": ("pdcalc.perf.transfer",),
    "pdcalc.throughput": ("pdcalc.perf.step", "pdcalc.perf.inputs", "pdcalc.perf.roofline", "pdcalc.perf.shape",
                          "pdcalc.perf.flops", "pdcalc.perf.traffic",
                          "pdcalc.perf.comm", "pdcalc.perf.kernels", "pdcalc.perf.routing",
                          "pdcalc.perf.speculative", "pdcalc.perf.schedule", "pdcalc.perf.published",
                          "pdcalc.reality.published_runs"),
    "pdcalc.measurements": ("pdcalc.reality.measurements", "pdcalc.core.quotes"),
    "pdcalc.validation": ("pdcalc.reality.validation", "pdcalc.reality.bands", "pdcalc.reality.weights",
                          "pdcalc.reality.memory_checks", "pdcalc.reality.throughput_runs",
                          "pdcalc.audit.vs_measurements"),
    "pdcalc.plan": ("pdcalc.plan.search", "pdcalc.plan.workload", "pdcalc.plan.roles", "pdcalc.plan.splits",
                    "pdcalc.plan.frontier_search", "pdcalc.plan.labels", "pdcalc.plan.views"),
    "pdcalc.recommend": ("pdcalc.plan.recommend", "pdcalc.plan.workload", "pdcalc.plan.labels", "pdcalc.plan.views",
                         "pdcalc.plan.launch", "pdcalc.audit.answers"),
    "pdcalc.registry": ("pdcalc.audit.registry",),
    "pdcalc.claims": ("pdcalc.audit.claims", "pdcalc.audit.registry"),
    "pdcalc.errata": ("pdcalc.audit.errata",),
    "pdcalc.findings": ("pdcalc.audit.findings", "pdcalc.book.findings"),
    "pdcalc.audit.v3_deploy": ("pdcalc.audit.v3_tables", "pdcalc.audit.v3_article", "pdcalc.audit.v3_common",
                               "pdcalc.audit.v3_kv", "pdcalc.audit.v3_tp", "pdcalc.audit.v3_capacity",
                               "pdcalc.audit.v3_memory", "pdcalc.book.rebuilt"),
    "pdcalc.display": ("pdcalc.book.display",),
    "pdcalc.charts": ("pdcalc.book.charts",),
    "pdcalc.report": ("pdcalc.book.report", "pdcalc.book.stories"),
    "pdcalc.audit_page": ("pdcalc.book.audit_page",),
    "pdcalc.page": ("pdcalc.book.page", "pdcalc.book.myst"),
    "pdcalc.rerun": ("pdcalc.book.rerun", "pdcalc.book.parameters", "pdcalc.book.validators"),
}



def _card_field(field: str, default) -> dict:
    cards = importlib.import_module("pdcalc.hardware.cards")
    return {n: getattr(cards.get_card(n), field) for n in cards.card_names()
            if getattr(cards.get_card(n), field) is not None
            and getattr(cards.get_card(n), field) != default(cards.get_card(n))}


#: Old names whose value is a field of another object now: (old module, name) -> (what it is now, its value).
RETIRED: dict[tuple[str, str], tuple[str, object]] = {
    ("pdcalc.throughput", "RANKS_PER_CARD"): ("the card field ranks_per_card (pdcalc.hardware.cards.Card.ranks)",
                                             lambda: _card_field("ranks_per_card", lambda c: 1)),
    ("pdcalc.throughput", "SCALE_UP_DOMAIN"): ("the card field scale_up_cards (Card.scale_up_domain)",
                                              lambda: _card_field("scale_up_cards", lambda c: c.cards_per_node)),
    # 0.1's default TPOT came from these registry entries; the default targets are a published service level
    # now (pdcalc.reality.service_levels), and the entries stay in the measurements registry
    ("pdcalc.plan", "TPOT_SLO_ID"): ("a registry id no longer behind the default targets (pdcalc.reality."
                                     "service_levels gives them)", lambda: "cloudmatrix384-r1-decode-per-npu-tpot50"),
    ("pdcalc.plan", "USER_SPEED_ID"): ("a registry id no longer behind the default targets (pdcalc.reality."
                                       "service_levels gives them)", lambda: "deepseek-prod-h800-decode-per-node"),
}

#: Old modules whose name is a package now (their ``__init__`` calls :func:`forward`).
PACKAGES = frozenset({"pdcalc.model", "pdcalc.hardware", "pdcalc.plan"})


def lookup(old: str, name: str):
    """The object the old module ``old`` exported as ``name``, from where it lives now."""
    if name.startswith("_"):
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    if (old, name) in RETIRED:
        now, value = RETIRED[(old, name)]
        warnings.warn(f"{old}.{name} is {now}; {old} is kept for one release", DeprecationWarning, stacklevel=3)
        return value()
    for new in MOVED[old]:
        mod = importlib.import_module(new)
        if hasattr(mod, name):
            warnings.warn(f"{old}.{name} is {new}.{name} now; {old} is kept for one release",
                          DeprecationWarning, stacklevel=3)
            return getattr(mod, name)
    raise AttributeError(f"module {old!r} has no attribute {name!r} (it moved with the package's layers: "
                         f"see pdcalc.legacy.MOVED)")


def forward(old: str):
    """A module ``__getattr__`` for the package that took over the old module ``old``'s name."""

    def __getattr__(name: str):
        return lookup(old, name)

    return __getattr__


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        old = module.__name__
        module.__doc__ = f"Alias of the pdcalc 0.1 module {old}: its names now live in {', '.join(MOVED[old])}."
        module.__getattr__ = forward(old)
        module.__dir__ = lambda: sorted({n for new in MOVED[old] for n in dir(importlib.import_module(new))
                                         if not n.startswith("_")})


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED and fullname not in PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _Loader())
        return None


def install() -> None:
    """Make the old module names importable (called once by ``pdcalc/__init__``)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


__all__ = ["MOVED", "PACKAGES", "RETIRED", "forward", "install", "lookup"]
