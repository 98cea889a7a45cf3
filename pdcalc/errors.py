"""Errors a user can cause. Each carries a one-line message fit for a command line."""

import difflib

#: Up to this many known names are listed in full; beyond it, the closest ones.
MAX_LISTED = 24


class PdcalcError(Exception):
    """Base class of every error caused by user input (unknown name, bad file, impossible layout)."""


class UnknownNameError(PdcalcError, KeyError):
    """A preset name that does not exist; the message lists the known ones."""

    def __init__(self, kind: str, name: str, known):
        self.kind, self.name, self.known = kind, name, sorted(known)
        if len(self.known) <= MAX_LISTED:
            listed = f"known: {', '.join(self.known)}"
        else:
            close = difflib.get_close_matches(str(name), self.known, n=8, cutoff=0.5)
            listed = (f"{len(self.known)} known" + (f"; closest: {', '.join(close)}" if close else
                                                     f", e.g. {', '.join(self.known[:8])}"))
        super().__init__(f"unknown {kind} {name!r}; {listed}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class ConfigError(PdcalcError, ValueError):
    """A configuration file that is malformed, unsupported, or has a nonsensical field."""

    def __init__(self, source: str, field: str | None, message: str):
        self.source, self.field = source, field
        where = f"{source}: field {field!r}" if field else str(source)
        super().__init__(f"{where}: {message}")


def load_toml(path, source: str) -> dict:
    """Read a user's TOML file; a missing or malformed file is a :class:`ConfigError` naming ``source``."""
    import tomllib

    try:
        with (path.open("rb") if hasattr(path, "open") else open(path, "rb")) as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(source, None, "no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"not valid TOML ({exc})") from None


class LayoutError(PdcalcError, ValueError):
    """A parallel layout that cannot exist (e.g. experts that cannot be spread over the EP group)."""
