"""Recomputations for the V3 article's TP/DP throughput, replica and memory sections, one module per
section group (:mod:`~pdcalc.audit.v3_kv`, :mod:`~pdcalc.audit.v3_tp`, :mod:`~pdcalc.audit.v3_capacity`,
:mod:`~pdcalc.audit.v3_memory`); the article's tables are rebuilt in :mod:`pdcalc.audit.v3_tables`.

Each step of the article is recomputed from the numbers it prints just before (``printed_value``), so the
verdict judges that step; where the method itself is unsound (unlike token counts, MB printed as MiB, a memory
plan without the experts, latency and throughput that contradict each other), the explanation of the errata
says so in numbers.
"""

from __future__ import annotations

from pdcalc.audit import v3_capacity, v3_kv, v3_memory, v3_tp
from pdcalc.audit.registry import registered_by

#: The article sections this chapter covers (exact section names, per article).
SECTIONS = {"v3": ("1.2.2", "1.2.3", "2.1.1", "2.2.1", "2.2.2", "2.2.3", "2.2.4", "2.2.5", "2.2.6", "2.2.7", "2.2.8",
                   "2.2.9.1", "2.2.9.3", "2.3.1", "2.3.2", "2.3.3")}
#: The claims this module recomputes.
CLAIM_IDS = registered_by(*(m.__name__ for m in (v3_kv, v3_tp, v3_capacity, v3_memory)))
