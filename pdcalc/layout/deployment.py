"""Published deployments (``pdcalc/data/deployments.toml``) as data with their source."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from pdcalc.core.errors import UnknownNameError


@cache
def _all() -> dict:
    with resources.files("pdcalc").joinpath("data", "deployments.toml").open("rb") as fh:
        return tomllib.load(fh)


def get_deployment(name: str) -> dict:
    """A published deployment by name (e.g. ``v4-flash-910b-pd``)."""
    try:
        return dict(_all()[name])
    except KeyError:
        raise UnknownNameError("deployment", name, _all()) from None
