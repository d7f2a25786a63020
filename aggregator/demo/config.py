"""What the demo runs with: its metrics, its defaults, the ``ldptel demo`` arguments (:func:`parse_config`,
checked before anything starts) and the metric specs built from them (:func:`build_specs`)."""

from __future__ import annotations

import argparse
import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ldptel.aggregator.cli.extras import install_hint
from ldptel.aggregator.demo.errors import DemoUserError
from ldptel.client.mechanisms import Discovering, Sketch, mechanism_names
from ldptel.client.protocol.specs import MetricSpec, params_from_dict

FLAG_METRIC = "demo.dark_mode"
FLAG_MECHANISM = "rr"
SKETCH_METRIC = "demo.emoji"
DARK_MODE_SHARE = 0.35  # the true share of devices with dark mode on (the simulation draws around it)

# Default size. At ε = 4 one oue-cms report has a count variance of about 0.076 (q(1−q)/(½−q)² with q = 1/(e^4 + 1)), so 4,000
# devices give a 95% half-width of 1.96·√(4000·0.076) ≈ ±34 reports, while the 10th most used emoji of the
# shipped distribution has about 72 (the 1st about 280): the top ten stand clear of zero and the head is
# ordered. (cms: ±53, hcms: ±129 at the same size.) Every device is a real Reporter (its own sqlite database,
# two HTTP posts): about 14 ms of CPU per device across the simulation, the ingest service, the worker and
# Redis, so the default fits in well under a minute on 2 cores.
DEFAULT_DEVICES = 4_000
DEFAULT_EPSILON = 4.0
DEFAULT_MECHANISM = "oue-cms"
DEFAULT_K = 256
DEFAULT_M = 1024
DEFAULT_TOP = 10
DEFAULT_CHART = "ldptel-demo.png"
DEFAULT_THREADS = 4
MAX_DEVICES = 1_000_000
MAX_TOP = 100
MAX_THREADS = 256
SERVERS = ("auto", "gunicorn", "werkzeug")  # auto: gunicorn when installed
# The discovered metric: each device types WORDS_PER_DEVICE words from the shipped words.tsv (never given to the
# aggregator); `ldptel discover` finds them. Values up to 12 UTF-8 bytes (emoji and other scripts), k = 32 rows
# per byte. Two words a device: at ε = 4 that is 7.94 a day, inside the default device policy's 8 (three were
# 11.9, which every default device refuses and `metrics create` now rejects).
WORDS_METRIC = "demo.words"
WORDS_MECHANISM = "pem"
WORDS_FILE = "words.tsv"
WORDS_PER_DEVICE = 2
WORDS_MAX_BYTES, WORDS_K, WORDS_M = 12, 32, 1024


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """A checked ``ldptel demo`` command line (``chart`` None: no chart)."""

    devices: int = DEFAULT_DEVICES
    epsilon: float = DEFAULT_EPSILON
    mechanism: str = DEFAULT_MECHANISM
    k: int = DEFAULT_K
    m: int = DEFAULT_M
    seed: int | None = None
    top: int = DEFAULT_TOP
    chart: str | None = DEFAULT_CHART
    chart_explicit: bool = False
    workdir: str | None = None
    keep: bool = False
    threads: int = DEFAULT_THREADS
    server: str = "auto"


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse would print the usage too)
        raise DemoUserError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="ldptel demo",
        description=(
            "Run the whole system on this machine: an embedded Redis, the ingest server over HTTP, the fold "
            "worker and a fleet of simulated devices (each a real Reporter); then print the estimates beside "
            "the truth and write a chart."
        ),
    )
    p.add_argument("--devices", type=int, default=DEFAULT_DEVICES, metavar="N",
                   help=f"simulated devices, each reporting both metrics once (default {DEFAULT_DEVICES:,})")
    p.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON, metavar="E",
                   help=f"ε per report of both metrics (default {DEFAULT_EPSILON:g})")
    p.add_argument("--mechanism", choices=mechanism_names(having=Sketch, lacking=Discovering), default=DEFAULT_MECHANISM,
                   help=f"sketch mechanism of the emoji metric (default {DEFAULT_MECHANISM})")
    p.add_argument("--k", type=int, default=DEFAULT_K, help=f"sketch hash rows (default {DEFAULT_K})")
    p.add_argument("--m", type=int, default=DEFAULT_M, help=f"sketch columns, a power of two (default {DEFAULT_M})")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="seed of the simulated true values (default: random); privatization always uses the OS CSPRNG")
    p.add_argument("--top", type=int, default=DEFAULT_TOP, metavar="K", help=f"estimates to show (default {DEFAULT_TOP})")
    chart = p.add_mutually_exclusive_group()
    chart.add_argument("--chart", metavar="FILE.png", default=None,
                       help=f"write the chart here (default {DEFAULT_CHART}; needs the plot extra)")
    chart.add_argument("--no-chart", action="store_true", help="do not write a chart")
    p.add_argument("--workdir", metavar="DIR", default=None,
                   help="parent of the run's work directory (default: /dev/shm when available, else the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (device storage, Redis data, logs)")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS, metavar="N",
                   help=f"devices simulated concurrently (default {DEFAULT_THREADS})")
    p.add_argument("--server", choices=SERVERS, default="auto",
                   help="ingest server: gunicorn if installed (auto), or the development server of `ldptel serve`")
    return p


def parse_config(argv: Sequence[str]) -> DemoConfig:
    """The checked configuration; a bad argument is a :class:`DemoUserError` (``--help`` exits with SystemExit)."""
    args = build_parser().parse_args(list(argv))
    if not 1 <= args.devices <= MAX_DEVICES:
        raise DemoUserError(f"--devices must be between 1 and {MAX_DEVICES:,}, got {args.devices}")
    if not 1 <= args.top <= MAX_TOP:
        raise DemoUserError(f"--top must be between 1 and {MAX_TOP}, got {args.top}")
    if not 1 <= args.threads <= MAX_THREADS:
        raise DemoUserError(f"--threads must be between 1 and {MAX_THREADS}, got {args.threads}")
    if not math.isfinite(args.epsilon):
        raise DemoUserError(f"--epsilon must be a finite number, got {args.epsilon}")
    if args.seed is not None and args.seed < 0:
        raise DemoUserError(f"--seed must be >= 0, got {args.seed}")
    chart: str | None = None if args.no_chart else (args.chart or DEFAULT_CHART)
    if chart is not None:
        parent = Path(chart).expanduser().resolve().parent
        if not parent.is_dir():
            raise DemoUserError(f"--chart {chart}: directory {parent} does not exist")
    if args.workdir is not None and not Path(args.workdir).is_dir():
        raise DemoUserError(f"--workdir {args.workdir}: not a directory")
    if args.server == "gunicorn" and importlib.util.find_spec("gunicorn") is None:
        raise DemoUserError(f"--server gunicorn: gunicorn is not installed ({install_hint('server')})")
    return DemoConfig(
        devices=args.devices,
        epsilon=args.epsilon,
        mechanism=args.mechanism,
        k=args.k,
        m=args.m,
        seed=args.seed,
        top=args.top,
        chart=chart,
        chart_explicit=args.chart is not None,
        workdir=args.workdir,
        keep=args.keep,
        threads=args.threads,
        server=args.server,
    )


def build_specs(config: DemoConfig) -> tuple[MetricSpec, MetricSpec]:
    """The two metric specs, flag then sketch (raises InvalidParameterError for a bad ε, k or m)."""
    flag = MetricSpec(
        name=FLAG_METRIC,
        params=params_from_dict({"mechanism": FLAG_MECHANISM, "epsilon": config.epsilon}),
        description="ldptel demo: is dark mode on (randomized response)",
    )
    sketch = MetricSpec(
        name=SKETCH_METRIC,
        params=params_from_dict({"mechanism": config.mechanism, "epsilon": config.epsilon, "k": config.k, "m": config.m}),
        description=f"ldptel demo: the emoji a device used most today ({config.mechanism})",
    )
    return flag, sketch


def build_words_spec(config: DemoConfig) -> MetricSpec:
    """The discovered metric: words typed, WORDS_PER_DEVICE reports per device and day."""
    params = {"mechanism": WORDS_MECHANISM, "epsilon": config.epsilon, "k": WORDS_K, "m": WORDS_M, "max_bytes": WORDS_MAX_BYTES}
    return MetricSpec(name=WORDS_METRIC, params=params_from_dict(params), reports_per_day=WORDS_PER_DEVICE,
                      description=f"ldptel demo: words typed ({WORDS_MECHANISM}, discovered without a word list)")


# Numeric metrics: each device's session length in seconds, from a shipped heavy-tailed model (lognormal,
# median 95 s, σ = 1.2: mean ≈ 195 s, p90 ≈ 440 s, p99 ≈ 1,550 s, as web and app session lengths are),
# clipped to [0, 3600] s on the device. Its mean (dhm) and a 32-bucket log histogram for percentiles.
SESSION_MEAN_METRIC = "demo.session_s"
SESSION_HIST_METRIC = "demo.session_hist"
SESSION_MEDIAN_S = 95.0
SESSION_SIGMA = 1.2
SESSION_RANGE = (0.0, 3600.0)
SESSION_BUCKETS = 32
SESSION_PERCENTILES = (50.0, 90.0, 99.0)


def build_numeric_specs(config: DemoConfig) -> tuple[MetricSpec, MetricSpec]:
    """The session-length metrics, mean then histogram, at the demo's ε."""
    from ldptel.client import bucket_edges

    lo, hi = SESSION_RANGE
    mean = MetricSpec(
        name=SESSION_MEAN_METRIC,
        params=params_from_dict({"mechanism": "mean", "epsilon": config.epsilon, "lo": lo, "hi": hi}),
        description="ldptel demo: session length in seconds (bounded mean)",
    )
    edges = list(bucket_edges(lo, hi, SESSION_BUCKETS, scale="log"))
    hist = MetricSpec(
        name=SESSION_HIST_METRIC,
        params=params_from_dict({"mechanism": "num-histogram", "epsilon": config.epsilon, "edges": edges}),
        description="ldptel demo: session length in seconds (log-bucket histogram, percentiles)",
    )
    return mean, hist
