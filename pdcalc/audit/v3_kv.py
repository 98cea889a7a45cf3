"""V3 article §1.2.2 and §2.3.1: KV cache per token and per user, traditional and MLA, and the units
they are printed in.
"""

from __future__ import annotations

from pdcalc.audit.registry import recomputes
from pdcalc.audit.v3_common import PCT, V3, P, v3_config
from pdcalc.core.units import GB, KB, MB, GiB, KiB, MiB, dtype_bytes
from pdcalc.model.kv_cache import mla_bytes_per_token


# ================================================================== §1.2.2 and §2.3.1: KV per token
def article_trad_kv_bytes_per_token() -> float:
    """The article's "traditional" KV per token: 2 x hidden_size x num_layers x 2 bytes (§2.3.1)."""
    return (P("v3-2.3.1-kv-factor") * P("v3-2.3.1-hidden-size") * P("v3-2.3.1-num-layers")
            * P("v3-2.3.1-bytes-per-param-fp16"))


def article_mla_kv_bytes_per_token() -> float:
    """The article's MLA KV per token: (kv_lora_rank + qk_rope_head_dim) x num_layers x 2 bytes (§2.3.1)."""
    return ((P("v3-2.3.1-kv-lora-rank") + P("v3-2.3.1-qk-rope-dim")) * P("v3-2.3.1-num-layers")
            * P("v3-2.3.1-bytes-per-param-fp16"))


def tokens_128k() -> float:
    """The cited "128k" context in tokens, k = 1,024 (what reproduces the cited 213.5 and 7.6)."""
    return P("v3-1.2.2-context-128k") / KB * KiB


def _trad_128k_why():
    b = article_trad_kv_bytes_per_token() * tokens_128k()
    return (f"The article's own formula gives {article_trad_kv_bytes_per_token():,.0f} B/token x "
            f"{tokens_128k():,.0f} tokens = {b / GiB:.1f} GiB = {b / GB:.1f} GB: the cited "
            f"{P('v3-1.2.2-kv-traditional-128k')} is GiB printed as GB.")


recomputes("v3-1.2.2-kv-traditional-128k", method="article formula 2 x 7168 x 61 x 2 B x 131,072 tokens, in GB",
           why=_trad_128k_why)(lambda: article_trad_kv_bytes_per_token() * tokens_128k() / GB)


def _mla_128k_why():
    c = v3_config()
    full = mla_bytes_per_token(V3) * tokens_128k()
    latent = full * c.kv_lora_rank / (c.kv_lora_rank + c.qk_rope_head_dim)
    ratio_cited = 2 * c.hidden_size / c.kv_lora_rank
    ratio_full = article_trad_kv_bytes_per_token() / mla_bytes_per_token(V3)
    return (f"The cited {P('v3-1.2.2-kv-mla-128k')} is {latent / GiB:.3f} GiB = {c.num_hidden_layers} layers x "
            f"{c.kv_lora_rank} latent dims x {dtype_bytes('bf16'):g} B x {tokens_128k():,.0f} tokens: it leaves out the "
            f"{c.qk_rope_head_dim} RoPE key dims every layer also caches, and is GiB printed as GB. The cache is "
            f"{full / GiB:.2f} GiB = {full / GB:.2f} GB. The missing RoPE part is why "
            f"{P('v3-1.2.2-kv-traditional-128k')} / {P('v3-1.2.2-kv-mla-128k')} = {ratio_cited:.0f} "
            f"(2 x {c.hidden_size} / {c.kv_lora_rank}) instead of {ratio_full:.1f}.")


recomputes("v3-1.2.2-kv-mla-128k", method="official MLA cache (512 + 64) x 61 x 2 B x 131,072 tokens, in GB",
           why=_mla_128k_why)(lambda: mla_bytes_per_token(V3) * tokens_128k() / GB)
recomputes("v3-1.2.2-kv-compression-ratio", method="article: 213.5 / 7.6")(
    lambda: P("v3-1.2.2-kv-traditional-128k") / P("v3-1.2.2-kv-mla-128k"))
recomputes("v3-1.2.2-kv-traditional-per-token", "v3-2.3.1-kv-traditional-per-token",
           method="article formula 2 x 7168 x 61 x 2 B, in MiB")(lambda: article_trad_kv_bytes_per_token() / MiB)
recomputes("v3-1.2.2-kv-mla-per-token", method="article: 7.6 GB / 128k tokens in its binary units "
           "(7.6 x 2^30 B / 131,072), in MiB")(
    lambda: P("v3-1.2.2-kv-mla-128k") * GiB / tokens_128k() / MiB)
recomputes("v3-1.2.2-kv-reduction-pct", method="article: 1 - 7.6 / 213.5, %")(
    lambda: (1 - P("v3-1.2.2-kv-mla-128k") / P("v3-1.2.2-kv-traditional-128k")) * PCT)


def _mla_mib_why():
    b, t = article_mla_kv_bytes_per_token(), article_trad_kv_bytes_per_token()
    mla, trad = P("v3-2.3.1-kv-mla-per-token"), P("v3-2.3.1-kv-traditional-per-token")
    return (f"({P('v3-2.3.1-kv-lora-rank')} + {P('v3-2.3.1-qk-rope-dim')}) x {P('v3-2.3.1-num-layers')} x "
            f"{P('v3-2.3.1-bytes-per-param-fp16')} B = {b:,.0f} B = {b / MB:.4f} MB = {b / MiB:.4f} MiB: the "
            f"{mla:.3f} is decimal MB labelled MiB. The ratio {trad} / {mla:.3f} = "
            f"{P('v3-2.3.1-kv-compression-ratio')}x therefore divides MiB by MB; in bytes it is {t:,.0f} / {b:,.0f} = "
            f"{t / b:.2f}x. §1.2.2 gives {P('v3-1.2.2-kv-mla-per-token')} MiB/token for the same cache.")


recomputes("v3-2.2.3-kv-mla-per-token", "v3-2.3.1-kv-mla-per-token",
           method="article formula (512 + 64) x 61 x 2 B, in MiB", why=_mla_mib_why)(
    lambda: article_mla_kv_bytes_per_token() / MiB)


def _per_user(per_token_id, ctx_id):
    return P(per_token_id) * P(ctx_id) * MiB / GiB


def _per_user_why(per_token_id, ctx_id, exact_bytes_per_token):
    def why():
        mib = P(per_token_id) * P(ctx_id)
        exact = exact_bytes_per_token() * P(ctx_id)
        return (f"{P(per_token_id):.3f} MiB x {P(ctx_id):,} tokens = {mib:,.2f} MiB = {mib * MiB / GiB:.3f} GiB; "
                f"the printed value divides the MiB by {KB:,} instead of {KiB:,}. In bytes, {exact_bytes_per_token():,.0f} B x "
                f"{P(ctx_id):,} = {exact / GiB:.3f} GiB ({exact / GB:.3f} GB).")
    return why


recomputes("v3-2.2.3-kv-per-user", method="article: 0.070 MiB x 2048 tokens, in GiB",
           why=_per_user_why("v3-2.2.3-kv-mla-per-token", "v3-2.2.3-context-length",
                             article_mla_kv_bytes_per_token))(
    lambda: _per_user("v3-2.2.3-kv-mla-per-token", "v3-2.2.3-context-length"))
recomputes("v3-2.3.1-kv-mla-per-user", "v3-2.3.2-kv-mla-per-user", method="article: 0.070 MiB x 2048 tokens, in GiB",
           why=_per_user_why("v3-2.3.1-kv-mla-per-token", "v3-2.3.1-context-length",
                             article_mla_kv_bytes_per_token))(
    lambda: _per_user("v3-2.3.1-kv-mla-per-token", "v3-2.3.1-context-length"))
recomputes("v3-2.3.1-kv-traditional-per-user", method="article: 1.668 MiB x 2048 tokens, in GiB",
           why=_per_user_why("v3-2.3.1-kv-traditional-per-token", "v3-2.3.1-context-length",
                             article_trad_kv_bytes_per_token))(
    lambda: _per_user("v3-2.3.1-kv-traditional-per-token", "v3-2.3.1-context-length"))
recomputes("v3-2.3.1-kv-compression-ratio", method="article: 1.668 / 0.070")(
    lambda: P("v3-2.3.1-kv-traditional-per-token") / P("v3-2.3.1-kv-mla-per-token"))
recomputes("v3-2.3.1-kv-compression-ratio-rounded", method="article: 23.8 rounded")(
    lambda: round(P("v3-2.3.1-kv-compression-ratio")))
recomputes("v3-2.3.1-kv-total-80", method="article: 80 x 0.143 GiB")(
    lambda: P("v3-2.3.1-concurrency") * P("v3-2.3.1-kv-mla-per-user"))
