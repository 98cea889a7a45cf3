"""One quantity, one number: a value glued into the prose of several chapters is the same on each, and the key
figures the landing page states are the ones the chapters that derive them state."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
# Glue names that several chapters use for a quantity of their own (each page says what it is).
PAGE_LOCAL = {"tally", "ctx", "card_label", "quant", "p_log_phrase"}


def _glued() -> dict[str, dict[str, str]]:
    """name -> {chapter: glued text} over the committed chapters."""
    out: dict[str, dict[str, str]] = {}
    for nb in sorted(BOOK.glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            for o in cell.get("outputs", []):
                sc = o.get("metadata", {}).get("scrapbook")
                if sc:
                    pre = sc.get("mime_prefix", "")
                    data = o["data"]
                    text = data.get(pre + "text/markdown", data.get(pre + "text/html", data.get(pre + "text/plain")))
                    out.setdefault(sc["name"], {})[nb.stem] = text
    return out


GLUED = _glued()


def _chapter_text(stem: str) -> str:
    """Every output of a committed chapter as text (tags stripped)."""
    cells = json.loads((BOOK / f"{stem}.ipynb").read_text())["cells"]
    raw = " ".join(json.dumps(o.get("data", {}), ensure_ascii=False) for c in cells for o in c.get("outputs", []))
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


@pytest.mark.parametrize("name", sorted(n for n, pages in GLUED.items() if len(pages) > 1 and n not in PAGE_LOCAL))
def test_a_name_glued_on_several_chapters_has_one_value(name):
    assert len(set(GLUED[name].values())) == 1, GLUED[name]


def test_page_local_names_are_still_used_on_several_chapters():
    """A stale entry would exempt a name that no longer needs it."""
    assert all(len(GLUED.get(n, {})) > 1 for n in PAGE_LOCAL)


def _glued_float(stem: str, name: str) -> float:
    return float(GLUED[name][stem])


def test_the_v4_kv_cache_is_stated_once():
    """The landing page's real KV cache is the KV chapter's slope and fixed part, through one phrase."""
    from pdcalc.audit.errata import v4_kv_phrase

    phrase = v4_kv_phrase()
    slope, fixed = _glued_float("kv_memory", "slope_kb"), _glued_float("kv_memory", "fixed_mb")
    assert phrase.startswith(f"{slope:.2f} KB per token plus {fixed:.1f} MB per sequence")
    assert phrase in _chapter_text("intro")


def test_the_v3_tp8_communication_share_is_one_definition():
    """The landing page's TP8 communication share is the consistent-model chapter's, prefill and decode."""
    from pdcalc.audit.errata import v3_tp8_comm_share

    intro = _chapter_text("intro")
    for phase, key in (("prefill", "pf_share_8"), ("decode", "dc_share_8")):
        share = v3_tp8_comm_share(phase)
        assert round(share) == round(_glued_float("v3_throughput", key))
    assert f"{v3_tp8_comm_share('prefill'):.0f}% of a layer's time in prefill" in intro
