"""Exception hierarchy shared by every ldptel component.

Every error ldptel raises on purpose descends from :class:`LdpError`; the specific ones also subclass the
standard-library type a caller would naturally catch (``ValueError`` for out-of-range values,
``TypeError`` for values of the wrong kind), so ``except ValueError`` keeps working.
"""

from __future__ import annotations


class LdpError(Exception):
    """Root of every error ldptel raises on purpose."""


class InvalidParameterError(LdpError, ValueError):
    """A mechanism or metric parameter is out of its allowed range.

    The message names the parameter, the allowed range and the value received; the same facts are
    available as attributes so that servers can turn them into structured 4xx bodies.
    """

    def __init__(self, parameter: str, allowed: str, received: object) -> None:
        self.parameter = parameter
        self.allowed = allowed
        self.received = received
        super().__init__(f"{parameter} must be {allowed}, got {received!r}")


class InvalidValueError(LdpError, TypeError):
    """A value to privatize has the wrong type (sketches take str or bytes, rr takes bool, ...)."""


class InvalidTextError(InvalidValueError, ValueError):
    """A ``str`` value that is not valid Unicode text: it holds a lone surrogate code point (U+D800 to U+DFFF),
    so it has no UTF-8 encoding to hash. Refused, never repaired
    (:func:`ldptel.client.protocol.validate.lone_surrogate_at` states the rule). Also a ``ValueError``, which
    is what the encoder raised before."""


class UnknownValueError(LdpError, ValueError):
    """A value is outside the declared domain of a categorical (grr) metric."""


class WireFormatError(LdpError, ValueError):
    """A batch of reports could not be decoded: wrong magic, version, mechanism, length, index or bit."""


class BudgetExceededError(LdpError):
    """A device's privacy budget for a metric is spent for the current period."""


class StateMismatchError(LdpError, ValueError):
    """Two sketch states (or a state and a batch) were built with different parameters."""


class EmptyStateError(LdpError, ValueError):
    """An estimate was asked of a sketch state that holds no reports."""
