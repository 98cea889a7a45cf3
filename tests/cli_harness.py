"""Running ``pdcalc`` in-process for the input-robustness tests, and the outcome a user must get.

Every run of the command line must end in one of two ways: exit status 0 with its normal output (valid
JSON with ``--json``), or exit status 2 with exactly one line on stderr. A Python traceback, another exit
status, a hang or an uncaught exception fails :func:`assert_clean`.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
from dataclasses import dataclass

#: A run that takes longer than this is reported as a hang (a guard against runaway input, not a
#: measurement of speed: speed is measured in `make bench`).
HANG_GUARD_S = 60


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def json(self):
        return json.loads(self.out)


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"no answer within {HANG_GUARD_S} s")


def run_cli(*args: str) -> Outcome:
    """``pdcalc ARGS`` in this process; any exception escaping :func:`pdcalc.cli.main` propagates."""
    from pdcalc.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_GUARD_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse: --help, or a bad flag
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_clean(o: Outcome, *, json_out: bool = True) -> Outcome:
    """Exit 0 with valid JSON (when ``json_out``), or exit 2 with one line on stderr and nothing on stdout."""
    assert "Traceback" not in o.err, o.err
    if o.code == 0:
        if json_out:
            json.loads(o.out)  # raises on anything that is not JSON (NaN, Infinity, a partial print)
        return o
    assert o.code == 2, (o.code, o.err)
    lines = o.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pdcalc"), o.err
    assert o.out == "", o.out
    return o


def assert_refused(o: Outcome, *fragments: str) -> str:
    """Exit 2, one line, naming every one of ``fragments``; returns the line."""
    assert_clean(o)
    assert o.code == 2, f"accepted: {o.out[:300]}"
    line = o.err.strip()
    for f in fragments:
        assert f in line, f"{f!r} not in {line!r}"
    return line
