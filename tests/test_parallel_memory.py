import pytest

from pdcalc.core.errors import LayoutError
from pdcalc.core.units import GiB
from pdcalc.layout.memory import budget, card_weights
from pdcalc.layout.parallel import allreduce_bytes, dispatch, expected_remote_cards, place_experts
from pdcalc.model.quant import weight_bytes


@pytest.mark.parametrize("ep,redundant", [(1, 0), (8, 0), (12, 0), (32, 0), (32, 32), (256, 0), (7, 3)])
def test_placement_covers_every_expert_and_balances(ep, redundant):
    p = place_experts(256, ep, redundant)
    held = [e for k in range(ep) for e in p.held(k)]
    assert sorted(set(held)) == list(range(256))
    assert len(held) == 256 + redundant
    assert p.experts_per_card.max() - p.experts_per_card.min() <= 1


def test_article_layouts():
    assert place_experts(256, 8).held(1) == tuple(range(32, 64))
    assert place_experts(256, 32).held(31) == tuple(range(248, 256))
    assert place_experts(256, 8).cards[1] == tuple(range(32, 64))       # the per-card view indexes the same
    assert place_experts(256, 32).first_last(31) == (248, 255)


def _reference_placement(n_experts, ep_size, redundant):
    """The straightforward placement: every slot's expert id listed, cut into contiguous per-card blocks."""
    logical = list(range(n_experts)) + list(range(redundant))
    base, extra = divmod(n_experts + redundant, ep_size)
    cards, start = [], 0
    for k in range(ep_size):
        n = base + (1 if k < extra else 0)
        cards.append(tuple(logical[start:start + n]))
        start += n
    return cards


def _reference_ranges(cards):
    return [f"{c[0]} ~ {c[-1]}" if len(c) > 1 else str(c[0]) for c in cards]


_CASES = [(e, n, r) for e in (1, 2, 3, 5, 7, 8, 16, 31, 64, 97, 256) for r in sorted({0, 1, e // 3, e // 2, e})
          for n in sorted({1, 2, 3, 5, 7, 8, 13, 32, (e + r) // 2 or 1, e + r - 1 or 1, e + r}) if n <= e + r]


@pytest.mark.parametrize("n_experts,ep,redundant", _CASES)
def test_placement_equals_the_reference(n_experts, ep, redundant):
    ref = _reference_placement(n_experts, ep, redundant)
    p = place_experts(n_experts, ep, redundant)
    assert [p.held(k) for k in range(ep)] == ref
    assert list(p.cards) == ref and p.cards[-1] == ref[-1] and len(p.cards) == ep
    assert [p.first_last(k) for k in range(ep)] == [(c[0], c[-1]) for c in ref]
    assert p.experts_per_card.tolist() == [len(c) for c in ref]
    assert p.max_experts_per_card == max(len(c) for c in ref)
    assert p.ranges() == _reference_ranges(ref)
    for k in range(ep):
        blocks = p.blocks(k)
        assert 1 <= len(blocks) <= 2 and all(len(b) and b.step == 1 for b in blocks)
        assert tuple(e for b in blocks for e in b) == ref[k]
    for expert in range(n_experts):
        assert p.card_of(expert) == next(k for k, c in enumerate(ref) if expert in c)


def test_placement_is_arithmetic_for_huge_expert_counts():
    # 2**32 experts over 8 cards: nothing is listed per expert
    p = place_experts(2**32, 8, 2**31)
    assert p.max_experts_per_card == (2**32 + 2**31) // 8
    assert p.card_of(2**32 - 1) == 5 and p.card_of(0) == 0
    assert p.first_last(7) == (2**31 - (2**32 + 2**31) // 8, 2**31 - 1)
    assert p.blocks(5) == (range(5 * 805306368, 2**32), range(0, 6 * 805306368 - 2**32))


@pytest.mark.parametrize("call,match", [
    (lambda p: p.card_of(256), "expert 256 is not placed"),
    (lambda p: p.card_of(-1), "expert -1 is not placed"),
    (lambda p: p.card_of(1.5), "expert 1.5 is not placed"),
    (lambda p: p.held(8), "card 8 is outside the EP group"),
    (lambda p: p.first_last(-1), "card -1 is outside the EP group"),
])
def test_placement_lookups_outside_the_group_say_so(call, match):
    with pytest.raises(LayoutError, match=match):
        call(place_experts(256, 8))


@pytest.mark.parametrize("args,match", [((2**32 + 1, 8), "n_experts must be an integer in 1..4,294,967,296"),
                                        ((256, 2**20 + 1), "ep_size must be an integer in 1..1,048,576")])
def test_placement_bounds(args, match):
    with pytest.raises(LayoutError, match=match):
        place_experts(*args)


@pytest.mark.parametrize("ep,redundant", [(0, 0), (300, 0), (8, -1), (8, 300)])
def test_impossible_layouts_say_why(ep, redundant):
    with pytest.raises(LayoutError):
        place_experts(256, ep, redundant)


def test_dispatch_of_the_article_example():
    # §4.3: a token on card 0 of an EP8 group selects experts 10, 45, 100, 200, 230, 250
    d = dispatch(place_experts(256, 8), [10, 45, 100, 200, 230, 250], 0, 4096)
    assert d.expert_cards == (0, 1, 3, 6, 7, 7)    # expert 10 is local: 10 // 32 == 0
    assert d.local_experts == 1 and d.copies_sent == 5 and d.cards_reached == 4


def test_expected_remote_cards_bounds():
    assert expected_remote_cards(256, 1, 6) == 0
    assert 0 < expected_remote_cards(256, 8, 6) < 6
    assert expected_remote_cards(256, 8, 6) < expected_remote_cards(256, 32, 6)


def test_allreduce():
    assert allreduce_bytes(100, 1) == 0
    assert allreduce_bytes(100, 4) == pytest.approx(150)


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v4-flash"])
def test_ep1_card_holds_the_whole_model(model):
    w = card_weights(model, "w8a8", ep=1, mtp=True)
    assert w.total_bytes == pytest.approx(weight_bytes(model, "w8a8", part="all"), rel=1e-12)


@pytest.mark.parametrize("ep", [8, 32])
def test_sum_over_cards_of_expert_bytes_is_the_expert_total(ep):
    w = card_weights("deepseek-v4-flash", "w8a8", ep=ep)
    total = weight_bytes("deepseek-v4-flash", "w8a8", category="routed_experts")
    assert w.class_i_bytes * ep == pytest.approx(total, rel=1e-12)


def test_parts_add_up_and_tp_splits():
    w1 = card_weights("deepseek-v3", "fp8", ep=8, tp=1)
    w8 = card_weights("deepseek-v3", "fp8", ep=8, tp=8)
    assert sum(w1.by_category.values()) == pytest.approx(w1.total_bytes)
    assert w8.class_ii_bytes < w1.class_ii_bytes
    assert w8.class_i_bytes == w1.class_i_bytes


def test_budget_is_a_result_when_it_does_not_fit():
    w = card_weights("deepseek-v4-flash", "w8a8", ep=4)
    b = budget("ascend-910b2", w.total_bytes)
    assert not b.fits and b.verdict().startswith("does not fit, short by")
    assert b.usable_bytes == pytest.approx(0.9 * 60.96 * GiB, rel=1e-4)


def test_budget_rejects_bad_utilization():
    with pytest.raises(LayoutError):
        budget("ascend-910b2", 0, utilization=1.5)


def test_memory_plan_parts_add_up():
    from pdcalc.layout.memory import memory_plan

    p = memory_plan("D", usable_bytes=57.6e9, capacity_bytes=64e9, weights=14.6e9, kv_cache=42.2e9,
                    activations=2e9, framework=2e9)
    assert p.total_bytes == pytest.approx(60.8e9, rel=1e-12)
    assert p.free_bytes == pytest.approx(-3.2e9, rel=1e-9)
    assert not p.fits
    assert p.verdict(1e9, "GB") == "does not fit, short by 3.20 GB"
    shares = p.shares()
    assert sum(shares.values()) == pytest.approx(57.6 / 64, rel=1e-12)
    ok = memory_plan("P", usable_bytes=57.6e9, capacity_bytes=64e9, weights=40e9)
    assert ok.fits and ok.verdict(1e9, "GB") == "fits, 17.60 GB to spare"
    with pytest.raises(LayoutError, match="kv_cache"):
        memory_plan("x", usable_bytes=1e9, capacity_bytes=1e9, kv_cache=-1)


def test_ep_sweep_matches_card_weights_and_budget():
    from pdcalc.layout.memory import ep_sweep

    df = ep_sweep("deepseek-v4-flash", "w8a8", "ascend-910b2", [8, 32], activation_bytes=2e9, framework_bytes=1e9)
    for row in df.itertuples():
        w = card_weights("deepseek-v4-flash", "w8a8", ep=row.ep, mtp=True)
        assert row.weights_bytes == w.total_bytes
        assert row.kv_room_bytes == pytest.approx(row.usable_bytes - w.total_bytes - 3e9, rel=1e-12)
    assert df.kv_room_bytes.is_monotonic_increasing       # more cards per group, fewer experts per card
    with pytest.raises(LayoutError):
        ep_sweep("deepseek-v4-flash", "w8a8", "ascend-910b2", [512])


def test_card_plan_is_weights_plus_parts_against_visible_memory():
    from pdcalc.hardware.cards import get_card
    from pdcalc.layout.memory import card_plan

    p = card_plan("D", "deepseek-v4-flash", "w8a8", "ascend-910b2", ep=32, kv_cache_bytes=5e9,
                  activation_bytes=2e9, framework_bytes=2e9)
    w = card_weights("deepseek-v4-flash", "w8a8", ep=32, mtp=True)
    assert p.total_bytes == pytest.approx(w.total_bytes + 9e9, rel=1e-12)
    assert p.usable_bytes == pytest.approx(0.9 * get_card("ascend-910b2").usable_base_bytes, rel=1e-12)
    assert p.capacity_bytes == get_card("ascend-910b2").usable_base_bytes


def test_room_bytes_is_usable_minus_the_other_parts():
    from pdcalc.layout.memory import memory_plan

    p = memory_plan("D", usable_bytes=57.6e9, capacity_bytes=64e9, weights=14e9, kv_cache=40e9, activations=2e9)
    assert p.room_bytes() == pytest.approx(57.6e9 - 14e9 - 2e9, rel=1e-12)
    assert p.room_bytes("weights") == pytest.approx(57.6e9 - 40e9 - 2e9, rel=1e-12)
