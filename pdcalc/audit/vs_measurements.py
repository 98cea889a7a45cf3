"""Where an article predicts a quantity the registry measured: its number, pdcalc's, the
measurement and both ratios.
"""

from __future__ import annotations

import pandas as pd

from pdcalc.reality.memory_checks import KTRANSFORMERS_TOKENS

#: The articles' own predictions of a measured quantity: (label, claim id, bytes per printed unit,
#: multiplier to the measured quantity, measurement id).
_ARTICLE_CASES = (
    ("V4 article: weights on a P card (EP8, W8A8)", "v4-6.2-p-weight-card", 1e9, 1,
     "vllm-ascend-13439-v4flash-weights-per-card"),
    (f"V3 article: MLA cache of {KTRANSFORMERS_TOKENS:,} tokens, BF16 (its per-token figure x "
     f"{KTRANSFORMERS_TOKENS:,})", "v3-2.3.1-kv-mla-per-token", 2**20, KTRANSFORMERS_TOKENS,
     "sglang-ktransformers-1804-v3-bf16-kv-10000-tokens"),
)


def articles_vs_measurements(df: pd.DataFrame) -> pd.DataFrame:
    """Where an article predicts a measured quantity: its number, pdcalc's, the measurement, both ratios."""
    from pdcalc.audit.claims import get_claim

    r = df.set_index("id")
    rows = []
    for label, cid, unit_bytes, times, mid in _ARTICLE_CASES:
        c = get_claim(cid)
        art = float(c.value) * unit_bytes * times
        meas, pred = float(r.loc[mid, "measured"]), float(r.loc[mid, "predicted"])
        rows.append({"quantity": label, "article prints": c.printed, "article (GB)": art / 1e9,
                     "pdcalc (GB)": pred / 1e9, "measured (GB)": meas / 1e9, "article / measured": art / meas,
                     "pdcalc / measured": pred / meas, "measurement": mid})
    return pd.DataFrame(rows).set_index("quantity")
