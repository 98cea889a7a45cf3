"""Recomputations for the model-architecture chapter."""
