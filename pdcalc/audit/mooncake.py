"""Recomputations for the V4 article's Mooncake KV transfer (§7.2): its constant 44 KB per token
(1 KB = 1000 B) over its stated 18 GB/s, no fixed cost."""

from __future__ import annotations

from pdcalc.audit.budgets import kb_per_token
from pdcalc.audit.registry import printed_value, recomputes, registered_by
from pdcalc.core.units import GB, MB
from pdcalc.model.kv_cache import article_kv_bytes


def article_transfer_bytes(tokens: int) -> float:
    """The article's KV bytes of a prompt of ``tokens`` tokens."""
    return article_kv_bytes(tokens, kb_per_token())


def article_transfer_ms(tokens: int) -> float:
    """The article's transfer time: bytes / 18 GB/s, ms."""
    return article_transfer_bytes(tokens) / (printed_value("v4-7.2-eff-bw") * GB) * 1e3


recomputes("v4-7.2-kv-transfer", method="article: 8000 tokens x 44 KB, MB")(
    lambda: article_transfer_bytes(printed_value("v4-7.2-input-tokens")) / MB)
recomputes("v4-7.2-latency-8k", method="article: 352 MB / 18 GB/s, ms")(
    lambda: article_transfer_ms(printed_value("v4-7.2-input-tokens")))


def _k128():
    return printed_value("v4-7.2-ctx-128k")


def _why_128k():
    k = _k128() // 1024
    kb = kb_per_token()
    return (f"{k}K = {_k128():,} tokens x {kb:g} KB = {article_transfer_bytes(_k128()) / GB:.2f} GB; the printed "
            f"{printed_value('v4-7.2-kv-transfer-128k'):g} GB is {k * 1000:,} x {kb:g} KB = "
            f"{article_transfer_bytes(k * 1000) / GB:.2f} GB ({k}K read as {k * 1000:,}).")


recomputes("v4-7.2-kv-transfer-128k", method="article: 128K tokens x 44 KB, GB", why=_why_128k)(
    lambda: article_transfer_bytes(_k128()) / GB)
recomputes("v4-7.2-latency-128k", method="article: 128K x 44 KB / 18 GB/s, ms",
           why=lambda: f"{article_transfer_bytes(_k128()) / GB:.2f} GB / {printed_value('v4-7.2-eff-bw'):g} GB/s = "
                       f"{article_transfer_ms(_k128()):.0f} ms; the printed ~{printed_value('v4-7.2-latency-128k'):g} "
                       f"ms follows the {printed_value('v4-7.2-kv-transfer-128k'):g} GB that reads {_k128() // 1024}K "
                       f"as {_k128() // 1024 * 1000:,} tokens.")(lambda: article_transfer_ms(_k128()))

#: The article sections this chapter covers (exact section names, per article).
SECTIONS = {"v4": ("7.1", "7.2")}
#: The claims this module recomputes.
CLAIM_IDS = registered_by(__name__)
