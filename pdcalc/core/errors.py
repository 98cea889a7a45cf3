"""Errors a user can cause. Each carries a one-line message fit for a command line."""

from __future__ import annotations

import difflib
import unicodedata

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
        self.source, self.field, self.message = source, field, message
        shown = str(source)
        if not shown.isprintable():  # a control character (newline, tab) in a path: keep the message one line
            shown = repr(shown)
        where = f"{shown}: field {field!r}" if field else shown
        super().__init__(f"{where}: {' '.join(str(message).splitlines())}")


#: Largest user file pdcalc reads (config.json, card or measurement TOML); real ones are a few kB.
MAX_FILE_BYTES = 16 * 2**20


def read_user_file(path, source: str, *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a user's file; anything that is not a readable regular file of at most ``max_bytes``
    (missing, a folder, a device or pipe, unreadable, too large) is a :class:`ConfigError` naming ``source``.

    The file is checked with ``stat`` before it is opened, so a pipe or a device (``/dev/zero``) is refused
    instead of blocking or filling memory.
    """
    import os
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(source, None, "no such file") from None
    except NotADirectoryError:
        raise ConfigError(source, None, "no such file (a part of the path is not a folder)") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL character in the name
        raise ConfigError(source, None, f"cannot read: {_reason(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(source, None, "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(source, None, "is not a regular file (a device, pipe or socket)")
    too_big = f"is larger than {max_bytes:,} bytes, the most pdcalc reads (such files are a few kB)"
    if st.st_size > max_bytes:
        raise ConfigError(source, None, too_big)
    try:
        with open(path, "rb") as fh:
            data = fh.read(min(max_bytes, st.st_size) + 1)  # one byte more: the file may have grown
    except OSError as exc:
        raise ConfigError(source, None, f"cannot read: {_reason(exc)}") from None
    if len(data) > max_bytes:
        raise ConfigError(source, None, too_big)
    return data


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return " ".join(str(exc).split()) or type(exc).__name__


def decode_error(exc: UnicodeDecodeError, expected: str) -> str:
    """One line saying that a file is not ``expected`` text, with the offending byte and its offset."""
    bad = exc.object[exc.start:exc.start + 1]
    where = f"byte 0x{bad.hex()} at offset {exc.start:,}" if bad else f"at offset {exc.start:,}"
    return f"not {expected} text ({where})"


def load_toml(path, source: str) -> dict:
    """Read a user's TOML file (UTF-8); a missing, unreadable or malformed file is a :class:`ConfigError`
    naming ``source`` (see :func:`read_user_file`)."""
    import os
    import tomllib

    if isinstance(path, (str, os.PathLike)):
        data = read_user_file(path, source)
    else:  # package data (an importlib.resources Traversable)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(source, None, f"cannot read: {_reason(exc)}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, decode_error(exc, "UTF-8") + "; TOML files are UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"not valid TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(source, None, "not usable TOML: arrays or tables nested too deeply") from None


class LayoutError(PdcalcError, ValueError):
    """A parallel layout that cannot exist (e.g. experts that cannot be spread over the EP group)."""


#: Characters that end a line (``str.splitlines``) or are other controls: never printed raw in a message.
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
#: Longest message a one-line error (:func:`one_line`) carries (a pasted value can be huge).
MAX_MESSAGE = 2000


def one_line(text: str, *, limit: int = MAX_MESSAGE) -> str:
    """``text`` as one line: line breaks and other control characters escaped (``\\n``), at most ``limit`` characters."""
    out = "".join(repr(ch)[1:-1] if ch in _LINE_BREAKS or unicodedata.category(ch) == "Cc" else ch
                  for ch in str(text))
    return out if len(out) <= limit else out[:limit - 3] + "..."


class OneLineError(PdcalcError):
    """An error whose message is always one line (see :func:`one_line`)."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


class RerunError(OneLineError):
    """A re-run that cannot start: a bad output folder, a chapter that is not a notebook, a missing tool."""
