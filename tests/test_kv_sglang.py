"""SGLang's DeepSeek-V4 pool against SGLang's own boot logs, and the served model's use of it."""

from __future__ import annotations

import math

import pytest

from pdcalc.core.errors import ConfigError
from pdcalc.core.units import GiB, MiB
from pdcalc.layout.memory import budget
from pdcalc.layout.served import spec_from_dict
from pdcalc.hardware.cards import get_card
from pdcalc.model.config import load_config
from pdcalc.model.kv_sglang import (SGLANG_SWA_RATIO, SGLANG_V4_PAGE, SWA_EVICTION_INTERVAL, sglang_v4_pool,
                                    window_tokens_held)
from pdcalc.perf.served import memory_share, served_tables

#: SGLang's log prints GiB to two decimals ("available_bytes=118.93 GB"): half a unit either way.
PRINTED_GIB = 0.005

#: Published SGLang boot logs, each with its launch and what its "DSV4 memory calculation" line prints:
#: (model, swa ratio, speculative, requests per scheduler, page, bytes per full token, available GiB,
#: c128_state_fixed GiB, full_token).
LOGS = {
    # A DeepSeek-V4-Pro study on 8 x MI355X with SGLang 0.5.15.post1 (2026-07-24): TP8, DP attention 8,
    # --swa-full-tokens-ratio 0.15, no speculative decoding, --max-running-requests 512 (64 per DP rank),
    # page 256; "DSV4 memory calculation: bytes_per_full_token=13735.04, available_bytes=118.93 GB,
    # c128_state_fixed=1.01 GB, full_token=9217792", and at the other --mem-fraction-static values of its sweep.
    "v4-pro mi355x 0.80": ("deepseek-v4-pro", 0.15, False, 64, 256, 13735.04, 91.24, 1.01, 7053056),
    "v4-pro mi355x 0.85": ("deepseek-v4-pro", 0.15, False, 64, 256, 13735.04, 105.08, 1.01, 8135424),
    "v4-pro mi355x 0.88": ("deepseek-v4-pro", 0.15, False, 64, 256, 13735.04, 113.39, 1.01, 8784896),
    "v4-pro mi355x 0.90": ("deepseek-v4-pro", 0.15, False, 64, 256, 13735.04, 118.93, 1.01, 9217792),
    "v4-pro mi355x 0.92": ("deepseek-v4-pro", 0.15, False, 64, 256, 13735.04, 124.47, 1.01, 9650944),
    # DeepSeek-V4-Flash serve logs on Ascend NPUs (2026-08-10): TP4, --max-running-requests 4, no speculative
    # decoding, page 128, "Setting swa_full_tokens_ratio to 0.1"; "DSV4 memory calculation:
    # bytes_per_full_token=7705.45, available_bytes=1.57 GB, c128_state_fixed=0.07 GB, full_token=209280".
    "v4-flash npu": ("deepseek-v4-flash", 0.1, False, 4, 128, 7705.45, 1.57, 0.07, 209280),
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_the_pool_is_what_sglang_logs(name):
    model, ratio, spec, requests, page, per_token, avail, fixed, full = LOGS[name]
    pool = sglang_v4_pool(model, swa_ratio=ratio, speculative=spec, max_running_requests=requests)
    assert round(pool.bytes_per_token, 2) == per_token
    assert round(pool.fixed_bytes / GiB, 2) == fixed
    # the printed room is rounded: the logged count lies between the page-rounded counts at its two ends
    low = pool.tokens((avail - PRINTED_GIB) * GiB) // page * page
    high = pool.tokens((avail + PRINTED_GIB) * GiB) // page * page
    assert low <= full <= high
    assert high - low <= 2 * PRINTED_GIB * GiB / per_token + page


def test_speculative_decoding_charges_a_draft_layer_and_longer_rings():
    plain = sglang_v4_pool("deepseek-v4-flash", swa_ratio=0.1, speculative=False, max_running_requests=256)
    spec = sglang_v4_pool("deepseek-v4-flash", swa_ratio=0.1, speculative=True, max_running_requests=256)
    L = plain.layers
    parts = dict(plain.parts, c4_state=2 * plain.parts["c4_state"], indexer_state=2 * plain.parts["indexer_state"])
    assert spec.bytes_per_token == pytest.approx(sum(parts.values()) * (L + 1) / L, rel=1e-12)
    assert spec.fixed_bytes > 1.9 * plain.fixed_bytes        # the 128:1 ring doubles (128 -> 256 per slot)


def test_the_window_pool_is_charged_per_token():
    a = sglang_v4_pool("deepseek-v4-pro", swa_ratio=0.1, speculative=False, max_running_requests=256)
    b = sglang_v4_pool("deepseek-v4-pro", swa_ratio=0.2, speculative=False, max_running_requests=256)
    ratio_part = a.parts["swa"] + a.parts["c4_state"] + a.parts["indexer_state"]
    assert b.bytes_per_token - a.bytes_per_token == pytest.approx(ratio_part, rel=1e-12)
    assert a.fixed_bytes == b.fixed_bytes


def test_other_models_and_ratios_are_refused():
    with pytest.raises(ConfigError, match="model_type"):
        sglang_v4_pool("deepseek-v3", swa_ratio=0.1, speculative=False, max_running_requests=1)
    with pytest.raises(ConfigError, match="swa_full_tokens_ratio"):
        sglang_v4_pool("deepseek-v4-flash", swa_ratio=0.0, speculative=False, max_running_requests=1)


#: The cookbook's long workload (V4-Pro on the H200) and a short one.
LONG = {"prompt": 8192, "output": 1024, "concurrency": 256, "num_prompts": 512}
SHORT = {"prompt": 1000, "output": 100, "concurrency": 1}


def _spec(card="h200", serve=None, *, model="deepseek-v4-pro", engine="sglang", mtp=None, workload=LONG, **roles):
    d = {"model": model, "card": card, "engine": engine, "workload": workload, **roles}
    if serve is not None:
        d["serve"] = serve
    if mtp:
        d["mtp"] = {"draft_tokens": mtp}
    return spec_from_dict(d, "test")


def _sequences(s, name, *, locked):
    """Requests the pool of role ``name`` holds, from the pool, the room and a window pool holding ``locked``
    prompt tokens per request."""
    tables = served_tables(s)
    t = getattr(tables, "decode" if name == "serve" else name)
    role = s.roles()[name]
    room = budget(s.card, t.weights_bytes, **memory_share(s, name, role)).kv_bytes
    ratio = role.swa_full_tokens_ratio or SGLANG_SWA_RATIO
    pool = sglang_v4_pool(s.model, swa_ratio=ratio, speculative=s.mtp is not None, max_running_requests=256)
    held = window_tokens_held(s.model, locked_prompt=locked, emitted=tables.emitted,
                              page=SGLANG_V4_PAGE[get_card(s.card).family])
    return t, pool, room, held


def test_served_sglang_v4_sequences_come_from_the_pool():
    s = _spec(serve={"tp": 8, "memory_utilization": 0.88, "swa_full_tokens_ratio": 0.2}, mtp=1)
    t, pool, room, held = _sequences(s, "serve", locked=s.workload.mean_prompt)
    ctx = s.workload.mean_prompt + s.workload.mean_output
    assert t.kv_seqs == pytest.approx(min(pool.tokens(room) / ctx, 0.2 * pool.tokens(room) / held), rel=1e-12)
    # without the flag, SGLang's DeepSeek-V4 default; the same layout on vLLM keeps vLLM's own layout
    d = _spec(serve={"tp": 8, "memory_utilization": 0.88}, mtp=1)
    t, pool, room, held = _sequences(d, "serve", locked=d.workload.mean_prompt)
    assert t.kv_seqs == pytest.approx(pool.requests(room, context=ctx, window_held=held), rel=1e-12)
    v = served_tables(_spec(serve={"tp": 8, "memory_utilization": 0.88}, engine="vllm", mtp=1)).decode
    assert not math.isclose(v.kv_seqs, t.kv_seqs, rel_tol=0.01)


def test_the_window_pool_bounds_the_requests():
    pool = sglang_v4_pool("deepseek-v4-flash", swa_ratio=0.1, speculative=False, max_running_requests=64)
    room = 40 * GiB
    full = pool.tokens(room)
    # short prompts: the full pool binds; long locked prompts: the window pool, a tenth of it, binds
    assert pool.requests(room, context=2000, window_held=150) == pytest.approx(full / 2000, rel=1e-12)
    assert pool.requests(room, context=9216, window_held=8512) == pytest.approx(0.1 * full / 8512, rel=1e-12)
    # per request: the locked prompt, the larger of the window and the page, half of an eviction interval's tokens
    window = load_config("deepseek-v4-flash").sliding_window
    assert window < 256
    assert window_tokens_held("deepseek-v4-flash", locked_prompt=8192, emitted=1.0, page=256) == \
        8192 + 256 + SWA_EVICTION_INTERVAL / 2
    assert window_tokens_held("deepseek-v4-flash", locked_prompt=0, emitted=3.0, page=64) == \
        window + 3 * SWA_EVICTION_INTERVAL / 2


def test_a_disaggregated_decode_locks_no_prompt():
    """PD decode keeps only the window's tail of a prompt, so long prompts do not fill its window pool."""
    s = _spec(prefill={"tp": 8}, decode={"tp": 8, "memory_utilization": 0.88})
    t, pool, room, held = _sequences(s, "decode", locked=0.0)
    ctx = s.workload.mean_prompt + s.workload.mean_output
    assert t.kv_seqs == pytest.approx(pool.requests(room, context=ctx, window_held=held), rel=1e-12)
    co = _spec(serve={"tp": 8, "memory_utilization": 0.88})
    assert served_tables(co).decode.kv_seqs < 0.5 * t.kv_seqs


@pytest.mark.parametrize("prompt, chunk, locked", [
    (8192, 16384, 8192),             # one chunk: the whole prompt
    (20000, 8192, 20000 - 2 * 8192),  # the last chunk
    (16400, 8192, 16 + 8192),         # a last chunk shorter than the window: the one before it as well
])
def test_the_locked_prompt_is_the_last_chunk_inserted(prompt, chunk, locked):
    s = _spec(serve={"tp": 8, "memory_utilization": 0.88, "max_num_batched_tokens": chunk},
              workload={"prompt": prompt, "output": 1024, "concurrency": 256})
    t, pool, room, held = _sequences(s, "serve", locked=locked)
    ctx = s.workload.mean_prompt + s.workload.mean_output
    assert t.kv_seqs == pytest.approx(pool.requests(room, context=ctx, window_held=held), rel=1e-12)


def test_swa_ratio_is_sglangs_and_v4s_only():
    with pytest.raises(ConfigError, match=r"\[serve\] swa_full_tokens_ratio"):
        _spec(serve={"tp": 8, "swa_full_tokens_ratio": 0.1}, engine="vllm")
    with pytest.raises(ConfigError, match=r"\[serve\] swa_full_tokens_ratio"):
        _spec(serve={"tp": 8, "swa_full_tokens_ratio": 1.5})


# ------------------------------------------------------------------ SGLang's default --mem-fraction-static
def _flash(card, serve=None, **roles):
    return _spec(card, serve, model="deepseek-v4-flash", workload=SHORT, **roles)


def test_sglangs_default_memory_fraction_follows_its_reserve():
    from pdcalc.hardware.cards import get_card
    from pdcalc.perf.engine_limits import sglang_mem_fraction

    mib = get_card("b200").usable_base_bytes / MiB
    # B200, --tp 4: 512 + 1.5 x chunk 16384 + 2 x graph batch 512 + 4 / 8 x 1024 MiB
    s = _flash("b200", {"tp": 4})
    assert sglang_mem_fraction(s, "serve", s.serve) == round(1 - (512 + 1.5 * 16384 + 2 * 512 + 512) / mib, 3)
    # DP attention over 8 ranks: --tp 8, and the graph batch x dp x 3, x 1.5 more above a batch of 300
    s = _flash("b200", {"tp": 1, "dp": 8})
    dp_reserve = 512 + 1.5 * 16384 + 2 * 512 + 1024 + 512 * 8 * 3 + 512 * 8 * 1.5
    assert sglang_mem_fraction(s, "serve", s.serve) == round(1 - dp_reserve / mib, 3)
    # a small chunk falls to the 10 GiB floor of a card above 60 GiB
    s = _flash("b200", {"tp": 4, "max_num_batched_tokens": 2048})
    assert sglang_mem_fraction(s, "serve", s.serve) == round(1 - 10 * 1024 / mib, 3)
    # a disaggregated decode server reserves for its running requests x draft tokens, not a prefill chunk
    s = _flash("b200", prefill={"tp": 4}, decode={"tp": 4, "max_num_seqs": 2048}, mtp=3)
    decode_reserve = 512 + 1.5 * 2048 * 4 + 2 * 512 + 512
    assert sglang_mem_fraction(s, "decode", s.decode) == round(1 - decode_reserve / mib, 3)
    # a prefill server has no decode graph
    assert sglang_mem_fraction(s, "prefill", s.prefill) == round(1 - (512 + 1.5 * 16384 + 512) / mib, 3)
    # SGLang's NPU defaults are not read; vLLM has its own
    a = _spec("ascend-910c-die", {"tp": 16}, model="deepseek-v3", workload=SHORT)
    assert sglang_mem_fraction(a, "serve", a.serve) is None


def test_served_sglang_takes_its_default_fraction_where_the_launch_gives_none():
    from pdcalc.perf.engine_limits import sglang_mem_fraction
    from pdcalc.perf.served import OVERHEAD_BYTES, UTILIZATION

    s = _flash("b200", {"tp": 4})
    share = memory_share(s, "serve", s.serve)
    assert share == {"utilization": sglang_mem_fraction(s, "serve", s.serve), "overhead_bytes": 0.0}
    stated = _flash("b200", {"tp": 4, "memory_utilization": 0.8})
    assert memory_share(stated, "serve", stated.serve) == {"utilization": 0.8, "overhead_bytes": 0.0}
    v = _spec("b200", {"tp": 4}, model="deepseek-v4-flash", engine="vllm", workload=SHORT)
    assert memory_share(v, "serve", v.serve) == {"utilization": UTILIZATION, "overhead_bytes": OVERHEAD_BYTES}


def test_a_pool_whose_request_slots_do_not_fit_is_short_by_them():
    """SGLang sets the 128:1 states of every request slot aside before any token: a room smaller than that does not
    start ("Not enough memory"), and the prediction says by how much it is short."""
    s = _spec(serve={"tp": 8, "memory_utilization": 0.755}, mtp=1)
    t = served_tables(s).decode
    room = budget(s.card, t.weights_bytes, **memory_share(s, "serve", s.serve)).kv_bytes
    pool = sglang_v4_pool(s.model, swa_ratio=SGLANG_SWA_RATIO, speculative=True, max_running_requests=256)
    assert 0 < room < pool.fixed_bytes
    assert not t.fits and t.short_bytes == pytest.approx(pool.fixed_bytes - room, rel=1e-12)
    assert t.kv_seqs == 0.0


def test_predict_says_what_an_sglang_v4_card_is_short_of(tmp_path):
    from cli_harness import run_cli

    path = tmp_path / "short.toml"
    path.write_text('model = "deepseek-v4-pro"\ncard = "h200"\nengine = "sglang"\n[serve]\ntp = 8\n'
                    'memory_utilization = 0.76\n[mtp]\ndraft_tokens = 1\n'
                    '[workload]\nprompt = 8192\noutput = 1024\nconcurrency = 256\n')
    out = run_cli("predict", path)
    assert out.code == 0
    assert "does not fit" in out.out and "SGLang's KV reserve for its request slots" in out.out
    plain = tmp_path / "plain.toml"
    plain.write_text(path.read_text().replace('engine = "sglang"', 'engine = "vllm"'))
    other = run_cli("predict", plain)
    assert other.code == 0 and "request slots" not in other.out


def test_without_the_radix_cache_no_prompt_is_locked():
    s = _spec(serve={"tp": 8, "memory_utilization": 0.88, "radix_cache": False})
    t, pool, room, held = _sequences(s, "serve", locked=0.0)
    ctx = s.workload.mean_prompt + s.workload.mean_output
    assert t.kv_seqs == pytest.approx(pool.requests(room, context=ctx, window_held=held), rel=1e-12)
    assert t.kv_seqs > 2 * served_tables(_spec(serve={"tp": 8, "memory_utilization": 0.88})).decode.kv_seqs
    with pytest.raises(ConfigError, match=r"\[serve\] radix_cache.*engine is 'vllm'"):
        _spec(serve={"tp": 8, "radix_cache": False}, engine="vllm")
    with pytest.raises(ConfigError, match=r"\[serve\] radix_cache.*true or false"):
        _spec(serve={"tp": 8, "radix_cache": "false"})
