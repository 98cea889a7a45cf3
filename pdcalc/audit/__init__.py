"""The two articles: every printed number (the claims registry), its recomputation per section group, the
errata and the findings, and what to run instead of each article's deployment.
May import: every layer below it (core, hardware, model, layout, perf, reality, plan).
"""
