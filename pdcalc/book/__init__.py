"""Everything a page needs: tables, charts, glue, the audit tables, the standalone HTML page and chapter re-runs.
May import: every layer below it; only :mod:`pdcalc.cli` imports it.
"""
