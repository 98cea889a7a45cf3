"""What sits on a card: expert placement, per-card weights and memory budgets, the published deployments.
May import: :mod:`pdcalc.core`, :mod:`pdcalc.hardware`, :mod:`pdcalc.model`.
"""
