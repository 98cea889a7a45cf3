"""MTP speculative decoding: the acceptance of a draft token and the tokens a step emits.
"""

from __future__ import annotations

from pdcalc.perf.kernels import cost_tables


# --------------------------------------------------------------------- MTP, imbalance, overheads
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
