"""KV cache transfer from a prefill (P) card to a decode (D) card.

A request's KV cache moves once, after (or while) its prompt is prefilled. Its time is a fixed cost per
transfer plus the bytes over the effective bandwidth:

.. math:: t(B) = t_0 + \\frac{B}{\\eta \\, R}

with ``R`` the line rate of the links the request's cards use, ``eta`` the share of it a transfer
achieves and ``t_0`` the fixed cost (handshake, descriptors, completion). Both ``t_0`` and ``eta`` are
fitted to published measurements (:func:`fit_link`), relative least squares over all points.

With layer-wise transfer (each layer's KV is sent as soon as the layer is done) only the part that
outlasts the prefill is exposed to the time to first token:

.. math:: t_\\text{exposed} = t_0 + \\max\\Big(\\frac{t_x}{n},\\; t_x - t_p \\, \\frac{n - 1}{n}\\Big)

for ``n`` layers, transfer ``t_x = B / (eta R)`` and prefill ``t_p``: the last layer's share always
waits; earlier layers hide behind the remaining compute if the link keeps up.

Sources: ``pdcalc/data/transfer.toml`` (Mooncake's vLLM PD benchmark); the bytes of a request come
from :func:`pdcalc.model.kv_cache.kv_bytes`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np

from pdcalc.core.errors import ConfigError, LayoutError, UnknownNameError
from pdcalc.core.units import MiB
from pdcalc.model.config import ModelConfig
from pdcalc.model.kv_cache import kv_bytes

_SIZE_UNITS = {"MiB": MiB, "MB": 10**6}


@dataclass(frozen=True)
class Measurement:
    """Published KV-transfer measurements of one setup."""

    name: str
    label: str
    source: str
    line_rate_bytes_per_s: float
    nics: int
    prompt_tokens: np.ndarray
    kv_bytes: np.ndarray
    transfer_s: np.ndarray
    ttft_s: np.ndarray | None = None

    def frame(self):
        import pandas as pd

        df = pd.DataFrame({"prompt_tokens": self.prompt_tokens, "kv_bytes": self.kv_bytes,
                           "transfer_ms": self.transfer_s * 1e3})
        if self.ttft_s is not None:
            df["ttft_ms"] = self.ttft_s * 1e3
            df["transfer_share_of_ttft"] = self.transfer_s / self.ttft_s
        df["bandwidth_gib_s"] = self.kv_bytes / self.transfer_s / 2**30
        return df


@cache
def _raw() -> dict:
    with resources.files("pdcalc").joinpath("data", "transfer.toml").open("rb") as fh:
        return tomllib.load(fh)


def measurement(name: str = "mooncake-vllm-h800-qwen3-8b") -> Measurement:
    """A published KV-transfer measurement set by name."""
    data = _raw()
    if name not in data:
        raise UnknownNameError("transfer measurement", name, data)
    d = data[name]
    where = "pdcalc/data/transfer.toml"
    unit = d.get("size_unit")
    if unit not in _SIZE_UNITS:
        raise ConfigError(where, f"{name}.size_unit", f"must be one of {sorted(_SIZE_UNITS)}, got {unit!r}")
    n = len(d["prompt_tokens"])
    for key in ("kv_size", "transfer_ms"):
        if len(d[key]) != n:
            raise ConfigError(where, f"{name}.{key}", f"has {len(d[key])} values for {n} prompt lengths")
    return Measurement(
        name=name, label=d["label"], source=d["source"], line_rate_bytes_per_s=float(d["line_rate_bytes_per_s"]),
        nics=int(d["nics"]), prompt_tokens=np.asarray(d["prompt_tokens"]),
        kv_bytes=np.asarray(d["kv_size"], dtype=float) * _SIZE_UNITS[unit],
        transfer_s=np.asarray(d["transfer_ms"], dtype=float) / 1e3,
        ttft_s=np.asarray(d["ttft_ms"], dtype=float) / 1e3 if "ttft_ms" in d else None)


@dataclass(frozen=True)
class Link:
    """A transfer path: fixed cost per transfer and effective bandwidth."""

    fixed_s: float
    bandwidth_bytes_per_s: float
    efficiency: float | None = None       # bandwidth / line rate, when the line rate is known
    source: str = ""

    def seconds(self, nbytes):
        """Transfer time of ``nbytes`` (float or array)."""
        b = np.asarray(nbytes, dtype=float)
        if np.any(b < 0):
            raise LayoutError("bytes to transfer must be non-negative")
        t = self.fixed_s + b / self.bandwidth_bytes_per_s
        return float(t) if t.ndim == 0 else t

    def scaled(self, line_rate_bytes_per_s: float) -> "Link":
        """The same fixed cost and efficiency on links of another line rate (e.g. one 200 Gb/s NIC)."""
        if self.efficiency is None:
            raise LayoutError("this link has no known efficiency to carry over")
        if not line_rate_bytes_per_s > 0:
            raise LayoutError(f"line rate must be positive, got {line_rate_bytes_per_s!r}")
        return Link(self.fixed_s, self.efficiency * line_rate_bytes_per_s, self.efficiency,
                    f"{self.source}, efficiency carried over to {line_rate_bytes_per_s / 1e9:g} GB/s")


def link(bandwidth_bytes_per_s: float, fixed_s: float = 0.0) -> Link:
    """A link of a stated effective bandwidth and fixed cost (e.g. the V4 article's 18 GB/s, no fixed cost)."""
    if not bandwidth_bytes_per_s > 0:
        raise LayoutError(f"bandwidth must be positive, got {bandwidth_bytes_per_s!r}")
    if not fixed_s >= 0:
        raise LayoutError(f"fixed cost must be non-negative, got {fixed_s!r}")
    return Link(fixed_s, float(bandwidth_bytes_per_s), None, "stated")


def fit_link(m: Measurement | str = "mooncake-vllm-h800-qwen3-8b") -> Link:
    """Fit ``t = t0 + B / bw`` to measured (bytes, seconds) points, minimising the relative error.

    .. math:: \\min_{t_0, \\beta} \\sum_i \\Big(\\frac{t_0 + \\beta B_i - t_i}{t_i}\\Big)^2, \\qquad bw = 1/\\beta
    """
    m = measurement(m) if isinstance(m, str) else m
    w = 1.0 / m.transfer_s
    a = np.vstack([np.ones_like(m.kv_bytes), m.kv_bytes]).T * w[:, None]
    (t0, beta), *_ = np.linalg.lstsq(a, m.transfer_s * w, rcond=None)
    bw = 1.0 / beta
    return Link(float(t0), float(bw), float(bw / m.line_rate_bytes_per_s), m.source)


def request_bytes(model: str | Path | ModelConfig, prompt_tokens, engine: str = "vllm-ascend", *,
                  include_mtp: bool = True, block_size: int | None = None):
    """Bytes of one request's KV cache after prefill: what P sends to D (whole pages, all layer kinds).

    Source: :func:`pdcalc.model.kv_cache.kv_bytes`.
    """
    return kv_bytes(model, prompt_tokens, engine, include_mtp=include_mtp, block_size=block_size).total_bytes


def exposed_seconds(lnk: Link, nbytes, prefill_s, n_layers: int, *, layerwise: bool = True):
    """Transfer time the first token waits for: all of it, or with layer-wise sending only what
    outlasts the prefill (module docstring)."""
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise LayoutError(f"n_layers must be an integer >= 1, got {n_layers!r}")
    t = np.asarray(lnk.seconds(nbytes), dtype=float) - lnk.fixed_s
    p = np.asarray(prefill_s, dtype=float)
    if np.any(p < 0):
        raise LayoutError("prefill time must be non-negative")
    if layerwise:
        t = np.maximum(t / n_layers, t - p * (n_layers - 1) / n_layers)
    out = lnk.fixed_s + t
    return float(out) if out.ndim == 0 else out


def bandwidth_points(name: str = "mooncake-te-readme"):
    """Published peak bandwidths with their line rates, and the efficiency each implies.

    Returns a DataFrame ``network, line_rate_bytes_per_s, bandwidth_bytes_per_s, efficiency``.
    """
    import pandas as pd

    data = _raw()
    if name not in data or "bandwidth_bytes_per_s" not in data[name]:
        raise UnknownNameError("bandwidth measurement", name,
                               [k for k, v in data.items() if "bandwidth_bytes_per_s" in v])
    d = data[name]
    df = pd.DataFrame({"network": d["networks"], "line_rate_bytes_per_s": d["line_rate_bytes_per_s"],
                       "bandwidth_bytes_per_s": d["bandwidth_bytes_per_s"]})
    df["efficiency"] = df["bandwidth_bytes_per_s"] / df["line_rate_bytes_per_s"]
    return df
