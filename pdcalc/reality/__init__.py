"""Published measurements and pdcalc's predictions of them, each with the band it may fall in.
May import: every layer below it (core, hardware, model, layout, perf).
"""
