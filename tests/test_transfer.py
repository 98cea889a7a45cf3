import numpy as np
import pytest

from pdcalc.core.errors import LayoutError, UnknownNameError
from pdcalc.model.kv_cache import kv_bytes
from pdcalc.perf import transfer
from pdcalc.perf.transfer import Measurement, exposed_seconds, fit_link, link, measurement, request_bytes

# Qwen3-8B config.json: num_hidden_layers 36, num_key_value_heads 8, head_dim 128; K and V in BF16.
QWEN3_8B_KV_BYTES_PER_TOKEN = 36 * 8 * 128 * 2 * 2


def test_mooncake_sizes_are_binary_units():
    m = measurement()
    # the 32,768-token row prints "4.50 GB": exactly 32,768 tokens of Qwen3-8B KV in GiB
    assert m.kv_bytes[-1] == 32768 * QWEN3_8B_KV_BYTES_PER_TOKEN
    assert m.kv_bytes[-1] == 4.5 * 2**30
    # printed bandwidth 142.25 "GB/s" is GiB/s: 4.50 GiB / 31.65 ms
    assert m.frame()["bandwidth_gib_s"].iloc[-1] == pytest.approx(142.25, abs=0.1)


def test_fit_recovers_a_synthetic_link_exactly():
    b = np.array([1e6, 1e7, 1e8, 1e9])
    m = Measurement(name="s", label="s", source="synthetic", line_rate_bytes_per_s=2e11, nics=1,
                    prompt_tokens=np.arange(4), kv_bytes=b, transfer_s=1e-3 + b / 1e11)
    f = fit_link(m)
    assert f.fixed_s == pytest.approx(1e-3, rel=1e-9)
    assert f.bandwidth_bytes_per_s == pytest.approx(1e11, rel=1e-9)
    assert f.efficiency == pytest.approx(0.5, rel=1e-9)


def test_fit_to_mooncake_is_close_to_every_point():
    m, f = measurement(), fit_link()
    pred = f.seconds(m.kv_bytes)
    assert np.all(np.abs(pred / m.transfer_s - 1) < 0.08)
    assert 0 < f.efficiency < 1
    assert f.fixed_s > 0


def test_scaled_link_keeps_efficiency_and_fixed_cost():
    f = fit_link()
    one = f.scaled(25e9)
    assert one.bandwidth_bytes_per_s == pytest.approx(f.efficiency * 25e9, rel=1e-12)
    assert one.fixed_s == f.fixed_s
    with pytest.raises(LayoutError, match="no known efficiency"):
        link(18e9).scaled(25e9)


def test_link_seconds_and_errors():
    lk = link(18e9, 0.001)
    assert lk.seconds(18e9) == pytest.approx(1.001)
    np.testing.assert_allclose(lk.seconds([0, 9e9]), [0.001, 0.501])
    with pytest.raises(LayoutError):
        lk.seconds(-1)
    with pytest.raises(LayoutError):
        link(0)
    with pytest.raises(UnknownNameError, match="mooncake-vllm-h800-qwen3-8b"):
        measurement("nope")


def test_layerwise_overlap():
    lk = link(1e9, 0.0)
    full = exposed_seconds(lk, 1e9, 10.0, 40, layerwise=False)
    assert full == pytest.approx(1.0)
    # a long prefill hides all but the last layer's share
    assert exposed_seconds(lk, 1e9, 10.0, 40) == pytest.approx(1.0 / 40)
    # no prefill to hide behind: all of it
    assert exposed_seconds(lk, 1e9, 0.0, 40) == pytest.approx(1.0)
    # partly hidden: t - p (n-1)/n
    assert exposed_seconds(lk, 1e9, 0.5, 2) == pytest.approx(0.75)
    with pytest.raises(LayoutError):
        exposed_seconds(lk, 1e9, 1.0, 0)


def test_request_bytes_are_the_kv_pages():
    assert request_bytes("deepseek-v4-flash", 8000) == kv_bytes("deepseek-v4-flash", 8000).total_bytes
    assert transfer.request_bytes("deepseek-v3", 4096, "vllm") == kv_bytes("deepseek-v3", 4096, "vllm").total_bytes


def test_bandwidth_points_efficiency():
    df = transfer.bandwidth_points()
    assert (df.efficiency == df.bandwidth_bytes_per_s / df.line_rate_bytes_per_s).all()
    assert ((df.efficiency > 0) & (df.efficiency <= 1)).all()
    with pytest.raises(UnknownNameError, match="mooncake-te-readme"):
        transfer.bandwidth_points("mooncake-vllm-h800-qwen3-8b")
