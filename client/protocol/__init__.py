"""The LDP protocol shared by the SDK, the ingest service and the aggregator.

:mod:`~ldptel.client.protocol.specs` (metric specs and their limits), :mod:`~ldptel.client.protocol.wire`
(the binary batch format), :mod:`~ldptel.client.protocol.hashing` (the mmh3 hash family) and
:mod:`~ldptel.client.protocol.rng` (exact Bernoulli sampling from the OS CSPRNG). Importing it never loads the
SDK runtime (sqlite, threads, HTTP).
"""
