"""The candidate lists shipped with the package (``ldptel/aggregator/data/*.tsv``: value, weight, name per line,
``#`` comments): what a sketch metric's dashboard page offers when no candidates are given (issue 31 §3)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

DATA_PACKAGE = "ldptel.aggregator"


@dataclass(frozen=True, slots=True)
class CandidateList:
    name: str  # the file's stem: emoji, words
    description: str  # the file's first comment line
    values: tuple[str, ...]  # the first column, in the file's order (most used first)


@lru_cache(maxsize=1)
def shipped_candidates() -> tuple[CandidateList, ...]:
    """Every ``data/*.tsv`` of the package, by name."""
    out = []
    for entry in sorted((resources.files(DATA_PACKAGE) / "data").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".tsv"):
            continue
        lines = entry.read_text(encoding="utf-8").splitlines()
        comments = [line.lstrip("# ").strip() for line in lines if line.startswith("#")]
        values = tuple(line.split("\t")[0] for line in lines if line.strip() and not line.startswith("#"))
        out.append(CandidateList(name=entry.name.removesuffix(".tsv"),
                                 description=comments[0] if comments else "", values=values))
    return tuple(out)


__all__ = ["CandidateList", "shipped_candidates"]
