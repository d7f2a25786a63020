"""How the SDK runtime tells the app about problems: :class:`UploadError`, the ``on_error`` callback and the log.

Nothing here is ever raised into the app: a delivery problem (network error, a refused batch, a spec that
cannot be fetched, a local storage error) becomes an :class:`UploadError` that :class:`Notifier` logs and
hands to the app's ``on_error`` callback, swallowing whatever the callback raises.

Every module of the runtime (reporter, uploader, spec cache) logs to the one logger :data:`log`, named
``ldptel.client.sdk.reporter`` after the module the app imports, so one logging setting covers them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ldptel.client.errors import LdpError

__all__ = ["Notifier", "UploadError", "log"]

log = logging.getLogger("ldptel.client.reporter")  # the SDK's one logger; the name apps configure since 0.1


class UploadError(LdpError):
    """A delivery problem seen by the background uploader (passed to ``on_error``, never raised into the app).

    ``status`` is the HTTP status (None for a network error); ``outcome`` what was done with the batch
    (``retry``, ``auth``, ``stale``, ``rejected``, ``no_spec``, ``storage_error``, ``internal``, or ``policy``
    for a :class:`~ldptel.client.sdk.policy.PolicyRefusal`);
    ``metric``/``version``/``n``/``batch_id`` describe the batch (None for spec fetches).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        outcome: str = "retry",
        metric: str | None = None,
        version: int | None = None,
        n: int | None = None,
        batch_id: bytes | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome
        self.metric = metric
        self.version = version
        self.n = n
        self.batch_id = batch_id


class Notifier:
    """Logs an :class:`UploadError` as a warning and passes it to ``on_error``; never raises."""

    def __init__(self, on_error: Callable[[UploadError], None] | None) -> None:
        self._on_error = on_error

    def __call__(self, err: UploadError) -> None:
        log.warning("ldptel: %s", err)
        if self._on_error is not None:
            try:
                self._on_error(err)
            except Exception:
                log.exception("ldptel on_error callback raised")
