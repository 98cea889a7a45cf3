"""Published measurements: numbers that serving engines, papers and operators printed, as data.

Each entry of ``pdcalc/data/measurements.toml`` is one quantity (weight memory per card, KV-cache
memory or capacity, maximum concurrency, KV-transfer bandwidth or time, prefill/decode throughput,
TPOT, TTFT) with the exact text it was read from (``quote``), where to find that text again
(``source``, ``url``) and the conditions it was measured under (model, quantization, card, engine,
parallel layout, memory fraction, context length, workload). Unknown conditions are absent, never
guessed.

The value and unit are kept as printed. Where an engine's own code shows that its printed unit label
is not the unit it computed in (vLLM prints ``bytes / 2**30`` under the label "GB"), the entry says so
in ``unit_means`` and :attr:`Measurement.value_si` uses that unit.

Examples
--------
>>> from pdcalc import measurements
>>> m = measurements.get("vllm-ascend-13439-v4flash-weights-per-card")
>>> m.unit, m.value_si == 47.4 * 2**30
('GiB', True)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from decimal import Decimal, InvalidOperation
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from pdcalc.errors import ConfigError, UnknownNameError, load_toml
from pdcalc.units import BYTE_UNITS

#: Where the packaged registry lives (used in error messages).
DEFAULT_SOURCE = "pdcalc/data/measurements.toml"

#: Byte-rate units: bytes per second per unit.
RATE_UNITS: dict[str, float] = {
    "GB/s": 1e9, "GiB/s": 2.0**30, "MB/s": 1e6, "MiB/s": 2.0**20, "TB/s": 1e12, "Gbps": 1e9 / 8,
}
#: Token-rate units: tokens per second per unit.
TOKEN_RATE_UNITS: dict[str, float] = {"tokens/s": 1.0, "k tokens/s": 1e3}

#: Allowed units for each quantity.
QUANTITY_UNITS: dict[str, frozenset] = {
    "weight_memory_per_card": frozenset(BYTE_UNITS),
    "kv_cache_memory_per_card": frozenset(BYTE_UNITS),
    "kv_cache_tokens_per_card": frozenset({"tokens"}),
    "max_concurrency": frozenset({"x"}),
    "kv_transfer_bandwidth": frozenset(RATE_UNITS),
    "kv_transfer_time": frozenset({"ms"}),
    "prefill_throughput": frozenset(TOKEN_RATE_UNITS),
    "decode_throughput": frozenset(TOKEN_RATE_UNITS),
    "tpot": frozenset({"ms"}),
    "ttft": frozenset({"ms"}),
}
QUANTITIES = tuple(QUANTITY_UNITS)

_REQUIRED = ("id", "quantity", "value", "unit", "scope", "quote", "source")
_OPTIONAL_STR = ("url", "model", "quantization", "card", "engine", "engine_version", "kv_cache_dtype",
                 "workload", "notes", "unit_means")
_OPTIONAL_INT = ("tp", "dp", "ep", "pp", "max_model_len", "block_size")
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_CARD_SLUG = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")
FILTERS = ("model", "quantity", "card", "engine")


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One published number, its exact source text and the conditions it was measured under.

    Attributes
    ----------
    id : str
        Unique slug.
    quantity : str
        One of :data:`QUANTITIES`.
    value : float
        The number as printed, in ``unit``.
    unit : str
        The unit as printed (allowed units depend on ``quantity``, see :data:`QUANTITY_UNITS`).
    scope : str
        What the number is per: "per card", "per node", "per instance", ...
    quote : str
        The exact text at the source; it contains ``value``.
    source : str
        Human-readable locator (repository and path or issue, paper and table, blog post).
    unit_means : str or None
        For byte units only: the unit the engine actually computed in, where its code shows the
        printed label differs (e.g. "GiB" for vLLM's "Loading model weights took ... GB").
    """

    id: str
    quantity: str
    value: float
    unit: str
    scope: str
    quote: str
    source: str
    url: str | None = None
    model: str | None = None
    quantization: str | None = None
    card: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    tp: int | None = None
    dp: int | None = None
    ep: int | None = None
    pp: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    workload: str | None = None
    notes: str | None = None
    unit_means: str | None = None

    @property
    def is_bytes(self) -> bool:
        """Whether the value is an amount of memory."""
        return self.unit in BYTE_UNITS

    @property
    def si_unit(self) -> str:
        """Unit of :attr:`value_si`: "B", "B/s", "tokens/s", or the printed unit when it is kept."""
        if self.unit in BYTE_UNITS:
            return "B"
        if self.unit in RATE_UNITS:
            return "B/s"
        if self.unit in TOKEN_RATE_UNITS:
            return "tokens/s"
        return self.unit

    @property
    def value_si(self) -> float:
        """The value in bytes (memory), bytes/s (bandwidth) or tokens/s (throughput).

        Tokens, ms and "x" (concurrency) are returned as they are. A byte value uses
        ``unit_means`` when the entry gives it, else the printed unit (GB = 10**9 B, GiB = 2**30 B).
        """
        if self.unit in BYTE_UNITS:
            return to_bytes(self)
        if self.unit in RATE_UNITS:
            return self.value * RATE_UNITS[self.unit]
        if self.unit in TOKEN_RATE_UNITS:
            return self.value * TOKEN_RATE_UNITS[self.unit]
        return self.value


def to_bytes(m: Measurement) -> float:
    """Bytes of a memory measurement.

    Parameters
    ----------
    m : Measurement
        A measurement whose unit is one of :data:`pdcalc.units.BYTE_UNITS`.

    Returns
    -------
    float
        ``value`` times the unit: ``unit_means`` when given, else the printed ``unit``.

    Raises
    ------
    ValueError
        If the measurement is not an amount of memory.
    """
    if m.unit not in BYTE_UNITS:
        raise ValueError(f"measurement {m.id!r} is in {m.unit!r}, not a unit of bytes")
    return m.value * BYTE_UNITS[m.unit_means or m.unit]


def number_in_text(value: float, text: str) -> bool:
    """Whether ``text`` prints the number ``value`` (thousands separators and trailing zeros ignored).

    Parameters
    ----------
    value : float
        The number to look for.
    text : str
        Quoted source text, e.g. ``"6,688 tokens/s"`` or ``"~73.7k tokens/s"``.

    Returns
    -------
    bool
    """
    flat = re.sub(r"(?<=\d)[,\u2009\u202f](?=\d{3})", "", text)
    try:
        want = Decimal(repr(float(value)))
    except InvalidOperation:
        return False
    for tok in re.findall(r"\d+(?:\.\d+)?", flat):
        if Decimal(tok) == want:
            return True
    return False


def _entry(raw: dict, source: str, card_names: frozenset) -> Measurement:
    if not isinstance(raw, dict):
        raise ConfigError(source, None, f"each [[measurement]] must be a table, got {raw!r}")
    mid = raw.get("id")
    if not isinstance(mid, str) or not _SLUG.fullmatch(mid):
        raise ConfigError(source, "id", f"entry {mid!r}: expected a lowercase slug (a-z, 0-9, '-')")

    def bad(field: str, message: str) -> ConfigError:
        return ConfigError(source, field, f"entry {mid!r}: {message}")

    known = set(_REQUIRED) | set(_OPTIONAL_STR) | set(_OPTIONAL_INT) | {"gpu_memory_utilization"}
    for key in raw:
        if key not in known:
            raise bad(key, "unknown field")
    for key in _REQUIRED:
        if key not in raw:
            raise bad(key, "missing")
    for key in ("quantity", "unit", "scope", "quote", "source"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise bad(key, f"expected a non-empty string, got {raw[key]!r}")
    for key in _OPTIONAL_STR:
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise bad(key, f"expected a non-empty string, got {raw[key]!r}")
    for key in _OPTIONAL_INT:
        v = raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise bad(key, f"expected a positive integer, got {v!r}")

    quantity = raw["quantity"]
    if quantity not in QUANTITY_UNITS:
        raise bad("quantity", f"{quantity!r} is not one of {', '.join(QUANTITIES)}")
    value = raw["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not value > 0:
        raise bad("value", f"expected a positive number, got {value!r}")
    unit = raw["unit"]
    if unit not in QUANTITY_UNITS[quantity]:
        raise bad("unit", f"{unit!r} is not a unit of {quantity}; use one of "
                          f"{', '.join(sorted(QUANTITY_UNITS[quantity]))}")
    if "unit_means" in raw:
        if unit not in BYTE_UNITS or raw["unit_means"] not in BYTE_UNITS:
            raise bad("unit_means", "only for a byte unit, naming a byte unit "
                                    f"({', '.join(BYTE_UNITS)})")
    if not number_in_text(value, raw["quote"]):
        raise bad("quote", f"the quote does not print the value {value!r}")
    gmu = raw.get("gpu_memory_utilization")
    if gmu is not None and (isinstance(gmu, bool) or not isinstance(gmu, (int, float)) or not 0 < gmu <= 1):
        raise bad("gpu_memory_utilization", f"expected a fraction in (0, 1], got {gmu!r}")
    card = raw.get("card")
    if card is not None and _CARD_SLUG.fullmatch(card) and card not in card_names:
        raise bad("card", f"{card!r} looks like a preset name but is not one; presets: "
                          f"{', '.join(sorted(card_names))} (write other cards as stated, e.g. 'NVIDIA H100')")
    kwargs = {k: raw[k] for k in raw}
    kwargs["value"] = float(value) if isinstance(value, float) else value
    if gmu is not None:
        kwargs["gpu_memory_utilization"] = float(gmu)
    return Measurement(**kwargs)


def _parse(path, source: str) -> tuple[Measurement, ...]:
    from pdcalc.hardware import card_names

    data = load_toml(path, source)
    extra = set(data) - {"measurement"}
    if extra:
        raise ConfigError(source, sorted(extra)[0], "unknown top-level key; expected [[measurement]] tables")
    raws = data.get("measurement", [])
    if not isinstance(raws, list):
        raise ConfigError(source, "measurement", "expected an array of tables ([[measurement]])")
    presets = frozenset(card_names())
    out, seen = [], set()
    for raw in raws:
        m = _entry(raw, source, presets)
        if m.id in seen:
            raise ConfigError(source, "id", f"entry {m.id!r}: duplicate id")
        seen.add(m.id)
        out.append(m)
    return tuple(out)


@cache
def _packaged() -> tuple[Measurement, ...]:
    return _parse(resources.files("pdcalc").joinpath("data", "measurements.toml"), DEFAULT_SOURCE)


def load(path: str | Path | None = None) -> list[Measurement]:
    """Read and validate a measurements file.

    Parameters
    ----------
    path : str or Path, optional
        A TOML file of ``[[measurement]]`` tables; the packaged registry when omitted.

    Returns
    -------
    list of Measurement
        In file order.

    Raises
    ------
    ConfigError
        If the file is missing or not TOML, or an entry is malformed; the error names the file, the
        field and the entry id.
    """
    if path is None:
        return list(_packaged())
    return list(_parse(Path(path), str(path)))


def ids(path: str | Path | None = None) -> list[str]:
    """Ids of the measurements in ``path`` (the packaged registry by default), in file order."""
    return [m.id for m in load(path)]


def get(measurement_id: str, path: str | Path | None = None) -> Measurement:
    """One measurement by id.

    Parameters
    ----------
    measurement_id : str
        The entry's ``id``.
    path : str or Path, optional
        File to read instead of the packaged registry.

    Raises
    ------
    UnknownNameError
        If no entry has that id; the message lists the known ids.
    """
    entries = load(path)
    for m in entries:
        if m.id == measurement_id:
            return m
    raise UnknownNameError("measurement", measurement_id, [m.id for m in entries])


def frame(path: str | Path | None = None, **filters) -> pd.DataFrame:
    """The measurements as a table, optionally filtered.

    Parameters
    ----------
    path : str or Path, optional
        File to read instead of the packaged registry.
    **filters
        ``model``, ``quantity``, ``card`` or ``engine``: a value or a collection of values to keep.

    Returns
    -------
    pandas.DataFrame
        One row per measurement, one column per field, plus ``value_si`` and ``si_unit``.

    Raises
    ------
    UnknownNameError
        For a filter other than those above.
    """
    for key in filters:
        if key not in FILTERS:
            raise UnknownNameError("filter", key, FILTERS)
    names = [f.name for f in fields(Measurement)]
    rows = []
    for m in load(path):
        if any(not _matches(getattr(m, k), want) for k, want in filters.items()):
            continue
        row = {n: getattr(m, n) for n in names}
        row["value_si"] = m.value_si
        row["si_unit"] = m.si_unit
        rows.append(row)
    return pd.DataFrame(rows, columns=names + ["value_si", "si_unit"])


def _matches(actual, want) -> bool:
    if isinstance(want, (list, tuple, set, frozenset)):
        return actual in want
    return actual == want


# ---------------------------------------------------------------------------------------------------
# logged weights for a layout
# ---------------------------------------------------------------------------------------------------
