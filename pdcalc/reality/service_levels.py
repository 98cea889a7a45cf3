"""Published latency service levels (``pdcalc/data/service_levels.toml``): a TTFT and a TPOT limit, the
percentile they hold at, and the lines of the source they are read from. The planner takes one as its default
targets (:func:`pdcalc.plan.workload.default_targets`).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pdcalc.core.errors import UnknownNameError

#: The level the planner applies where a workload gives no target.
DEFAULT_LEVEL = "mlperf-deepseek-r1-server"


@dataclass(frozen=True)
class ServiceLevel:
    """One published service level: limits in seconds at a percentile, with its source."""

    id: str
    name: str
    model: str
    ttft_s: float
    tpot_s: float
    percentile: float
    quotes: tuple[str, ...]
    source: str
    url: str

    def quoted(self, key: str) -> float:
        """The number a quoted line sets for ``key`` (``ttft_latency``, ``tpot_latency``,
        ``target_latency_percentile``)."""
        for q in self.quotes:
            m = re.search(rf"{re.escape(key)}\s*=\s*([0-9.]+)", q)
            if m:
                return float(m.group(1))
        raise KeyError(f"{self.id}: no quoted line sets {key}")

    def stated(self, which: str) -> str:
        """``"TPOT at most 80 ms at the 99th percentile (MLPerf ...)"``."""
        v = {"TTFT": self.ttft_s, "TPOT": self.tpot_s}[which]
        return f"{which} at most {v * 1e3:,.0f} ms at the {self.percentile:g}th percentile ({self.name})"


@cache
def levels() -> dict[str, ServiceLevel]:
    with resources.files("pdcalc").joinpath("data", "service_levels.toml").open("rb") as f:
        data = tomllib.load(f)
    return {k: ServiceLevel(id=k, name=v["name"], model=v["model"], ttft_s=v["ttft_ms"] / 1e3,
                            tpot_s=v["tpot_ms"] / 1e3, percentile=float(v["percentile"]), quotes=tuple(v["quotes"]),
                            source=v["source"], url=v["url"]) for k, v in data.items()}


def get(level: str = DEFAULT_LEVEL) -> ServiceLevel:
    try:
        return levels()[level]
    except KeyError:
        raise UnknownNameError("service level", level, tuple(levels())) from None
