"""Plumbing every ``ldptel`` command shares: exit statuses, :class:`UserError`, the Redis connection, the
``--redis-url`` option, reading value files and the argparse ``type=`` functions.

A user error (unknown metric, empty range, bad file, Redis unreachable, bad arguments) is one line on stderr
and exit status 2: commands raise :class:`UserError` (or any :class:`~ldptel.client.errors.LdpError`) and
:func:`ldptel.aggregator.cli.entry.main` prints it. Nothing here imports redis-py until a command connects.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ldptel.client.errors import LdpError
from ldptel.client.protocol.validate import check_day

if TYPE_CHECKING:
    import redis

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
ENV_REDIS_URL = "LDPTEL_REDIS_URL"
EXIT_OK = 0
EXIT_USER = 2
CONNECT_TIMEOUT = 5.0  # seconds to open a connection to Redis
SOCKET_TIMEOUT = 30.0  # seconds one Redis command may take


class UserError(LdpError):
    """An expected failure: printed as one line on stderr, exit status 2."""


def redis_url_option() -> argparse.ArgumentParser:
    """A parent parser holding ``--redis-url`` (every command that talks to Redis takes it)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--redis-url",
        metavar="URL",
        help=f"Redis to use (default: ${ENV_REDIS_URL}, else {DEFAULT_REDIS_URL})",
    )
    return common


def redis_url(given: str | None) -> str:
    """``--redis-url``, else ``$LDPTEL_REDIS_URL``, else :data:`DEFAULT_REDIS_URL`."""
    return given or os.environ.get(ENV_REDIS_URL) or DEFAULT_REDIS_URL


@contextmanager
def connected(url: str | None, *, socket_timeout: float | None = SOCKET_TIMEOUT) -> Iterator[redis.Redis]:
    """A pinged Redis client; a bad URL, an unreachable server or a connection lost later is a :class:`UserError`."""
    import redis
    from redis.exceptions import RedisClusterException

    from ldptel.storage.client import connect, parse_redis_url

    url = redis_url(url)
    try:
        target = parse_redis_url(url)
        shown = target.display
        r = connect(target, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=socket_timeout)
    except (ValueError, LdpError) as exc:
        raise UserError(f"bad Redis URL {url!r}: {exc}") from None
    except (redis.RedisError, RedisClusterException) as exc:  # a cluster client asks its seeds for the slot map
        raise UserError(f"cannot reach Redis at {shown}: {_one_line(exc)} (set --redis-url or {ENV_REDIS_URL})") from None
    try:
        try:
            r.ping()
        except (redis.RedisError, RedisClusterException) as exc:
            raise UserError(f"cannot reach Redis at {shown}: {_one_line(exc)} (set --redis-url or {ENV_REDIS_URL})") from None
        yield r
    except redis.ConnectionError as exc:
        raise UserError(f"lost the connection to Redis: {_one_line(exc)}") from None
    except (redis.exceptions.AskError, redis.exceptions.TryAgainError) as exc:  # MovedError is an AskError
        if not target.cluster:  # a plain URL at a cluster node: only a configuration change heals it
            raise UserError(
                f"{shown} is a Redis Cluster node (MOVED {exc}): use redis+cluster://host:port[,host:port...]"
            ) from None
        # a cluster URL: slots kept moving (failover or resharding) past every retry; transient
        raise UserError(
            f"the Redis Cluster at {shown} is changing (a failover or resharding: {type(exc).__name__} {exc}); "
            "try again once it has settled"
        ) from None
    except (redis.RedisError, RedisClusterException) as exc:  # any other Redis or Redis Cluster error
        raise UserError(f"Redis error ({type(exc).__name__}): {_one_line(exc)}") from None
    finally:
        r.close()


def _one_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_TEXT_RULE = "UTF-8 text, without lone surrogates (such lines are refused, not repaired)"


def read_text(path: str, *, what: str) -> str:
    """A UTF-8 text file (``-``: standard input), without the byte-order mark some editors put first. Bytes that
    are not UTF-8 (or a text stream holding lone surrogates) are an error naming the line."""
    try:
        if path == "-":
            if hasattr(sys.stdin, "buffer"):
                raw = sys.stdin.buffer.read()
            else:
                text = sys.stdin.read()
                check_texts(text.splitlines(), what=f"{what} {path}")
                raw = text.encode("utf-8")
        else:
            raw = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc}") from None
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - raw.rfind(b"\n", 0, exc.start)
        raise UserError(f"{what} {path}, line {line}: not valid UTF-8 ({exc.reason} at byte {column}); expected "
                        f"{_TEXT_RULE}") from None


def check_texts(values: list[str], *, what: str, label: str = "line") -> None:
    """A UserError naming the first of ``values`` (numbered from 1 as ``label``) that is not valid Unicode text
    (a lone surrogate: it has no UTF-8 encoding to hash; ``ldptel.client.protocol.validate.lone_surrogate_at``)."""
    from ldptel.client.protocol.validate import lone_surrogate_at

    for number, value in enumerate(values, 1):
        at = lone_surrogate_at(value)
        if at is not None:
            raise UserError(f"{what}, {label} {number}: a lone surrogate code point (U+D800-U+DFFF) at character "
                            f"{at + 1}; expected {_TEXT_RULE}")


def read_values(path: str, *, what: str) -> list[str]:
    """The non-empty, non-``#`` lines of a text file (candidates, domain labels; ``-``: standard input)."""
    text = read_text(path, what=what)
    values = [line.strip() for line in text.splitlines()]
    values = [v for v in values if v and not v.startswith("#")]
    if not values:
        raise UserError(f"{what} {path} has no values (one per line)")
    return values


# ------------------------------------------------------------------------------- argparse type= functions
def day(text: str) -> str:
    """A UTC day ``YYYY-MM-DD``."""
    try:
        return check_day(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a UTC day YYYY-MM-DD, got {text!r}") from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {value}")
    return value


def comma_list(text: str) -> list[str]:
    """``a, b,c`` → ``["a", "b", "c"]`` (empty items dropped)."""
    return [item.strip() for item in text.split(",") if item.strip()]
