"""ldptel aggregator: exactly-once fold workers, the sketch store, queries with post-processing, the CLI."""

from __future__ import annotations
