"""The precision policy (pdcalc.core.precision), and a scan of every committed chapter output against it.

The scan reads only the committed notebooks, so it gives the same answer on every machine: a float
stored at full precision (the kind whose last digits change with the CPU's BLAS kernel) fails here
even on the machine that wrote it.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdcalc.core.precision import (MAX_SIG, SIG, round_decimals, round_sig, rounded, significant_figures, tidy,
                                   too_precise)

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((REPO / "book").glob("*.ipynb"))
GLUE_PREFIX = "application/papermill.record/"


# -- the policy -----------------------------------------------------------------------------------
@pytest.mark.parametrize("token, sig", [
    ("0.3800165107965131", 16), ("0.38001651079651294", 17), ("5.097292", 7), ("0.3800", 2), ("47.4", 3),
    ("5505024.0", 7), ("284000000000.0", 3), ("2.097152e+07", 7), ("1.5e-05", 2), ("-0.0012", 2), ("100.", 1),
])
def test_significant_figures(token, sig):
    assert significant_figures(token) == sig


def test_too_precise_finds_full_precision_floats_and_nothing_else():
    text = ('glued 0.38001651079651294 and 5.097292, spec {"x": 2.097152e+07, "y": 5505024.0}; '
            'fine: 0.38, 6218.5, 68719476736 (an integer), vega-lite 6.1.0, v5.20.1, arXiv 2506.12708, '
            'arXiv:2505.09343, #3f2a9c, data-3f2a9c1d0e, 2026-12-01, 1.6e12')
    assert too_precise(text) == ["0.38001651079651294", "5.097292", "2.097152e+07", "5505024.0"]


def test_round_sig():
    assert round_sig(0.3800165107965131) == 0.38
    assert round_sig(0.38001651079651294) == round_sig(0.3800165107965131)  # the two CPUs' results agree
    assert round_sig(6218.5, 6) == 6218.5 and round_sig(41.494145937263966, 4) == 41.49
    assert round_sig(12345) == 12345 and isinstance(round_sig(np.int64(7)), int)
    assert isinstance(round_sig(np.float64(1.23456789)), float)
    assert math.isnan(round_sig(math.nan)) and round_sig(math.inf) == math.inf and round_sig(None) is None
    assert round_sig([1.23456, (2.34567, "x")], 3) == [1.23, (2.35, "x")]
    arr = round_sig(np.array([[1.23456, 0.0], [np.inf, -9.87654e-9]]), 2)
    assert arr.tolist() == [[1.2, 0.0], [math.inf, -9.9e-09]]
    with pytest.raises(ValueError):
        round_sig(1.0, 0)


def test_round_decimals_is_what_a_format_shows():
    for v in (2.675, 1.005, 0.125, 1234.5678, -0.0049):
        assert f"{round_decimals(v, 2):.2f}" == f"{v:.2f}"
        assert round_decimals(v, 2) == float(f"{v:.2f}")


def test_tidy_rounds_floats_and_makes_whole_numbers_integers():
    df = pd.DataFrame({"bytes": [5505024.0, 30845440.0], "ms": [0.3800165107965131, 12.345678],
                       "name": ["a", "b"], "exact": [1.23456789, 2.0]},
                      index=pd.Index([0.5, 1.23456789], name="x"))
    out = tidy(df, exact=("exact",))
    assert out["bytes"].dtype == np.int64 and out["bytes"].tolist() == [5505024, 30845440]
    assert out["ms"].tolist() == [0.38, 12.35]
    assert out["exact"].tolist() == [1.23456789, 2.0]
    assert out.index.tolist() == [0.5, 1.235]
    assert df["ms"].iloc[0] == 0.3800165107965131  # the input is not changed
    assert too_precise(out.drop(columns="exact").to_html()) == []


def test_rounded():
    assert rounded(0.3800165107965131) == 0.380017          # MAX_SIG by default
    assert rounded(0.3800165107965131, decimals=2) == 0.38
    assert rounded(123.456, sig=2) == 120.0
    assert rounded("text") == "text" and rounded(7) == 7
    assert MAX_SIG >= SIG
    with pytest.raises(ValueError):
        rounded(1.0, sig=2, decimals=2)


# -- the committed outputs ------------------------------------------------------------------------
def _outputs(path: Path):
    """(cell index, what, text) of every stored output of a notebook, chart specs and glue records included."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if "text" in out:
                yield i, "stream", "".join(out["text"])
            for mime, data in out.get("data", {}).items():
                text = "".join(data) if isinstance(data, list) else data if isinstance(data, str) else json.dumps(data)
                yield i, mime, text


def test_the_scan_reads_every_chapter_and_its_glue_and_charts():
    assert len(CHAPTERS) >= 9
    mimes = {mime for path in CHAPTERS for _, mime, _ in _outputs(path)}
    assert {"text/html", "text/plain", GLUE_PREFIX + "text/plain"} <= mimes
    assert any("vega" in text for path in CHAPTERS for _, _, text in _outputs(path)), "no chart spec found"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_committed_output_carries_more_digits_than_the_policy(path):
    bad = [f"cell {i} ({mime}): {', '.join(found[:3])}" for i, mime, text in _outputs(path)
           if (found := too_precise(text))]
    assert not bad, (f"{path.name}: floats with more than {MAX_SIG} significant figures (round them with "
                     f"pdcalc.core.precision before showing, glueing or charting):\n" + "\n".join(bad[:20]))


_GLUE_REF = re.compile(r"\{glue(?::text)?\}`([^`:]+):([^`]+)`")


def _glued(nb: dict) -> dict[str, str]:
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            text = o.get("data", {}).get(GLUE_PREFIX + "text/plain")
            if name and text is not None:
                out[name] = "".join(text) if isinstance(text, list) else text
    return out


def _display_places(spec: str, value: Decimal) -> int | None:
    """Decimal places a format spec rounds ``value`` to (``None``: it does not round)."""
    m = re.fullmatch(r"[,_]?\.(\d+)([fF%eEgG])", spec)
    if not m:
        return None
    n, kind = int(m.group(1)), m.group(2).lower()
    if kind == "f":
        return n
    if kind == "%":
        return n + 2
    exponent = value.adjusted() if value else 0
    return (max(n, 1) if kind == "g" else n + 1) - 1 - exponent


def shown_as_if_rounded_once(stored: str, spec: str) -> bool:
    """Whether showing the stored (already rounded) value with ``spec`` gives what rounding the
    unrounded value once would. Rounding to k places, then to fewer, differs from rounding once only
    when the first rounding lands exactly on a tie of the second (0.1249 -> 0.125 -> 0.13, not 0.12)."""
    value = Decimal(stored)
    places = _display_places(spec, value)
    if places is None:
        return True
    tail = (value * Decimal(10) ** places) % 1
    return abs(tail) != Decimal("0.5")


def test_shown_as_if_rounded_once():
    assert shown_as_if_rounded_once("0.1249", ".2f") and shown_as_if_rounded_once("54.86", ".1f")
    assert not shown_as_if_rounded_once("0.125", ".2f") and not shown_as_if_rounded_once("284.335", ".2f")
    assert not shown_as_if_rounded_once("0.0125", ".1%") and shown_as_if_rounded_once("0.0126", ".1%")
    assert not shown_as_if_rounded_once("1235", ".3g") and shown_as_if_rounded_once("1234", ".3g")
    assert shown_as_if_rounded_once("0.125", ".3f") and shown_as_if_rounded_once("7", ",")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_formatted_glue_reference_shows_the_value_rounded_once(path):
    # Glued values are stored rounded (MAX_SIG figures unless the chapter says otherwise) and the prose
    # may show them with fewer digits; that second rounding must never land on a tie.
    nb = json.loads(path.read_text(encoding="utf-8"))
    glued = _glued(nb)
    refs = [m.groups() for c in nb["cells"] if c["cell_type"] == "markdown"
            for m in _GLUE_REF.finditer("".join(c["source"]))]
    assert all(name in glued for name, _ in refs), [n for n, _ in refs if n not in glued]
    bad = []
    for name, spec in refs:
        try:
            value = float(glued[name])
        except ValueError:
            continue  # text or a table
        if math.isfinite(value) and not shown_as_if_rounded_once(repr(value), spec):
            bad.append(f"{name}:{spec} stores {glued[name]}, which {spec} rounds a second time on a tie")
    assert not bad, (f"{path.name}: glue these at the precision shown (decimals=/sig= in glue):\n"
                     + "\n".join(bad))
