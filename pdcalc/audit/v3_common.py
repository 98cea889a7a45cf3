"""What the V3 article's recomputations share: the model, its printed values and the units it
prints in.
"""

from __future__ import annotations

from functools import cache

from pdcalc.audit.registry import printed_value, raw_claims
from pdcalc.core.units import from_unit
from pdcalc.model.config import load_config

V3 = "deepseek-v3"
P = printed_value
TFLOPS = 1e12    # FLOP/s in one TFLOPS
PFLOPS = 1e15    # FLOP/s in one PFLOPS
MS = 1e-3        # seconds in one millisecond
PCT = 100        # percent in one


@cache
def v3_config():
    return load_config(V3)


def printed_params(cid: str) -> float:
    """A printed parameter count ("24.8B", "44.04M") in parameters, by the claim's printed unit."""
    unit = next(r["unit"] for r in raw_claims("v3") if r["id"] == cid)
    return from_unit(P(cid), unit)
