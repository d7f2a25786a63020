"""The true values of the simulated fleet: a ranked distribution read from ``value<TAB>weight<TAB>name`` lines
(default: ``emoji.tsv``, shipped in the ``ldptel.aggregator`` package's ``data`` directory)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ldptel.client.errors import LdpError

DATA_PACKAGE = "ldptel.aggregator"
DEFAULT_FILE = "emoji.tsv"


class DistributionFileError(LdpError, ValueError):
    """A distribution file has a malformed line, a weight that is not a positive number, or too few values."""


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """Values with their relative frequencies (``weights`` sum to 1) and a readable name for each."""

    values: tuple[str, ...]
    names: tuple[str, ...]
    weights: np.ndarray


def load_distribution(*, path: str | os.PathLike[str] | None = None, shipped: str = DEFAULT_FILE) -> Distribution:
    """Read a ``value<TAB>weight<TAB>name`` file (``#`` comments); default: the shipped file ``shipped``."""
    if path is None:
        text = (resources.files(DATA_PACKAGE) / "data" / shipped).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    values: list[str] = []
    names: list[str] = []
    weights: list[float] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            raise DistributionFileError(f"line {lineno}: expected value<TAB>weight[<TAB>name]")
        try:
            weight = float(parts[1])
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise DistributionFileError(f"line {lineno}: weight must be a positive number")
        values.append(parts[0])
        weights.append(weight)
        names.append(parts[2].strip() if len(parts) > 2 and parts[2].strip() else parts[0])
    if len(values) < 2 or len(set(values)) != len(values):
        raise DistributionFileError("a distribution needs at least two distinct values")
    w = np.asarray(weights, dtype=np.float64)
    return Distribution(values=tuple(values), names=tuple(names), weights=w / w.sum())
