"""The foundation every layer uses: units (GB and GiB kept apart), errors that print as one line, input
checks, the rounding policy and quote checks.
May import: nothing of pdcalc.
"""
