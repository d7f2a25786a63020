"""The demo's result: the top-k estimates beside the true counts, the rr proportion beside the true share,
the summary (wall time, delivery, ε, accuracy) and the chart, all drawn with :mod:`ldptel.aggregator.render`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from ldptel.aggregator.demo.config import FLAG_METRIC, SESSION_RANGE, SKETCH_METRIC, WORDS_METRIC, DemoConfig
from ldptel.aggregator.demo.distribution import Distribution
from ldptel.aggregator.demo.errors import DemoFailure
from ldptel.aggregator.demo.fleet import FleetStats
from ldptel.aggregator.demo.progress import Timings
from ldptel.aggregator.render import MARKER_COLOR, interval_bars, new_figure, save_figure, table
from ldptel.client.protocol.specs import MetricSpec

if TYPE_CHECKING:
    from ldptel.aggregator.discover import DiscoverResult
    from ldptel.aggregator.query import FrequencyResult, HistogramResult, Proportion, QueryResult

FLAG_COLOR = "#55a868"
NAME_WIDTH = 34  # of the emoji's name in the table
TICK_NAME_WIDTH = 26  # ... and under the chart's bars
CHART_DPI = 110


@dataclass(kw_only=True)
class Report:
    config: DemoConfig
    dist: Distribution
    specs: tuple[MetricSpec, MetricSpec]  # flag, sketch: as the ingest service served them
    true_counts: np.ndarray
    true_flags: int
    flag: FrequencyResult
    sketch: QueryResult
    stats: FleetStats
    folded: int
    session: tuple[QueryResult, HistogramResult]  # session length: mean, histogram with percentiles
    true_seconds: np.ndarray
    words: Distribution | None = None  # the discovered metric: its true word list (never given to the aggregator),
    true_words: np.ndarray | None = None  # how often each word was typed,
    found: DiscoverResult | None = None  # and what `ldptel discover` found
    _rows: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        index = {v: i for i, v in enumerate(self.dist.values)}
        order = np.argsort(-self.true_counts, kind="stable")
        true_rank = np.empty_like(order)
        true_rank[order] = np.arange(1, order.size + 1)
        est = self.sketch.estimate
        for label, count, lo, hi, se in zip(est.labels, est.counts.tolist(), est.ci_low.tolist(),
                                            est.ci_high.tolist(), est.stderr.tolist(), strict=True):
            j = index[label]
            truth = int(self.true_counts[j])
            self._rows.append({
                "value": label, "name": self.dist.names[j], "estimate": count, "stderr": se, "ci_low": lo,
                "ci_high": hi, "true": truth, "true_rank": int(true_rank[j]), "inside": lo <= truth <= hi,
            })

    # summary numbers
    @property
    def n(self) -> int:
        return int(self.sketch.n)

    @property
    def proportion(self) -> Proportion:
        """The estimated dark-mode share (the flag metric is rr, whose results carry a proportion)."""
        prop = self.flag.proportion
        if prop is None:
            raise DemoFailure(f"{FLAG_METRIC} gave no proportion (its mechanism is {self.flag.mechanism})")
        return prop

    @property
    def true_share(self) -> float:
        return self.true_flags / max(self.config.devices, 1)

    def mae(self) -> tuple[float, float]:
        """Mean absolute error of the shown estimates (reports, and frequency in percentage points)."""
        errors = [abs(row["estimate"] - row["true"]) for row in self._rows]
        mean = float(np.mean(errors)) if errors else float("nan")
        return mean, 100.0 * mean / max(self.n, 1)

    def covered(self) -> int:
        return sum(row["inside"] for row in self._rows)

    def recall(self) -> int:
        return sum(row["true_rank"] <= len(self._rows) for row in self._rows)

    def print_results(self, out: TextIO) -> None:
        flag_spec, sketch_spec = self.specs
        est = self.sketch.estimate
        out.write(
            f"\n{SKETCH_METRIC}: {sketch_spec.mechanism}, ε = {sketch_spec.effective_epsilon:.4g}, "
            f"k = {self.config.k}, m = {self.config.m} · "
            f"n = {self.n:,} reports · top {len(self._rows)} of {len(self.dist.values)} by estimate · "
            f"{est.confidence:.0%} intervals\n"
        )
        headers = ("rank", "emoji", "name", "estimate", f"{est.confidence:.0%} interval", "true", "true rank", "in")
        cells = [
            (str(i), row["value"], row["name"][:NAME_WIDTH], f"{row['estimate']:,.0f}",
             f"[{row['ci_low']:,.0f}, {row['ci_high']:,.0f}]", f"{row['true']:,}", str(row["true_rank"]),
             "yes" if row["inside"] else "NO")
            for i, row in enumerate(self._rows, 1)
        ]
        table(headers, cells, out, left={1, 2}, rule=False)
        self.print_words(out)
        prop = self.proportion
        inside = prop.ci_low <= self.true_share <= prop.ci_high
        out.write(
            f"\n{FLAG_METRIC} ({flag_spec.mechanism}, ε = {flag_spec.effective_epsilon:.4g}): dark mode on for "
            f"{100 * prop.estimate:.2f}% estimated ({self.flag.confidence:.0%} interval {100 * prop.ci_low:.2f}% to "
            f"{100 * prop.ci_high:.2f}%), true {100 * self.true_share:.2f}% ({self.true_flags:,} of "
            f"{self.config.devices:,}): {'inside' if inside else 'OUTSIDE'} the interval\n"
        )
        self.print_session(out)
        out.flush()

    def print_words(self, out: TextIO) -> None:
        """The discovered words, ranked, beside how often each was really typed (and its true rank)."""
        if self.found is None or self.words is None or self.true_words is None:
            return
        res, disc = self.found.result, self.found.discovery
        truth = dict(zip(self.words.values, self.true_words.tolist(), strict=True))
        order = np.argsort(-self.true_words, kind="stable")
        rank = {self.words.values[j]: i for i, j in enumerate(order.tolist(), 1)}
        est = res.estimate
        spec = res.mechanism
        out.write(
            f"\n{WORDS_METRIC}: {spec}, discovered with no word list · n = {res.n:,} reports · "
            f"{len(disc.estimate.labels)} words at ≥ {disc.threshold:.2f} stderr, {disc.examined:,} candidates examined "
            f"in {len(disc.stages)} rounds · {est.confidence:.0%} intervals\n"
        )
        cells = []
        for i, (word, count, lo, hi) in enumerate(zip(est.labels, est.counts.tolist(), est.ci_low.tolist(),
                                                        est.ci_high.tolist(), strict=True), 1):
            true = truth.get(word)
            cells.append((str(i), word, f"{count:,.0f}", f"[{lo:,.0f}, {hi:,.0f}]",
                          "-" if true is None else f"{true:,}", "NOT TYPED" if true is None else str(rank[word]),
                          "yes" if true is not None and lo <= true <= hi else "NO"))
        table(("rank", "word", "estimate", f"{est.confidence:.0%} interval", "true", "true rank", "in"), cells, out,
              left={1}, rule=False)
        top = [self.words.values[j] for j in order[: len(est.labels)].tolist()]
        out.write(f"true top {len(top)}: {' '.join(top)}\n")

    def print_session(self, out: TextIO) -> None:
        """The session length: estimated mean and percentiles with intervals beside the truth (clipped values)."""
        mean, hist = self.session
        clipped = np.clip(self.true_seconds, *SESSION_RANGE)
        est = mean.estimate
        rows = [[est.labels[0], f"{est.counts[0]:,.1f}", f"[{est.ci_low[0]:,.1f}, {est.ci_high[0]:,.1f}]", f"{clipped.mean():,.1f}",
                 "yes" if est.ci_low[0] <= clipped.mean() <= est.ci_high[0] else "NO"]]
        for pc in hist.percentiles:
            true = float(np.sort(clipped)[max(int(np.ceil(pc.percentile / 100 * clipped.size)) - 1, 0)])
            rows.append([f"p{pc.percentile:g}", f"{pc.estimate:,.1f}", f"[{pc.ci_low:,.1f}, {pc.ci_high:,.1f}]",
                         f"{true:,.1f}", "yes" if pc.ci_low <= true <= pc.ci_high else "NO"])
        out.write(f"\nsession length, seconds ({mean.mechanism} and {hist.mechanism}; {mean.note}):\n")
        table(["", "estimate", f"{est.confidence:.0%} interval", "true", "in"], rows, out, rule=False)

    def print_summary(self, out: TextIO, *, times: Timings, seed: int, chart: str | None) -> None:
        flag_spec, sketch_spec = self.specs
        wall = times.span("start", "done")
        fleet_time = times.span("ready", "fleet")
        mae, mae_pp = self.mae()
        k = len(self._rows)
        s = self.stats
        out.write("\n")
        out.write(
            f"wall time: {wall:.1f} s (start {times.span('start', 'ready'):.1f} s, devices {fleet_time:.1f} s = "
            f"{self.config.devices / max(fleet_time, 1e-9):,.0f} devices/s, fold wait {times.span('fleet', 'folded'):.1f} s, "
            f"estimate and chart {times.span('folded', 'done'):.1f} s)\n"
        )
        out.write(f"devices: {self.config.devices:,} (seed {seed}, {self.config.threads} threads)\n")
        out.write(
            f"reports delivered: {s.delivered:,} of {s.queued:,} queued (refused {s.refused}, upload retries "
            f"{s.upload_errors}); folded by the aggregator: {self.folded:,}\n"
        )
        out.write(
            f"epsilon per report (effective): {SKETCH_METRIC} {sketch_spec.effective_epsilon:.4f} "
            f"({sketch_spec.mechanism}), {FLAG_METRIC} {flag_spec.effective_epsilon:.4f} ({flag_spec.mechanism})\n"
        )
        out.write(
            f"accuracy: top-{k} mean absolute error {mae:,.1f} reports = {mae_pp:.2f} percentage points of frequency; "
            f"{self.covered()}/{k} true counts inside their {self.sketch.confidence:.0%} intervals; "
            f"{self.recall()}/{k} of the true top {k} found\n"
        )
        if chart is not None:
            out.write(f"chart: {chart}\n")
        out.flush()

    def chart(self, path: str) -> None:
        """Left: the top-k estimates with intervals and the true counts; right: the dark-mode share."""
        rows = self._rows
        flag_spec, sketch_spec = self.specs
        fig = new_figure("--chart", figsize=(max(7.0, 0.55 * len(rows) + 3.5), 5.0))
        ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [max(len(rows), 3), 1.2]})
        counts = np.array([row["estimate"] for row in rows])
        below = counts - np.array([row["ci_low"] for row in rows])
        above = np.array([row["ci_high"] for row in rows]) - counts
        x = interval_bars(ax, counts, below, above, label=f"estimate ± {self.sketch.confidence:.0%} interval")
        ax.scatter(x, [row["true"] for row in rows], marker="D", color=MARKER_COLOR, zorder=3, label="true count")
        ax.set_xticks(x, [f"{i}. {row['name'][:TICK_NAME_WIDTH]}" for i, row in enumerate(rows, 1)], rotation=60,
                      ha="right", fontsize=8)
        ax.set_ylabel("devices")
        ax.set_title(
            f"{SKETCH_METRIC}: {sketch_spec.mechanism}, ε = {sketch_spec.effective_epsilon:.3g}, "
            f"{self.config.devices:,} devices", fontsize=10
        )
        ax.legend(fontsize=8)
        prop = self.proportion
        ax2.bar([0], [100 * prop.estimate], yerr=[[100 * (prop.estimate - prop.ci_low)], [100 * (prop.ci_high - prop.estimate)]],
                capsize=6, color=FLAG_COLOR, width=0.6)
        ax2.scatter([0], [100 * self.true_share], marker="D", color=MARKER_COLOR, zorder=3)
        ax2.set_xticks([0], ["dark mode on"], fontsize=8)
        ax2.set_xlim(-0.8, 0.8)
        ax2.set_ylim(0, max(100 * prop.ci_high, 100 * self.true_share) * 1.3)
        ax2.set_ylabel("% of devices")
        ax2.set_title(f"dark mode\n({flag_spec.mechanism}, ε = {flag_spec.effective_epsilon:.3g})", fontsize=10)
        save_figure(fig, path, dpi=CHART_DPI, what="the chart", image_format="png")
