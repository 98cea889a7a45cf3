"""Cards and their links, every figure with its source (``pdcalc/data/hardware.toml`` or a user's card file).
May import: :mod:`pdcalc.core`.
"""

from pdcalc.legacy import forward as _forward

#: pdcalc 0.1's ``pdcalc.hardware`` module names, kept for one release (:mod:`pdcalc.legacy`).
__getattr__ = _forward(__name__)
