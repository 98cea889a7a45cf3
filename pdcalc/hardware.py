"""Accelerator presets (``pdcalc/data/hardware.toml``) and user hardware files.

Units are in the field names: bytes, bytes per second, FLOP per second. A user's own card is a TOML
file with the same keys; a missing or nonsensical field is an error naming the file and the field.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from pdcalc.errors import ConfigError, UnknownNameError, load_toml


@dataclass(frozen=True, kw_only=True)
class Card:
    """One accelerator."""

    name: str                                   # preset slug or file name
    label: str                                  # human-readable name
    hbm_bytes: float                            # installed HBM
    hbm_bandwidth_bytes_per_s: float            # HBM bandwidth used by the models
    flops_per_s: dict                           # dense peak per dtype, FLOP/s
    intra_node_bytes_per_s: float               # per device, one way, inside a node
    scale_out_bytes_per_s: float                # per device, one way, between nodes
    cards_per_node: int = 8                     # devices per server
    hbm_visible_bytes: float | None = None      # what the runtime exposes, when documented
    hbm_bandwidth_bytes_per_s_range: tuple | None = None  # [low, high] where sources disagree
    flops_per_s_range: tuple | None = None
    source: str = ""
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        src = self.name
        for name in ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "intra_node_bytes_per_s", "scale_out_bytes_per_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(src, name, f"expected a positive number, got {v!r}")
        if not isinstance(self.flops_per_s, dict) or not self.flops_per_s:
            raise ConfigError(src, "flops_per_s", "expected a table of dtype = FLOP/s")
        for k, v in self.flops_per_s.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(src, f"flops_per_s.{k}", f"expected a positive number, got {v!r}")
        if isinstance(self.cards_per_node, bool) or not isinstance(self.cards_per_node, int) or self.cards_per_node < 1:
            raise ConfigError(src, "cards_per_node", f"expected a positive integer, got {self.cards_per_node!r}")
        if self.hbm_visible_bytes is not None and not 0 < self.hbm_visible_bytes <= self.hbm_bytes:
            raise ConfigError(src, "hbm_visible_bytes", "must be positive and at most hbm_bytes")

    @property
    def usable_base_bytes(self) -> float:
        """Memory a serving engine's utilisation fraction applies to: the visible memory where known."""
        return self.hbm_visible_bytes or self.hbm_bytes

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (error listing the known dtypes if absent)."""
        try:
            return self.flops_per_s[dtype]
        except KeyError:
            raise UnknownNameError(f"dtype for {self.name}", dtype, self.flops_per_s) from None


_FIELDS = set(Card.__dataclass_fields__) - {"name", "extra"}


def card_from_dict(data: dict, *, name: str, source_file: str) -> Card:
    known = {k: v for k, v in data.items() if k in _FIELDS}
    for required in ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "flops_per_s", "intra_node_bytes_per_s",
                     "scale_out_bytes_per_s"):
        if required not in known:
            raise ConfigError(source_file, required, "missing")
    for k in ("hbm_bandwidth_bytes_per_s_range", "flops_per_s_range"):
        if k in known:
            known[k] = tuple(known[k])
    known.setdefault("label", name)
    try:
        return Card(name=name, extra={k: v for k, v in data.items() if k not in _FIELDS}, **known)
    except ConfigError as exc:
        raise ConfigError(source_file, exc.field, str(exc).split(": ", 2)[-1]) from None


@cache
def _presets() -> dict[str, dict]:
    path = resources.files("pdcalc").joinpath("data", "hardware.toml")
    with path.open("rb") as fh:
        return tomllib.load(fh)



def card_names() -> tuple[str, ...]:
    """Preset slugs."""
    return tuple(_presets())


def get_card(name: str | Path | Card) -> Card:
    """A card preset by slug (``ascend-910b2``, ``h200`` ...) or a path to a TOML file with the same keys."""
    if isinstance(name, Card):
        return name
    key = str(name)
    presets = _presets()
    if key in presets:
        return card_from_dict(presets[key], name=key, source_file="pdcalc/data/hardware.toml")
    path = Path(key)
    if path.suffix == ".toml" or path.exists():
        return card_from_dict(load_toml(path, key), name=path.stem, source_file=key)
    raise UnknownNameError("card", key, presets)
