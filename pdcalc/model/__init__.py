"""What a checkpoint is: its config, its tensor inventory, quantization schemes, and its KV cache as each
engine lays it out.
May import: :mod:`pdcalc.core`, :mod:`pdcalc.hardware`.
"""

from pdcalc.legacy import forward as _forward

#: pdcalc 0.1's ``pdcalc.model`` module names, kept for one release (:mod:`pdcalc.legacy`).
__getattr__ = _forward(__name__)
