"""The Redis storage layer that the ingest service and the aggregator share (neither imports the other).

:mod:`~ldptel.storage.client` (the one client factory: one Redis or a cluster), :mod:`~ldptel.storage.keys` (every key), :mod:`~ldptel.storage.registry` (metric specs),
:mod:`~ldptel.storage.append` (deduplicated stream append), :mod:`~ldptel.storage.streamread` (stream reads),
:mod:`~ldptel.storage.connection` (the raw-RESP connection stack under those two hot paths),
:mod:`~ldptel.storage.sketches` (the sketch store and checkpoints) and :mod:`~ldptel.storage.embedded` (a
private Redis server for laptops, tests and the demo). Needs redis-py, never Flask, and imports nothing from
:mod:`ldptel.server` or :mod:`ldptel.aggregator`.
"""

if __name__ != "ldptel.storage":  # its folder sits inside server/: never load a second copy under that name
    raise ImportError(f"the storage layer is ldptel.storage; import it by that name, not {__name__}")
