"""The Redis storage layer that the ingest service and the aggregator share (neither imports the other).

:mod:`~ldptel.storage.keys` (every key), :mod:`~ldptel.storage.registry` (metric specs),
:mod:`~ldptel.storage.append` (deduplicated stream append), :mod:`~ldptel.storage.streamread` (stream reads),
:mod:`~ldptel.storage.connection` (the raw-RESP connection stack under those two hot paths),
:mod:`~ldptel.storage.sketches` (the sketch store and checkpoints) and :mod:`~ldptel.storage.embedded` (a
private Redis server for laptops, tests and the demo). Needs redis-py, never Flask, and imports nothing from
:mod:`ldptel.server` or :mod:`ldptel.aggregator`.
"""
