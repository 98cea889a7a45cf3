"""How long things take: FLOPs, published kernel costs, the step model by concern (shape, traffic, kernels,
communication, routing, speculative decoding, scheduling, the step itself) and the KV transfer.
May import: :mod:`pdcalc.core`, :mod:`pdcalc.hardware`, :mod:`pdcalc.model`, :mod:`pdcalc.layout`.
"""
