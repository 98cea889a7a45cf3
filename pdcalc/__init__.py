"""pdcalc: prefill/decode deployment arithmetic for DeepSeek mixture-of-experts models.

The package is built in layers, each importing only from the layers below it:

``core`` (units, errors, checks, rounding) < ``hardware`` (cards and links) < ``model`` (config, tensor
inventory, quantization, KV layout) < ``layout`` (placement, per-card weights and memory) < ``perf`` (FLOPs,
published kernel costs, the step model, KV transfer) < ``reality`` (measurements and the comparison with them)
< ``plan`` (searching deployments, what to run) < ``audit`` (the two articles' numbers, recomputed) < ``book``
(tables, charts, pages, re-runs) < ``cli``.

Every quantity is kept in base units (bytes, seconds, FLOP, parameters) and converted only at the edges
(:mod:`pdcalc.core.units`). The modules of the flat layout of earlier releases (``pdcalc.throughput``,
``pdcalc.memory``, ...) still import, with a deprecation warning, for one release (:mod:`pdcalc.legacy`).
"""

from pdcalc import legacy as _legacy
from pdcalc.core.errors import PdcalcError

_legacy.install()

__all__ = ["PdcalcError"]
__version__ = "0.2.0"
