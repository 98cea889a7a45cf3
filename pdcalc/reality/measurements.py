"""Published measurements: numbers that serving engines, papers and operators printed, as data.

Each entry of ``pdcalc/data/measurements.toml`` is one quantity (weight memory per card, KV-cache
memory or capacity, maximum concurrency, KV-transfer bandwidth or time, prefill/decode throughput,
TPOT, TTFT) with the exact text it was read from (``quote``), where to find that text again
(``source``, ``url``) and the conditions it was measured under (model, quantization, card, engine,
parallel layout, memory fraction, context length, workload). Unknown conditions are absent, never
guessed.

Throughput entries (``prefill_throughput``, ``decode_throughput``) also carry what a throughput model
needs to set up the same run: how many cards the value is per (``scope_cards``) and which cards were
counted (``cards_counted``), the serving mode, the cards of the measured instance or deployment, the
lengths, the batch or concurrency, the latency target or measured TPOT and whether MTP was on.
:data:`THROUGHPUT_CONDITIONS` lists them; a condition the source does not state is named in
``unstated`` (and said in ``notes``), and :func:`missing_conditions` reports any that is neither.

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
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from pdcalc.core.errors import ConfigError, UnknownNameError, load_toml
from pdcalc.core.quotes import number_in_text
from pdcalc.core.units import BYTE_UNITS

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
_OPTIONAL_INT = ("tp", "dp", "ep", "pp", "max_model_len", "block_size",
                 "cards", "prefill_cards", "decode_cards", "scope_cards", "prompt_tokens", "output_tokens",
                 "context_tokens", "prefill_tokens_per_card", "concurrency", "mtp_draft_tokens")
_OPTIONAL_FLOAT = ("batch_per_card", "tpot_ms", "tpot_limit_ms", "ttft_limit_ms")
#: Fields that take a number or, where the source prints a range, ``[low, high]``.
_OPTIONAL_RANGE = ("tokens_per_s_per_user",)
_OPTIONAL_BOOL = ("mtp", "perfect_eplb")

#: Allowed values of ``serving``: prefill and decode on separate cards, or in the same engine.
SERVING = ("disaggregated", "aggregated")
#: Allowed values of ``cards_counted``: the per-card (or per-node) value divides by the cards of the
#: measured phase only, or by every card of the deployment (prefill and decode together).
CARDS_COUNTED = ("phase", "deployment")
THROUGHPUT_QUANTITIES = ("prefill_throughput", "decode_throughput")

#: Conditions a throughput model needs to predict a throughput entry, each satisfied by any one of its
#: fields. An entry names the ones its source does not state in ``unstated``.
THROUGHPUT_CONDITIONS: dict[str, tuple[str, ...]] = {
    "model": ("model",),
    "quantization": ("quantization",),
    "card": ("card",),
    "engine": ("engine",),
    "engine_version": ("engine_version",),
    "serving": ("serving",),
    "cards": ("cards", "prefill_cards", "decode_cards"),
    "scope_cards": ("scope_cards",),
    "cards_counted": ("cards_counted",),
    "tp": ("tp",),
    "ep": ("ep",),
    "prompt_tokens": ("prompt_tokens", "context_tokens"),
    "batch": ("batch_per_card", "prefill_tokens_per_card", "concurrency"),
}
#: Further conditions of a decode throughput: output length (or KV length), latency, MTP.
DECODE_CONDITIONS: dict[str, tuple[str, ...]] = {
    "output_tokens": ("output_tokens", "context_tokens"),
    "latency": ("tpot_ms", "tpot_limit_ms", "tokens_per_s_per_user"),
    "mtp": ("mtp",),
}
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_CARD_SLUG = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")
FILTERS = ("model", "quantity", "card", "engine")


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One published number, its exact source text and the conditions it was measured under. The throughput
    conditions are optional (:data:`THROUGHPUT_CONDITIONS`, :data:`DECODE_CONDITIONS`)."""

    id: str                                     # unique slug
    quantity: str                               # one of QUANTITIES
    value: float                                # the number as printed, in ``unit``
    unit: str                                   # as printed (the units each quantity allows: QUANTITY_UNITS)
    scope: str                                  # what the number is per: "per card", "per node", "per instance"
    quote: str                                  # the exact text at the source; it contains ``value``
    source: str                                 # locator: repository and path or issue, paper and table, post
    url: str | None = None
    model: str | None = None
    quantization: str | None = None
    card: str | None = None                     # a hardware preset where one matches, else the card as stated
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
    unit_means: str | None = None               # byte units: the unit the engine computed in, where its code
                                                # shows the printed label differs ("GiB" for vLLM's "... GB")
    serving: str | None = None                  # "disaggregated" (prefill and decode apart) or "aggregated"
    cards: int | None = None                    # cards of the measured instance (phase-counted) or deployment
    prefill_cards: int | None = None            # deployment-counted disaggregated values: each phase's cards
    decode_cards: int | None = None
    scope_cards: int | None = None              # cards ``value`` is per: 1 per card, 8 per node of 8, ...
    cards_counted: str | None = None            # "phase" or "deployment": whose cards the divisor counts
    prompt_tokens: int | None = None            # input length per request
    output_tokens: int | None = None            # output length per request
    context_tokens: int | None = None           # KV length per sequence in decode, where the source gives it
    batch_per_card: float | None = None         # sequences per card (decode batch, or prefill requests)
    prefill_tokens_per_card: int | None = None  # prompt tokens per card in one prefill step
    concurrency: int | None = None              # client concurrency (requests in flight), whole deployment
    tpot_ms: float | None = None                # measured mean TPOT
    tpot_limit_ms: float | None = None          # a TPOT (or ITL) target
    ttft_limit_ms: float | None = None          # a TTFT target
    tokens_per_s_per_user: float | tuple[float, float] | None = None  # as printed; (low, high) for a range
    mtp: bool | None = None                     # multi-token prediction (speculative decoding) on
    mtp_draft_tokens: int | None = None         # draft tokens per step
    perfect_eplb: bool | None = None            # expert load balanced on purpose (simulated or forced routing)
    cache_hit: float | None = None              # share of prompt tokens served from a prefix cache, [0, 1)
    unstated: tuple[str, ...] = ()              # condition names the source does not state

    @property
    def is_throughput(self) -> bool:
        """Whether the entry is a prefill or decode throughput."""
        return self.quantity in THROUGHPUT_QUANTITIES

    @property
    def per_card(self) -> float | None:
        """Tokens/s per counted card (``value_si / scope_cards``); ``None`` unless a throughput with a
        known ``scope_cards``."""
        if not self.is_throughput or self.scope_cards is None:
            return None
        return self.value_si / self.scope_cards

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
        A measurement whose unit is one of :data:`pdcalc.core.units.BYTE_UNITS`.

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


def condition_names(quantity: str) -> tuple[str, ...]:
    """The condition names a throughput of ``quantity`` needs (empty for other quantities)."""
    if quantity == "prefill_throughput":
        return tuple(THROUGHPUT_CONDITIONS)
    if quantity == "decode_throughput":
        return tuple(THROUGHPUT_CONDITIONS) + tuple(DECODE_CONDITIONS)
    return ()


def missing_conditions(m: Measurement) -> list[str]:
    """Conditions of a throughput entry that none of their fields sets.

    Parameters
    ----------
    m : Measurement

    Returns
    -------
    list of str
        Condition names (:data:`THROUGHPUT_CONDITIONS`, plus :data:`DECODE_CONDITIONS` for decode)
        with no field set, in that order; an entry is complete when this equals ``m.unstated`` as a
        set. Empty for quantities other than throughput.
    """
    groups = {**THROUGHPUT_CONDITIONS, **DECODE_CONDITIONS}
    return [name for name in condition_names(m.quantity)
            if all(getattr(m, f) is None for f in groups[name])]


def _entry(raw: dict, source: str, card_names: frozenset) -> Measurement:
    if not isinstance(raw, dict):
        raise ConfigError(source, None, f"each [[measurement]] must be a table, got {raw!r}")
    mid = raw.get("id")
    if not isinstance(mid, str) or not _SLUG.fullmatch(mid):
        raise ConfigError(source, "id", f"entry {mid!r}: expected a lowercase slug (a-z, 0-9, '-')")

    def bad(field: str, message: str) -> ConfigError:
        return ConfigError(source, field, f"entry {mid!r}: {message}")

    known = (set(_REQUIRED) | set(_OPTIONAL_STR) | set(_OPTIONAL_INT) | set(_OPTIONAL_FLOAT)
             | set(_OPTIONAL_RANGE) | set(_OPTIONAL_BOOL)
             | {"gpu_memory_utilization", "serving", "cards_counted", "cache_hit", "unstated"})
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

    for key in _OPTIONAL_FLOAT:
        v = raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or not v > 0):
            raise bad(key, f"expected a positive number, got {v!r}")
    for key in _OPTIONAL_RANGE:
        v = raw.get(key)
        nums = v if isinstance(v, list) else [v]
        if v is None:
            continue
        if (isinstance(v, list) and len(v) != 2) or any(
                isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not x > 0
                for x in nums) or (isinstance(v, list) and v[0] > v[1]):
            raise bad(key, f"expected a positive number or [low, high], got {v!r}")
    for key in _OPTIONAL_BOOL:
        v = raw.get(key)
        if v is not None and not isinstance(v, bool):
            raise bad(key, f"expected true or false, got {v!r}")
    for key, allowed in (("serving", SERVING), ("cards_counted", CARDS_COUNTED)):
        if key in raw and raw[key] not in allowed:
            raise bad(key, f"{raw[key]!r} is not one of {', '.join(allowed)}")
    hit = raw.get("cache_hit")
    if hit is not None and (isinstance(hit, bool) or not isinstance(hit, (int, float)) or not 0 <= hit < 1):
        raise bad("cache_hit", f"expected a fraction in [0, 1), got {hit!r}")
    if raw.get("mtp_draft_tokens") is not None and raw.get("mtp") is not True:
        raise bad("mtp_draft_tokens", "draft tokens given but mtp is not true")
    parts = [raw.get("prefill_cards"), raw.get("decode_cards"), raw.get("cards")]
    if None not in parts and parts[0] + parts[1] != parts[2]:
        raise bad("cards", f"prefill_cards + decode_cards = {parts[0] + parts[1]}, not cards = {parts[2]}")

    quantity = raw["quantity"]
    if quantity not in QUANTITY_UNITS:
        raise bad("quantity", f"{quantity!r} is not one of {', '.join(QUANTITIES)}")
    unstated = raw.get("unstated", [])
    if not isinstance(unstated, list) or not all(isinstance(u, str) for u in unstated):
        raise bad("unstated", f"expected a list of condition names, got {unstated!r}")
    names = condition_names(quantity)
    if unstated and not names:
        raise bad("unstated", f"only throughput entries name unstated conditions, not {quantity}")
    groups = {**THROUGHPUT_CONDITIONS, **DECODE_CONDITIONS}
    for u in unstated:
        if u not in names:
            raise bad("unstated", f"{u!r} is not a condition of {quantity}; use one of {', '.join(names)}")
        if any(raw.get(f) is not None for f in groups[u]):
            raise bad("unstated", f"{u!r} is named unstated but the entry sets it")
    if len(set(unstated)) != len(unstated):
        raise bad("unstated", "a condition is named twice")
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
    for key in _OPTIONAL_FLOAT + ("cache_hit",):
        if raw.get(key) is not None:
            kwargs[key] = float(raw[key])
    for key in _OPTIONAL_RANGE:
        v = raw.get(key)
        if v is not None:
            kwargs[key] = tuple(float(x) for x in v) if isinstance(v, list) else float(v)
    kwargs["unstated"] = tuple(unstated)
    return Measurement(**kwargs)


def _parse(path, source: str) -> tuple[Measurement, ...]:
    from pdcalc.hardware.cards import card_names

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
