// ldptel dashboard: every page is a view of the JSON API (/api/...), which returns exactly what
// `ldptel estimate ... --format json` prints. Charts are inline SVG; no library, no build step.
//
// Rendering is generic over the estimate document: rows are drawn by their "value" label with
// "estimate", "ci_low", "ci_high" (and "adjusted" when post-processed); any other row key becomes a table
// column; any top-level object with estimate/ci_low/ci_high (rr's "proportion", a numeric metric's mean, ...)
// becomes a summary card. SUMMARY_FORMATS and COLUMN_FORMATS are the hooks for new kinds of estimates.
// Which page to draw follows from the "kind" of the metric's version (/api/metrics/<name>: kind_by_version) and
// of every estimate document, through one registry, KINDS (the Python side's is ldptel.aggregator.render):
// never from a mechanism's name, its params fields or a capability flag. What a query takes besides (candidates
// required, labels or none; the estimators; a default top) comes with the metric's summary.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const SERIES_MAX = 8; // lines in the per-day chart (the table has every row)
const COUNT = new Intl.NumberFormat("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
const INT = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const fmtCount = (x) => (x === null || x === undefined || Number.isNaN(x) ? "–" : COUNT.format(x));
const fmtInt = (x) => (x === null || x === undefined ? "?" : INT.format(x));
const fmtShare = (x) => (x === null || x === undefined || Number.isNaN(x) ? "–" : (100 * x).toFixed(2) + "%");
const fmtEps = (x) => Number(x).toFixed(4).replace(/\.?0+$/, "");
const fmtNumber = (x) => (typeof x === "number" ? (Math.abs(x) >= 1000 ? COUNT.format(x) : x.toPrecision(4)) : String(x));
const fmtEdge = (x) => (Math.abs(x) >= 1000 ? Number((x / 1000).toPrecision(3)) + "k" : String(Number(x.toPrecision(3))));
const fmtLevel = (p) => "p" + Number(p.toPrecision(6));
const pct = (doc) => Math.round(100 * doc.confidence);

// How a summary card and a table column show their numbers (hooks: add keys for new estimate kinds).
const SUMMARY_FORMATS = { proportion: { title: "share of true", fmt: fmtShare } };
const COLUMN_FORMATS = {
  day: { title: "day", fmt: String, text: true },
  n: { title: "n", fmt: fmtInt },
  value: { title: "value", fmt: String, text: true },
  estimator: { title: "estimator", fmt: String, text: true },
  estimate: { title: "estimate", fmt: fmtCount },
  stderr: { title: "stderr", fmt: fmtCount },
  ci_low: { title: "ci low", fmt: fmtCount },
  ci_high: { title: "ci high", fmt: fmtCount },
  frequency: { title: "share", fmt: fmtShare },
  adjusted: { title: "post-processed", fmt: fmtCount },
  adjusted_frequency: { title: "post-processed share", fmt: fmtShare },
  significant: { title: "≠ 0 after selection", fmt: (x) => (x ? "*" : ""), text: true }, // over all the candidates
};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function showError(message) {
  document.getElementById("error").textContent = message || "";
}

async function api(path, body) {
  const init = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const resp = await fetch(path, { credentials: "same-origin", ...init });
  if (resp.status === 401) {
    window.location.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
    throw new Error("not logged in");
  }
  const doc = await resp.json();
  if (!resp.ok) throw new Error(doc.message || doc.error || resp.statusText);
  return doc;
}

// "Nice" axis ticks from a tick at or below lo to one at or above hi (the axis spans them).
function ticks(lo, hi, count = 5) {
  if (!(hi > lo)) hi = lo + 1;
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw);
  const out = [];
  const last = Math.ceil(hi / step - 1e-9) * step;
  for (let t = Math.floor(lo / step + 1e-9) * step; t <= last + step * 1e-9; t += step) out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

function tickLabel(t, share) {
  if (share) return (100 * t).toFixed(Math.abs(t) < 0.1 && t !== 0 ? 1 : 0) + "%";
  return Math.abs(t) >= 1e6 ? (t / 1e6).toFixed(1) + "M" : Math.abs(t) >= 1e4 ? (t / 1e3).toFixed(0) + "k" : INT.format(t);
}

// ------------------------------------------------------------------------------------------- metric list
function sparkline(days) {
  const width = 120, height = 28;
  const node = svg("svg", { class: "spark", viewBox: `0 0 ${width} ${height}`, role: "img" });
  if (!days.length) return node;
  const max = Math.max(...days.map((d) => d.n || 0), 1);
  const w = width / Math.max(days.length, 7);
  days.forEach((d, i) => {
    // a day under the metric's min_reports has no count (d.n null): a flat mark and the reason
    const h = d.n === null ? 1 : Math.max(1, (d.n / max) * (height - 2));
    const bar = svg("rect", { class: "nbar", x: i * w + 0.5, y: height - h, width: Math.max(1, w - 1), height: h });
    bar.append(svg("title", {}, d.n === null ? `${d.day}: ${d.withheld}` : `${d.day}: ${fmtInt(d.n)} reports`));
    node.append(bar);
  });
  return node;
}

async function indexPage() {
  const { metrics } = await api("/api/metrics");
  const body = document.querySelector("#metrics tbody");
  if (!metrics.length) {
    body.append(el("tr", {}, el("td", { colspan: "12", text: "No metrics yet: create one with `ldptel metrics create`." })));
    return;
  }
  for (const m of metrics) {
    const days = m.reports_by_day;
    const last = days.length ? days[days.length - 1] : null;
    const row = el("tr", { dataset: { metric: m.name } },
      el("td", {}, el("a", { href: `/metrics/${encodeURIComponent(m.name)}`, text: m.name })),
      el("td", { class: "text badges" }, el("span", { class: `badge ${m.status}`, text: m.status }),
        m.above_default_policy ? el("span", { class: "badge above-policy", title: m.above_default_policy,
          dataset: { mark: "above_default_policy" }, text: "above default policy" }) : ""),
      el("td", { class: "text", text: m.mechanism }),
      el("td", { text: fmtEps(m.epsilon), dataset: { col: "epsilon" } }),
      el("td", { text: fmtEps(m.effective_epsilon), dataset: { col: "effective_epsilon" } }),
      el("td", { text: m.versions.length > 1 ? `${m.version} (of ${m.versions.length})` : String(m.version) }),
      el("td", { class: "text", text: m.shape || "–" }),
      el("td", { text: String(m.reports_per_day) }),
      el("td", { class: "text" }, sparkline(days)),
      el("td", { text: !last ? "no reports yet" : last.n === null ? `withheld on ${last.day}` : `${fmtInt(last.n)} on ${last.day}`,
        title: last && last.n === null ? last.withheld : "", dataset: { col: "last_day" } }),
      el("td", { text: String((m.days_by_version[String(m.version)] || []).length) }),
      el("td", { text: m.lag === null ? "?" : fmtInt(m.lag), dataset: { col: "lag" } }));
    body.append(row);
  }
}

// ------------------------------------------------------------------------------------------ metric page
// The empty state of a metric whose queries need candidates: the shipped lists (one button each), a file, and
// the discovery metrics that find values without a list. ``use`` puts the values in the form and runs it.
async function emptyState(use) {
  const file = document.getElementById("candidates-file");
  file.addEventListener("change", async () => {
    if (!file.files.length) return;
    const text = await file.files[0].text();
    use(text.split(/\r?\n/).map((line) => line.split("\t")[0].trim()).filter((v) => v && !v.startsWith("#")).join("\n"));
  });
  const [lists, { metrics }] = await Promise.all([api("/api/candidate-lists"), api("/api/metrics")]);
  const shipped = document.getElementById("shipped-lists");
  shipped.replaceChildren(...lists.map((l) => {
    const button = el("button", { type: "button", class: "plain", dataset: { list: l.name }, text: `${l.name} (${fmtInt(l.count)} values)`, title: l.description });
    button.addEventListener("click", async () => use((await api(`/api/candidate-lists/${encodeURIComponent(l.name)}`)).values.join("\n")));
    return button;
  }));
  if (!lists.length) shipped.textContent = "none installed";
  const found = metrics.filter((m) => m.kind === "discovery");
  if (found.length) document.getElementById("discovery-links").replaceChildren(...found.flatMap((m, i) =>
    [i ? ", " : "", el("a", { href: `/metrics/${encodeURIComponent(m.name)}`, text: m.name })]));
}

const FORM_KEYS = ["from", "to", "version", "top", "estimator", "postprocess", "percentiles", "by", "where"];
const shownField = (form, key) => !form.elements[key].closest("label").hidden;

// The form's parameters, leaving out the fields this metric's page hides.
function queryBody(form) {
  const data = new FormData(form);
  const body = {};
  for (const key of FORM_KEYS) {
    const v = (data.get(key) || "").trim();
    if (v && shownField(form, key)) body[key] = v;
  }
  const text = data.get("candidates") || "";
  if (text.trim() && shownField(form, "candidates")) body.candidates = text;
  return body;
}

function jsonLink(path, body) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(body)) {
    if (k === "candidates") v.split("\n").map((s) => s.trim()).filter((s) => s && !s.startsWith("#")).forEach((c) => params.append("candidate", c));
    else params.set(k, v);
  }
  return `${path}?${params}`;
}

// The reports, any top-level estimate with an interval, and for numeric summaries each row (mean, sum, count)
// with the clipping note; a discovery's threshold and walk.
function summaryCards(doc, kind) {
  const box = document.getElementById("summary");
  box.replaceChildren();
  const span = doc.days.length ? `${doc.days[0]} – ${doc.days[doc.days.length - 1]} · ${doc.days.length} day(s)` : "no days";
  box.append(statCard("reports", fmtInt(doc.n), span, "n"));
  const interval = (fmt, v) => `${pct(doc)}% interval ${fmt(v.ci_low)} – ${fmt(v.ci_high)}`;
  for (const [key, val] of Object.entries(doc)) {
    if (!val || typeof val !== "object" || Array.isArray(val) || !("estimate" in val && "ci_low" in val && "ci_high" in val)) continue;
    const spec = SUMMARY_FORMATS[key] || { title: key, fmt: fmtNumber };
    box.append(statCard(spec.title, spec.fmt(val.estimate), interval(spec.fmt, val), key));
  }
  if (!kind.counts) for (const r of doc.rows) box.append(summaryRowCard(doc, r, interval));
  // Both uncertainties, labelled: the proportion's population interval, and the fleet when devices are sampled.
  const pop = doc.population && doc.population.proportion;
  if (pop && doc.proportion) box.append(statCard("share of true · population", fmtShare(doc.proportion.estimate),
    `${pct(doc)}% interval ${fmtShare(pop.ci_low)} – ${fmtShare(pop.ci_high)} · adds the sampling of the reporting devices from the fleet`, "population"));
  if (doc.fleet) box.append(statCard(`fleet · sample rate ${doc.fleet.sample_rate}`, fmtInt(doc.fleet.devices),
    `devices ± ${fmtInt(doc.fleet.devices_stderr)} · counts ÷ ${doc.fleet.sample_rate} (population uncertainty) · amplified ε ` +
    `${fmtEps(doc.fleet.amplified_epsilon)}: ${doc.fleet.amplified_epsilon_note}`, "fleet"));
  // The central (ε, δ) of the shuffled reports beside the local ε, or why it does not apply (ldp-math-2 §5).
  if (doc.central) {
    const c = doc.central;
    const local = doc.local_epsilon === undefined || doc.local_epsilon === null ? "" : `local ε ${fmtEps(doc.local_epsilon)} per report · `;
    box.append(statCard("central ε", c.applicable ? fmtEps(c.epsilon) : "n/a",
      local + (c.applicable ? `at δ ${c.delta.toExponential(0)} · ${c.basis}` : `not applicable: ${c.reason}`), "central"));
  }
  if (doc.withheld && doc.withheld.length) box.append(el("div", { class: "stat note-card", dataset: { summary: "withheld" } },
    el("div", { class: "label", text: "withheld" }),
    el("div", { class: "small", text: doc.withheld.map((w) => `${w.what}: ${w.reason}`).join(" · ") + " (left out of every total)" })));
  if (doc.discovery) {
    const d = doc.discovery;
    box.append(statCard("values found", fmtInt(d.found), `at ≥ ${d.threshold_stderr.toFixed(2)} stderr` +
      (d.alpha === null ? "" : ` (α = ${d.alpha} over ${fmtInt(d.test_bound)} possible tests)`), "found"));
    const examined = d.stages.reduce((a, s) => a + s.examined, 0);
    box.append(statCard("candidates examined", fmtInt(examined), `${fmtInt(d.tested)} tested · ${d.keep} kept per round`, "examined"));
  }
  if (doc.note) box.append(el("div", { class: "stat note-card", dataset: { summary: "note" } },
    el("div", { class: "label", text: "note" }), el("div", { class: "small", text: doc.note })));
}

// A numeric summary's row (mean, sum, count): an exact row (stderr 0: the count of reports) is an integer with its
// unit and no interval; an estimated one says it is in the metric's own unit, with its interval and stderr.
function summaryRowCard(doc, r, interval) {
  if (r.stderr === 0 && r.ci_low === r.ci_high) {
    return statCard(r.value, `${fmtInt(r.estimate)} reports`, "exact: the reports folded (not an estimate)", r.value);
  }
  return statCard(`${r.value} · in the value's unit`, fmtCount(r.estimate), `${interval(fmtCount, r)} · stderr ${fmtCount(r.stderr)}`, r.value);
}

function statCard(label, big, small, key) {
  return el("div", { class: "stat", dataset: { summary: key } },
    el("div", { class: "label", text: label }), el("div", { class: "big", text: big }), el("div", { class: "small", text: small }));
}

// Horizontal bars: each row's estimate, its interval as a whisker, the post-processed value as a diamond.
const drawable = (r) => "value" in r && ["estimate", "ci_low", "ci_high"].every((k) => typeof r[k] === "number");
const nothing = (text) => el("p", { class: "muted", text });

function intervalChart(doc) {
  const rows = doc.rows.filter(drawable);
  if (!rows.length) return nothing("No rows with an estimate and an interval to draw: see the table below.");
  const labelled = doc.estimator === "both";
  const rowH = 26, left = 150, right = 24, top = 8, bottom = 28, width = 860;
  const height = top + bottom + rows.length * rowH;
  const lo = Math.min(0, ...rows.map((r) => r.ci_low)), hi = Math.max(0, ...rows.map((r) => r.ci_high), ...rows.map((r) => r.adjusted ?? 0));
  const ts = ticks(lo, hi, 8);
  const x0 = Math.min(lo, ts[0]), x1 = Math.max(hi, ts[ts.length - 1]);
  const X = (v) => left + ((v - x0) / (x1 - x0 || 1)) * (width - left - right);
  const node = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "estimates with intervals" });
  for (const t of ts) {
    node.append(svg("line", { class: "grid", x1: X(t), x2: X(t), y1: top, y2: height - bottom }));
    node.append(svg("text", { x: X(t), y: height - bottom + 16, "text-anchor": "middle" }, tickLabel(t, false)));
  }
  node.append(svg("line", { class: "axis", x1: X(0), x2: X(0), y1: top, y2: height - bottom }));
  rows.forEach((r, i) => {
    const y = top + i * rowH, mid = y + rowH / 2;
    const name = labelled ? `${r.value} · ${r.estimator}` : String(r.value);
    node.append(svg("text", { class: "label", x: left - 8, y: mid + 4, "text-anchor": "end" }, name.length > 22 ? name.slice(0, 21) + "…" : name));
    const bar = svg("rect", { class: `bar ${r.estimator || ""}`, x: Math.min(X(0), X(r.estimate)), y: y + 5, width: Math.abs(X(r.estimate) - X(0)), height: rowH - 10 });
    bar.append(svg("title", {}, `${r.value}: ${fmtCount(r.estimate)} (${Math.round(100 * doc.confidence)}% interval ${fmtCount(r.ci_low)} – ${fmtCount(r.ci_high)})`));
    node.append(bar);
    node.append(svg("line", { class: "whisker", x1: X(r.ci_low), x2: X(r.ci_high), y1: mid, y2: mid }));
    for (const v of [r.ci_low, r.ci_high]) node.append(svg("line", { class: "whisker", x1: X(v), x2: X(v), y1: mid - 5, y2: mid + 5 }));
    if (doc.postprocess !== "none" && "adjusted" in r) {
      const ax = X(r.adjusted);
      node.append(svg("path", { class: "marker", d: `M${ax} ${mid - 6}L${ax + 6} ${mid}L${ax} ${mid + 6}L${ax - 6} ${mid}Z` }));
    }
  });
  const legend = document.getElementById("estimates-legend");
  legend.replaceChildren(
    el("span", {}, el("span", { class: "swatch", dataset: { role: "bar" } }), `estimate (raw, unbiased) with ${Math.round(100 * doc.confidence)}% interval`));
  legend.firstChild.firstChild.classList.add("swatch-bar");
  if (labelled) {
    legend.firstChild.lastChild.textContent = ` plain estimate with ${Math.round(100 * doc.confidence)}% interval`;
    legend.append(el("span", {}, el("span", { class: "swatch swatch-corrected" }), "collision-corrected estimate"));
  }
  if (doc.postprocess !== "none") legend.append(el("span", {}, el("span", { class: "swatch swatch-marker" }), `${doc.postprocess} (post-processed)`));
  return node;
}

// A numeric histogram: its buckets in order (equal widths), each raw estimate with its interval as a whisker,
// the post-processed count as a diamond, and each asked percentile as a line with its interval shaded.
function histogramChart(doc) {
  const rows = doc.rows, edges = doc.edges || [];
  if (!rows.length || rows.length !== edges.length - 1) return nothing("No buckets to draw: see the table below.");
  const width = 860, height = 330, left = 64, right = 16, top = 26, bottom = 44;
  const lo = Math.min(0, ...rows.map((r) => r.ci_low)), hi = Math.max(0, ...rows.map((r) => r.ci_high), ...rows.map((r) => r.adjusted ?? 0));
  const ts = ticks(lo, hi, 6);
  const y0 = Math.min(lo, ts[0]), y1 = Math.max(hi, ts[ts.length - 1]);
  const bw = (width - left - right) / rows.length;
  const X = (pos) => left + pos * bw; // pos: bucket index plus the share of the way through it
  const Y = (v) => top + (1 - (v - y0) / (y1 - y0 || 1)) * (height - top - bottom);
  const at = (x) => { // the position of a value on the bucket axis (linear inside its bucket)
    let b = edges.findIndex((e, i) => i < edges.length - 1 && x < edges[i + 1]);
    if (b < 0) b = edges.length - 2;
    return b + Math.min(1, Math.max(0, (x - edges[b]) / (edges[b + 1] - edges[b])));
  };
  const node = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "buckets with intervals and percentiles" });
  for (const t of ts) {
    node.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: Y(t), y2: Y(t) }));
    node.append(svg("text", { x: left - 6, y: Y(t) + 4, "text-anchor": "end" }, tickLabel(t, false)));
  }
  const every = Math.max(1, Math.ceil(44 / bw));
  edges.forEach((e, i) => {
    if (i % every && i !== edges.length - 1) return;
    node.append(svg("line", { class: "axis", x1: X(i), x2: X(i), y1: Y(y0), y2: Y(y0) + 4 }));
    node.append(svg("text", { x: X(i), y: height - bottom + 18, "text-anchor": "middle" }, fmtEdge(e)));
  });
  node.append(svg("text", { x: left + (width - left - right) / 2, y: height - 6, "text-anchor": "middle" }, "bucket edges (value)"));
  (doc.percentiles || []).forEach((p, k) => {
    const color = `var(--s${(k + 1) % 8})`;
    const band = svg("rect", { class: "pband", x: X(at(p.ci_low)), y: top, width: Math.max(1, X(at(p.ci_high)) - X(at(p.ci_low))), height: Y(y0) - top });
    band.style.fill = color;
    node.append(band);
  });
  node.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: Y(0), y2: Y(0) }));
  rows.forEach((r, i) => {
    const bar = svg("rect", { class: "bar", x: X(i) + 2, y: Math.min(Y(0), Y(r.estimate)), width: Math.max(1, bw - 4), height: Math.abs(Y(r.estimate) - Y(0)) });
    bar.append(svg("title", {}, `${r.value}: ${fmtCount(r.estimate)} (${pct(doc)}% interval ${fmtCount(r.ci_low)} – ${fmtCount(r.ci_high)})`));
    node.append(bar);
    const mid = X(i + 0.5);
    node.append(svg("line", { class: "whisker", x1: mid, x2: mid, y1: Y(r.ci_low), y2: Y(r.ci_high) }));
    for (const v of [r.ci_low, r.ci_high]) node.append(svg("line", { class: "whisker", x1: mid - 4, x2: mid + 4, y1: Y(v), y2: Y(v) }));
    if (doc.postprocess !== "none" && "adjusted" in r) {
      const ay = Y(r.adjusted);
      node.append(svg("path", { class: "marker", d: `M${mid} ${ay - 6}L${mid + 6} ${ay}L${mid} ${ay + 6}L${mid - 6} ${ay}Z` }));
    }
  });
  (doc.percentiles || []).forEach((p, k) => {
    if (p.estimate === null) return; // unresolved: only its interval is drawn
    const color = `var(--s${(k + 1) % 8})`, x = X(at(p.estimate));
    const line = svg("line", { class: "pline", x1: x, x2: x, y1: top - 4, y2: Y(y0) });
    line.style.stroke = color;
    line.append(svg("title", {}, `${fmtLevel(p.percentile)}: ${fmtCount(p.estimate)} (${pct(doc)}% interval ${fmtCount(p.ci_low)} – ${fmtCount(p.ci_high)})`));
    node.append(line);
    const label = svg("text", { class: "plabel", x, y: top - 6 - (k % 2) * 12, "text-anchor": "middle" }, fmtLevel(p.percentile));
    label.style.fill = color;
    node.append(label);
  });
  const legend = document.getElementById("estimates-legend");
  legend.replaceChildren(el("span", {}, el("span", { class: "swatch swatch-bar" }), `bucket count (raw, unbiased) with ${pct(doc)}% interval`));
  if (doc.postprocess !== "none") legend.append(el("span", {}, el("span", { class: "swatch swatch-marker" }), `${doc.postprocess} (post-processed)`));
  (doc.percentiles || []).forEach((p, k) => {
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = `var(--s${(k + 1) % 8})`;
    legend.append(el("span", {}, swatch, `${fmtLevel(p.percentile)} with its ${pct(doc)}% interval (shaded)`));
  });
  return node;
}

// A small table from a list of objects: the given columns, each cell with data-col for the tests.
function fillTable(table, items, cols) {
  table.tHead.replaceChildren(el("tr", {}, ...cols.map(([, title]) => el("th", { text: title }))));
  table.tBodies[0].replaceChildren(...items.map((item) => el("tr", {}, ...cols.map(([key, , fmt]) =>
    el("td", { text: (fmt || String)(item[key]), dataset: { col: key } })))));
}

// Lines per value over the days (gaps where a day has no reports), with interval bands. ``what`` names the
// lines' unit when they are not counts of the reports (a mean, percentiles).
function seriesChart(doc, scale, what, offset = 0) {
  const share = scale === "share" && !what;
  const chosen = doc.estimator === "corrected" ? "corrected" : "plain";
  const byValue = new Map();
  for (const r of doc.rows) {
    if (!drawable(r) || typeof r.n !== "number" || (r.estimator && r.estimator !== chosen)) continue;
    if (!byValue.has(r.value)) byValue.set(r.value, []);
    byValue.get(r.value).push(r);
  }
  const values = [...byValue.keys()].slice(0, SERIES_MAX);
  if (!values.length) return nothing("No per-day rows with an estimate and an interval to draw.");
  // a "first..last" day is a period coarser than a day (past the metric's retention): drawn at its first day
  const start = (d) => Date.parse(String(d).split("..")[0]), end = (d) => Date.parse(String(d).split("..").pop());
  const coarse = doc.days.filter((d) => String(d).includes("..")).length;
  const day0 = start(doc.days[0]), dayMs = 86400000;
  const span = Math.round((end(doc.days[doc.days.length - 1]) - day0) / dayMs);
  const idx = (d) => Math.round((start(d) - day0) / dayMs);
  const y = (r, k) => (share ? r[k] / r.n : r[k]);
  const f = share ? fmtShare : fmtCount;
  const all = values.flatMap((v) => byValue.get(v));
  const lo = Math.min(0, ...all.map((r) => y(r, "ci_low"))), hi = Math.max(...all.map((r) => y(r, "ci_high")), 0);
  const ts = ticks(lo, hi, 5);
  const y0 = Math.min(lo, ts[0]), y1 = Math.max(hi, ts[ts.length - 1]);
  const width = 860, height = 300, left = 64, right = 16, top = 10, bottom = 30;
  const X = (i) => left + (span ? (i / span) * (width - left - right) : (width - left - right) / 2);
  const Y = (v) => top + (1 - (v - y0) / (y1 - y0 || 1)) * (height - top - bottom);
  const node = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "estimates per day" });
  for (const t of ts) {
    node.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: Y(t), y2: Y(t) }));
    node.append(svg("text", { x: left - 6, y: Y(t) + 4, "text-anchor": "end" }, what ? fmtEdge(t) : tickLabel(t, share)));
  }
  const every = Math.max(1, Math.ceil((span + 1) / 10));
  for (let i = 0; i <= span; i += every) {
    const d = new Date(day0 + i * dayMs).toISOString().slice(5, 10);
    node.append(svg("text", { x: X(i), y: height - bottom + 18, "text-anchor": "middle" }, d));
  }
  const legend = document.getElementById("series-legend");
  legend.replaceChildren();
  values.forEach((value, s) => {
    const color = `var(--s${(s + offset) % 8})`;
    const pts = byValue.get(value).map((r) => ({ i: idx(r.day), r }));
    // consecutive days form a segment; a missing day breaks the line and the band
    const segments = [];
    for (const p of pts) {
      const seg = segments[segments.length - 1];
      if (seg && p.i === seg[seg.length - 1].i + 1) seg.push(p);
      else segments.push([p]);
    }
    for (const seg of segments) {
      const upper = seg.map((p) => `${X(p.i)},${Y(y(p.r, "ci_high"))}`);
      const lower = seg.slice().reverse().map((p) => `${X(p.i)},${Y(y(p.r, "ci_low"))}`);
      const band = svg("polygon", { points: upper.concat(lower).join(" ") });
      band.style.fill = color; band.style.opacity = "0.16";
      node.append(band);
      const line = svg("polyline", { points: seg.map((p) => `${X(p.i)},${Y(y(p.r, "estimate"))}`).join(" ") });
      line.style.fill = "none"; line.style.stroke = color; line.style.strokeWidth = "2";
      node.append(line);
    }
    for (const p of pts) {
      const dot = svg("circle", { cx: X(p.i), cy: Y(y(p.r, "estimate")), r: 3 });
      dot.style.fill = color;
      dot.append(svg("title", {}, `${value} on ${p.r.day}: ${f(y(p.r, "estimate"))} (${f(y(p.r, "ci_low"))} – ${f(y(p.r, "ci_high"))}), n = ${fmtInt(p.r.n)}`));
      node.append(dot);
    }
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = color;
    legend.append(el("span", {}, swatch, String(value)));
  });
  const hidden = byValue.size - values.length;
  document.getElementById("series-note").textContent =
    `${what || (share ? "share of each day's reports" : "estimated count")} with ${pct(doc)}% interval bands${what ? "" : `, ${chosen} estimator`}` +
    (hidden > 0 ? ` · ${values.length} of ${byValue.size} values (set top to choose)` : "") +
    (coarse ? ` · ${coarse} point(s) coarser than a day: 32-day periods past the metric's retention, drawn at their first day` : "");
  return node;
}

// A day's own central ε (its shuffled blocks, ldp-math-2 §5), as the CLI's --by-day JSON gives it.
const dayCentral = (c) => !c ? "" : c.applicable ? ` · central ε ${fmtEps(c.epsilon)} (δ ${c.delta.toExponential(0)})` : ` · central ε n/a: ${c.reason}`;

function reportsChart(daily) {
  if (!daily.length) return nothing("No reports in this range.");
  const width = 860, height = 90, left = 64, right = 16, top = 6, bottom = 22;
  const max = Math.max(...daily.map((d) => d.n), 1);
  const w = (width - left - right) / daily.length;
  const node = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "reports per day" });
  node.append(svg("text", { x: left - 6, y: top + 10, "text-anchor": "end" }, tickLabel(max, false)));
  daily.forEach((d, i) => {
    const h = (d.n / max) * (height - top - bottom);
    const bar = svg("rect", { class: "nbar", x: left + i * w + 1, y: height - bottom - h, width: Math.max(1, w - 2), height: h });
    bar.append(svg("title", {}, `${d.day}: ${fmtInt(d.n)} reports${dayCentral(d.central)}`));
    node.append(bar);
  });
  node.append(svg("text", { x: left, y: height - 6 }, daily[0].day));
  node.append(svg("text", { x: width - right, y: height - 6, "text-anchor": "end" }, daily[daily.length - 1].day));
  return node;
}

function rowsTable(doc, kind) {
  const table = document.getElementById("rows");
  const keys = [];
  for (const r of doc.rows) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
  const hide = new Set(doc.estimator === "plain" ? ["estimator"] : []);
  if (doc.postprocess === "none") { hide.add("adjusted"); hide.add("adjusted_frequency"); }
  if (!kind.counts) ["frequency", "adjusted", "adjusted_frequency"].forEach((k) => hide.add(k)); // not shares of the reports
  const cols = keys.filter((k) => !hide.has(k));
  const head = el("tr", {});
  for (const k of cols) {
    const spec = COLUMN_FORMATS[k] || { title: k };
    const title = k === "adjusted" || k === "adjusted_frequency" ? `${doc.postprocess}${k === "adjusted" ? "" : " share"}` : spec.title;
    head.append(el("th", { class: spec.text ? "text" : "", text: title }));
  }
  table.tHead.replaceChildren(head);
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const r of doc.rows) {
    const tr = el("tr", { dataset: { value: String(r.value), estimator: r.estimator || "" } });
    for (const k of cols) {
      const spec = COLUMN_FORMATS[k] || { fmt: fmtNumber };
      tr.append(el("td", { class: spec.text ? "text" : "", text: spec.fmt(r[k]), dataset: { col: k } }));
    }
    body.append(tr);
  }
}

// The renderer of each kind of estimate: the query fields it takes (candidates and estimator also need the metric
// to take them), the endpoint its values come from, its chart (none: the rows are summary cards), whether its
// rows are counts of the reports, and what its per-day series shows.
const KINDS = {
  frequencies: {
    fields: ["candidates", "estimator", "top", "postprocess"], endpoint: "estimate", counts: true, title: "Estimates", chart: intervalChart,
    note: (doc) => `${doc.estimator === "both" ? "plain and corrected estimators" : `${doc.estimator} estimator`} · post-processing: ${doc.postprocess}`,
    series: (doc, daily) => ({ rows: daily, what: "", offset: 0 }),
  },
  discovery: {
    fields: ["top"], endpoint: "discover", counts: true, title: "Discovered values", chart: intervalChart,
    note: (doc) => `ranked by estimate, ${pct(doc)}% intervals`,
    series: (doc, daily) => ({ rows: daily, what: "", offset: 0 }),
  },
  summary: {
    fields: [], endpoint: "estimate", counts: false, title: "", chart: null, note: () => "",
    series: (doc, daily) => ({ rows: { ...daily, rows: daily.rows.filter((r) => r.value === daily.rows[0].value) }, what: "the mean of each day", offset: 0 }),
  },
  histogram: {
    fields: ["postprocess", "percentiles"], endpoint: "estimate", counts: true, title: "Buckets", chart: (doc) => (doc.edges ? histogramChart(doc) : intervalChart(doc)),
    note: (doc) => `${doc.rows.length} buckets · post-processing: ${doc.postprocess}`,
    series: (doc, daily) => (doc.percentiles // each day's percentiles, in the colors of the percentile lines above
      ? { rows: { ...daily, rows: daily.daily.flatMap((d) => (d.percentiles || []).map((p) => ({ day: d.day, n: d.n, value: fmtLevel(p.percentile), ...p }))) }, what: "each day's percentiles", offset: 1 }
      : { rows: daily, what: "", offset: 0 }),
  },
};
const kindOf = (name) => KINDS[name] || KINDS.frequencies;

// Breakdowns (`ldptel estimate NAME --by DIMS`): small multiples, one panel per group with its own intervals, drawn
// by the renderer of the groups' kind (a chart, or summary cards for rows that are not counts); a withheld group
// (below the metric's min_reports) says why instead. The document's "total" is the unbroken estimate.
function groupPanels(doc) {
  const shown = kindOf(doc.kind);
  const panels = [];
  for (const g of doc.groups) {
    const label = doc.by.map((d) => `${d}=${g[d]}`).join(", ");
    const panel = el("div", { class: "group" + (g.result ? "" : " withheld"), dataset: { group: label } });
    panel.append(el("h3", { text: g.result ? `${label} · n = ${fmtInt(g.n)}` : label }));
    if (!g.result) panel.append(el("p", { class: "muted", text: g.withheld }));
    else if (shown.chart) panel.append(shown.chart(g.result));
    else panel.append(el("div", { class: "cards" }, ...g.result.rows.map((r) => statCard(r.value, fmtCount(r.estimate),
      `${pct(g.result)}% interval ${fmtCount(r.ci_low)} – ${fmtCount(r.ci_high)}`, r.value))));
    panels.push(panel);
  }
  return panels;
}

async function metricPage() {
  const name = document.body.dataset.metric;
  const form = document.getElementById("query");
  const info = await api(`/api/metrics/${encodeURIComponent(name)}`);
  const meta = document.getElementById("meta");
  const item = (label, value) => el("span", {}, `${label} `, el("b", { text: value }));
  meta.replaceChildren(item("mechanism", info.mechanism), item("ε", fmtEps(info.epsilon)), item("effective ε", fmtEps(info.effective_epsilon)),
    item("version", `${info.version} of ${info.versions.length}`), item("shape", info.shape || "–"),
    item("reports/device/day", String(info.reports_per_day)), item("status", info.status),
    item("lag", info.lag === null ? "?" : fmtInt(info.lag)));
  if (info.description) meta.append(el("span", { text: info.description }));
  if (info.longitudinal) meta.append(el("span", { class: "small", dataset: { meta: "longitudinal" }, text: info.longitudinal }));
  const versionSelect = form.elements.version;
  for (const v of info.versions.slice().reverse()) versionSelect.append(el("option", { value: String(v), text: `v${v}${v === info.version ? " (current)" : ""}` }));
  const field = (key) => form.elements[key].closest("label");
  const kind = () => kindOf(info.kind_by_version[form.elements.version.value] || info.kind);
  form.elements.candidates.placeholder = info.candidates === "required"
    ? "required: the values to estimate (a sketch has no list of its values)"
    : "optional: the labels to show (default: all)";
  const takes = { candidates: info.candidates !== "none", estimator: info.estimators.length > 1 };
  const kindFields = () => { // the fields of the version's kind (a histogram's buckets stay in order: no top)
    for (const key of ["candidates", "estimator", "top", "postprocess", "percentiles"]) {
      field(key).hidden = !kind().fields.includes(key) || takes[key] === false;
    }
  };
  kindFields();
  if (info.breakdown) { // the metric's dimensions: a selector; where: dimension=value pairs (checked by the server)
    for (const d of info.breakdown.dimensions) form.elements.by.append(el("option", { value: d, text: d }));
    form.elements.where.placeholder = `e.g. ${info.breakdown.dimensions[0]}=${info.breakdown.values[info.breakdown.dimensions[0]][0]}`;
    field("by").hidden = field("where").hidden = false;
    meta.append(el("span", { class: "small", dataset: { meta: "breakdown" }, text: `broken down by ${info.breakdown.dimensions.join(", ")}` +
      " · profile values are sent in clear (not privatized); a group hides each report among that group's reports only" }));
  }

  // defaults: the URL's parameters, else the version's days; candidates are kept per metric in this browser
  const params = new URLSearchParams(location.search);
  const stored = localStorage.getItem(`ldptel.candidates.${name}`);
  if (stored) form.elements.candidates.value = stored;
  if (params.has("candidate")) form.elements.candidates.value = params.getAll("candidate").join("\n");
  for (const key of FORM_KEYS) if (params.get(key)) form.elements[key].value = params.get(key);
  if (params.get("day")) form.elements.from.value = form.elements.to.value = params.get("day"); // the CLI's --day
  const setRange = () => {
    const days = info.days_by_version[form.elements.version.value] || [];
    if (days.length) { form.elements.from.value = days[0]; form.elements.to.value = days[days.length - 1]; }
  };
  if (!params.get("from") && !params.get("to") && !params.get("day")) setRange();
  versionSelect.addEventListener("change", () => { setRange(); kindFields(); });
  if (info.default_top && !params.get("top") && !form.elements.top.value) form.elements.top.value = String(info.default_top);

  let lastSeries = null, seriesWhat = "", seriesOffset = 0;
  const draw = () => {
    if (!lastSeries) return;
    const scale = document.querySelector("input[name=scale]:checked").value;
    document.getElementById("series-chart").replaceChildren(seriesChart(lastSeries, scale, seriesWhat, seriesOffset));
  };
  document.querySelectorAll("input[name=scale]").forEach((r) => r.addEventListener("change", draw));
  const cards = ["estimates-card", "groups-card", "percentiles-card", "discovery-card", "series-card", "table-card", "empty-state"];
  const show = (ids) => cards.forEach((id) => { document.getElementById(id).hidden = !ids.includes(id); });

  const needsCandidates = (body) => info.candidates === "required" && shownField(form, "candidates") && !body.candidates;
  const setCandidates = (text) => { form.elements.candidates.value = text; run(); };
  let emptyLoaded = false; // the lists and the metric list are fetched the first time the empty state shows

  const run = async () => {
    const body = queryBody(form);
    if (needsCandidates(body)) { // a sketch keeps no list of its values: say how to name them, not a red error
      showError("");
      if (!emptyLoaded) { emptyLoaded = true; emptyState(setCandidates).catch((err) => showError(err.message)); }
      show(["empty-state"]);
      document.getElementById("summary").replaceChildren();
      document.body.dataset.state = "ready";
      return;
    }
    const shown = new URLSearchParams(Object.entries(body).filter(([k]) => k !== "candidates"));
    history.replaceState(null, "", `${location.pathname}?${shown}`);
    if (body.candidates) localStorage.setItem(`ldptel.candidates.${name}`, body.candidates);
    showError("");
    document.body.dataset.state = "loading";
    const base = `/api/metrics/${encodeURIComponent(name)}`;
    const k = kind();
    try {
      let doc, daily, seriesBody = body, estimateLink, broken = null;
      const unbroken = Object.fromEntries(Object.entries(body).filter(([key]) => key !== "by"));
      if (k.endpoint === "discover") { // the values come from the walk; the per-day series estimates those values
        estimateLink = jsonLink(`${base}/discover`, body);
        doc = await api(estimateLink);
        if (body.by) { broken = doc; doc = doc.total; }
        const found = doc.rows.map((r) => r.value);
        seriesBody = { ...Object.fromEntries(Object.entries(unbroken).filter(([k]) => k !== "top")), candidates: found.join("\n") };
        daily = found.length ? await api(`${base}/by-day`, seriesBody) : null;
      } else {
        estimateLink = jsonLink(`${base}/estimate`, body);
        seriesBody = unbroken;
        [doc, daily] = await Promise.all([api(`${base}/estimate`, body), api(`${base}/by-day`, unbroken)]);
        if (body.by) { broken = doc; doc = doc.total; }
      }
      const shown = kindOf(doc.kind);
      form.elements.postprocess.options[0].textContent = `default (${doc.postprocess})`; // what the chart used
      summaryCards(doc, shown);
      const visible = ["table-card"];
      if (shown.chart) {
        visible.push("estimates-card");
        document.getElementById("estimates-chart").replaceChildren(shown.chart(doc));
        document.getElementById("estimates-title").textContent = shown.title;
        document.getElementById("estimates-note").textContent =
          `${doc.days[0] || ""} – ${doc.days[doc.days.length - 1] || ""} · n = ${fmtInt(doc.n)} · ` + shown.note(doc) +
          ` · stderr: ${doc.uncertainty || "randomization"} (${doc.uncertainty_meaning || "given the devices that reported"})` +
          (doc.selection ? ` · ${doc.selection.note}` : "");
        document.getElementById("estimates-json").href = estimateLink;
      }
      if (broken) {
        visible.push("groups-card");
        document.getElementById("groups").replaceChildren(...groupPanels(broken));
        document.getElementById("groups-title").textContent = `By ${broken.by.join(", ")}`;
        const withheld = broken.groups.filter((g) => !g.result).length;
        document.getElementById("groups-note").textContent = `${broken.groups.length} group(s), each with its own ` +
          `${pct(doc)}% intervals; they add up to the total above` + (withheld ? ` · ${withheld} withheld below min_reports ${broken.min_reports}` : "") +
          ` · ${broken.profile_note}`;
        document.getElementById("groups-json").href = estimateLink;
      }
      if (doc.percentiles) {
        visible.push("percentiles-card");
        fillTable(document.getElementById("percentiles"), doc.percentiles, [["percentile", "percentile", fmtLevel],
          ["estimate", "estimate", fmtCount], ["ci_low", `${pct(doc)}% interval low`, fmtCount], ["ci_high", `${pct(doc)}% interval high`, fmtCount],
          ["note", "note", (x) => x || ""]]);
        document.getElementById("percentiles-json").href = estimateLink;
      }
      if (doc.discovery) {
        visible.push("discovery-card");
        fillTable(document.getElementById("stages"), doc.discovery.stages, [["round", "round"], ["prefix_bytes", "prefix bytes"],
          ["examined", "candidates examined", fmtInt], ["kept", "kept", fmtInt], ["tested", "tested", fmtInt]]);
        document.getElementById("discovery-json").href = estimateLink;
      }
      // per day: counts of each value; a numeric summary's mean; a histogram's percentiles (else its buckets)
      ({ rows: lastSeries, what: seriesWhat, offset: seriesOffset } = daily ? shown.series(doc, daily) : { rows: null, what: "", offset: 0 });
      document.getElementById("scale-toggle").hidden = !!seriesWhat;
      if (daily) {
        visible.push("series-card");
        draw();
        document.getElementById("reports-chart").replaceChildren(reportsChart(daily.daily));
        document.getElementById("series-json").href = jsonLink(`${base}/by-day`, seriesBody);
      }
      rowsTable(doc, shown);
      show(visible);
    } catch (err) {
      showError(err.message);
      show([]);
      document.getElementById("summary").replaceChildren();
    }
    document.body.dataset.state = "ready";
  };
  form.addEventListener("submit", (e) => { e.preventDefault(); run(); });
  await run();
}

document.addEventListener("DOMContentLoaded", async () => {
  const page = document.body.dataset.page;
  try {
    if (page === "index") await indexPage();
    else if (page === "metric") await metricPage();
  } catch (err) {
    showError(err.message);
  }
  document.body.dataset.state = "ready";
});
