import pytest

from pdcalc.core import units
from pdcalc.core.errors import UnknownNameError


def test_gb_and_gib_are_different_units():
    assert units.GB == 10**9
    assert units.GiB == 2**30
    # a "64 GB" card holds 64 GiB: 68.72 GB
    assert units.gb(64 * units.GiB) == pytest.approx(68.719476736, abs=1e-12)


def test_sub_byte_dtypes_are_fractions_not_zero():
    assert units.dtype_bytes("fp4") == 0.5
    assert units.dtype_bytes("int4") == 0.5
    assert units.dtype_bytes("fp8") == 1.0
    assert units.dtype_bytes("bf16") == 2.0


def test_unknown_dtype_lists_known():
    with pytest.raises(UnknownNameError, match="known: .*bf16"):
        units.dtype_bytes("fp3")


def test_format_keeps_unit_explicit():
    assert units.fmt_bytes(64 * units.GiB, "GiB") == "64.00 GiB"
    assert units.fmt_bytes(64 * units.GiB, "GB") == "68.72 GB"
    assert units.fmt_params(284_334_567_511) == "284.33B"


@pytest.mark.parametrize("unit", list(units.BYTE_UNITS))
def test_round_trip(unit):
    assert units.to_unit(units.from_unit(3.5, unit), unit) == pytest.approx(3.5, rel=1e-15)


def test_unknown_name_lists_all_or_the_closest():
    from pdcalc.core.errors import UnknownNameError

    few = UnknownNameError("card", "h900", ["h800", "h20", "h200"])
    assert str(few) == "unknown card 'h900'; known: h20, h200, h800"
    many = UnknownNameError("claim", "v4-6.3-b-totl", [f"v4-6.3-{k}" for k in ("b-total", "a-total")]
                            + [f"x-{i}" for i in range(40)])
    assert "42 known; closest: v4-6.3-b-total" in str(many) and "x-39" not in str(many)
