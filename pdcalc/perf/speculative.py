"""MTP speculative decoding: the acceptance of a draft token and the tokens a step emits.

Each of ``d`` chained draft tokens is accepted with probability ``a`` given the one before it was, so a step
advances a sequence by ``1 + sum_i a^i`` tokens. Where a served deployment states no acceptance, it takes the
acceptance engines publish for its benchmark's dataset (``pdcalc/data/acceptance.toml``: random-token prompts
accept fewer drafts than natural text), never a figure from the document being predicted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pdcalc.core import checks
from pdcalc.core.errors import ConfigError, load_toml
from pdcalc.core.quotes import number_in_text
from pdcalc.layout.served import MAX_TEMPERATURE
from pdcalc.perf.kernels import cost_tables

ACCEPTANCE_SOURCE = "pdcalc/data/acceptance.toml"


def mtp_acceptance_default() -> float:
    """Acceptance rate of one MTP draft token: the midpoint of the DeepSeek-V3 report's 85-90 %
    (:func:`pdcalc.perf.costs.mtp_acceptance`)."""
    p = cost_tables().mtp_acceptance("DeepSeek-V3")[0]
    return (p.acceptance_low_fraction + p.acceptance_high_fraction) / 2


def accepted_tokens(mtp_steps: int, acceptance: float) -> float:
    """Expected draft tokens accepted per step when each of ``mtp_steps`` chained drafts is accepted with
    probability ``acceptance`` given the one before it was:

    .. math:: \\mathbb{E}[\\text{accepted}] = \\sum_{i=1}^{d} a^i
    """
    return float(sum(acceptance ** i for i in range(1, mtp_steps + 1)))


def chained_acceptance(draft_tokens: int, accepted: float) -> float:
    """The per-draft acceptance ``a`` with :func:`accepted_tokens` ``(d, a) = accepted`` (bisection; 1 where
    every draft is accepted)."""
    if accepted >= draft_tokens:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if accepted_tokens(draft_tokens, mid) < accepted:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True, kw_only=True)
class AcceptanceFigure:
    """One published acceptance, as draft tokens accepted per step and as the per-draft acceptance."""

    id: str
    model: str
    engine: str
    dataset: str
    draft_tokens: int
    accepted: float             # draft tokens accepted per step
    quote: str
    source_id: str
    url: str
    notes: str = ""
    temperature: float | None = None   # the sampling temperature the source states (None: not stated)

    @property
    def sampled(self) -> bool:
        """Whether the source sampled tokens (temperature above 0); unstated is read as the clients' greedy
        default."""
        return bool(self.temperature)

    @property
    def per_draft(self) -> float:
        return chained_acceptance(self.draft_tokens, self.accepted)


def _figure(raw: dict) -> AcceptanceFigure:
    fid = raw.get("id", "?")
    where = f"{ACCEPTANCE_SOURCE}: figure {fid}"
    known = {"id", "model", "engine", "dataset", "draft_tokens", "accept_length", "accepted", "quote", "source_id",
             "url", "notes", "temperature"}
    for key in raw:
        if key not in known:
            raise ConfigError(where, key, f"unknown field; allowed: {', '.join(sorted(known))}")
    if ("accept_length" in raw) == ("accepted" in raw):
        raise ConfigError(where, "accept_length", "give accept_length or accepted, one of them")
    printed = raw["accept_length"] if "accept_length" in raw else raw["accepted"]
    if not number_in_text(printed, raw["quote"]):
        raise ConfigError(where, "quote", f"does not print {printed}")
    d = int(raw["draft_tokens"])
    accepted = float(raw["accept_length"]) - 1 if "accept_length" in raw else float(raw["accepted"])
    if not 0 <= accepted <= d:
        raise ConfigError(where, "accept_length", f"{accepted:g} accepted of {d} drafts is impossible")
    return AcceptanceFigure(id=fid, model=raw["model"], engine=raw["engine"], dataset=raw["dataset"], draft_tokens=d,
                            accepted=accepted, quote=raw["quote"], source_id=raw["source_id"], url=raw["url"],
                            notes=raw.get("notes", ""), temperature=_temperature(where, raw.get("temperature")))


def _temperature(where: str, value) -> float | None:
    """A figure's stated temperature, checked as a spec's ``[workload] temperature`` is."""
    if value is None:
        return None
    try:
        return checks.number("", value, low=0.0, high=MAX_TEMPERATURE)
    except checks.InputError as exc:
        raise ConfigError(where, "temperature", str(exc)) from None


@cache
def acceptance_figures() -> tuple[AcceptanceFigure, ...]:
    """Every published acceptance of ``pdcalc/data/acceptance.toml``, checked (each quote prints its figure)."""
    data = load_toml(resources.files("pdcalc").joinpath("data", "acceptance.toml"), ACCEPTANCE_SOURCE)
    return tuple(_figure(raw) for raw in data.get("figure", []))


def dataset_acceptance(dataset: str, *, exclude_sources: tuple[str, ...] = (),
                       temperature: float = 0.0) -> tuple[float, tuple[str, ...]]:
    """Per-draft acceptance for a benchmark ``dataset``: the median of the published figures on that dataset
    (every dataset's where none is published), leaving out the documents ``exclude_sources``; and the ids used.
    Only figures sampled as the client samples count (greedy at ``temperature`` 0, else sampled), where any
    are left: a sampled target accepts fewer of a greedy draft's tokens.

    .. math:: a = \\operatorname{median}_j a_j, \\qquad \\sum_{i=1}^{d_j} a_j^i = \\text{accepted}_j
    """
    figs = [f for f in acceptance_figures() if f.source_id not in exclude_sources]
    figs = [f for f in figs if f.sampled == bool(temperature)] or figs
    same = [f for f in figs if f.dataset == dataset]
    use = same or figs
    if not use:
        return mtp_acceptance_default(), ()
    return float(statistics.median(f.per_draft for f in use)), tuple(f.id for f in use)
