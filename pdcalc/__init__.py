"""pdcalc: prefill/decode deployment arithmetic for DeepSeek mixture-of-experts models.

The package keeps every quantity in base units (bytes, seconds, FLOP, parameters) and converts
only at the edges (:mod:`pdcalc.units`). Model architectures come from the official Hugging Face
``config.json`` files (:mod:`pdcalc.model`), parameter counts from an explicit tensor inventory
(:mod:`pdcalc.inventory`), checkpoint bytes from quantization schemes (:mod:`pdcalc.quant`), and
every number printed by the two audited articles lives in the claims registry (:mod:`pdcalc.claims`).
"""

from pdcalc.errors import PdcalcError

__all__ = ["PdcalcError"]
__version__ = "0.1.0"
