"""The one style of argument validation: each check returns the value or raises InvalidParameterError.

The error names the parameter, what is allowed and what was received (``"k must be an integer in [1, 65536],
got 0"``); servers turn the same three facts into a structured 4xx body.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Collection

from ldptel.client.errors import InvalidParameterError


def check_int(name: str, value: object, lo: int, hi: int, *, allowed: str | None = None) -> int:
    """An ``int`` (not a bool) in [lo, hi]; ``allowed`` says what that means in the error (default: the range)."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidParameterError(name, allowed or f"an integer in [{lo}, {hi}]", value)
    return value


def check_number(
    name: str, value: object, lo: float, hi: float, *, open_interval: bool = False, allow_inf: bool = False
) -> float:
    """A finite int or float (not a bool) in [lo, hi], or in (lo, hi) with ``open_interval``; ``allow_inf``
    also takes +inf (a duration that means "never")."""
    allowed = f"a number in ({lo}, {hi})" if open_interval else f"a number in [{lo}, {hi}]"
    if allow_inf:
        allowed += " or inf"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameterError(name, allowed, value)
    try:
        x = float(value)
    except OverflowError:  # an int beyond float64 (JSON allows any number of digits)
        raise InvalidParameterError(name, allowed, "an integer beyond float64") from None
    if allow_inf and x == math.inf:
        return x
    inside = lo < x < hi if open_interval else lo <= x <= hi
    if not (math.isfinite(x) and inside):
        raise InvalidParameterError(name, allowed, value)
    return x


def check_choice(name: str, value: object, choices: Collection[str]) -> str:
    """One of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidParameterError(name, f"one of {sorted(choices)}", value)
    return value


def lone_surrogate_at(text: str) -> int | None:
    """The index of the first surrogate code point (U+D800 to U+DFFF) in ``text``, or None when there is none.

    The protocol's rule for text (values, candidates, labels, spec fields): a string is a sequence of Unicode
    scalar values, i.e. it has a UTF-8 encoding, and it is hashed, keyed and sent as exactly that encoding. A
    Python ``str`` holding any surrogate code point (an unpaired half of a UTF-16 pair, as broken emoji
    splitting, ``surrogateescape`` decoding or a JavaScript bridge produce; Python never pairs two of them
    into one character) has no UTF-8 encoding and is **refused, never repaired**: no U+FFFD replacement, no
    ``surrogatepass``/CESU-8/WTF-8 bytes, no dropping. In JavaScript the same strings are those for which
    ``String.prototype.isWellFormed()`` is false (an unpaired surrogate code unit); a well-formed JS pair is
    one supplementary character, which Python holds as one code point. Both SDKs refuse exactly the texts
    that have no UTF-8 encoding.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return int(exc.start)
    return None


def check_text(name: str, value: object, max_chars: int) -> str:
    """A ``str`` of at most ``max_chars`` characters, valid Unicode (:func:`lone_surrogate_at`)."""
    if not isinstance(value, str) or len(value) > max_chars:
        raise InvalidParameterError(name, f"a string of at most {max_chars} characters", value)
    at = lone_surrogate_at(value)
    if at is not None:
        raise InvalidParameterError(name, "valid Unicode text (no lone surrogate code points U+D800-U+DFFF)",
                                    f"a string with a lone surrogate at index {at}")
    return value


def check_day(day: object, *, what: str = "day") -> str:
    """A UTC day ``YYYY-MM-DD`` (the finest time ldptel keeps)."""
    if not isinstance(day, str) or len(day) != 10:
        raise InvalidParameterError(what, "a UTC day YYYY-MM-DD", day)
    try:
        datetime.date.fromisoformat(day)
    except ValueError:
        raise InvalidParameterError(what, "a UTC day YYYY-MM-DD", day) from None
    return day
