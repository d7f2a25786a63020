"""JSON output is an API (docs/json-output.md): every ``--format json`` document of the ``ldptel`` CLI carries a
top-level ``schema_version``, and its keys are pinned by ``tests/aggregator/test_json_output.py``.

Within one version keys are only added; removing or renaming a key, or changing its meaning or type, raises
the document's version here (and its section of docs/json-output.md). Documents that were bare JSON lists
before versioning (``status``, ``metrics list``) are objects from version 1: the list is under one key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# document → its schema version (docs/json-output.md has one section per document)
SCHEMA_VERSIONS: dict[str, int] = {
    "result": 1,  # estimate / discover / estimate --by-day
    "breakdown": 1,  # estimate --by
    "metric": 1,  # metrics show / create / grow / retire / retention
    "metrics-list": 1,
    "metrics-plan": 1,  # metrics plan / apply
    "profile": 1,  # metrics profile
    "status": 1,
    "plan": 1,
    "aggregate": 1,  # aggregate --once (one line)
    "seal": 1,  # seal (one line per metric)
    "inference": 1,
    "dashboard-metrics": 1,  # the dashboard's GET /api/metrics: {"metrics": [...]}
    "dashboard-metric": 1,  # GET /api/metrics/<name>: one item of that list
}


def versioned(document: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with ``schema_version`` first (a key already in ``body`` of that name is an error)."""
    if "schema_version" in body:
        raise ValueError(f"{document}: schema_version is set here, not by the document")
    return {"schema_version": SCHEMA_VERSIONS[document], **body}


__all__ = ["SCHEMA_VERSIONS", "versioned"]
