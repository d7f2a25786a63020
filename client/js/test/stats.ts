/**
 * Statistical assertions (as tests/stats.py): chi-square goodness of fit at α = 1e-6, means within z = 6
 * standard errors. Tolerances come from theory, never from tuning.
 */
import assert from "node:assert/strict";

export const Z = 6;
export const ALPHA = 1e-6;

function lnGamma(x: number): number {
  const c = [76.18009172947146, -86.50532032941677, 24.01409824083091, -1.231739572450155, 0.1208650973866179e-2, -0.5395239384953e-5];
  let y = x;
  const tmp = x + 5.5 - (x + 0.5) * Math.log(x + 5.5);
  let ser = 1.000000000190015;
  for (const ci of c) ser += ci / ++y;
  return -tmp + Math.log((2.5066282746310005 * ser) / x);
}

/** Regularized upper incomplete gamma Q(a, x) (series / continued fraction, Numerical Recipes). */
function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  const gln = lnGamma(a);
  if (x < a + 1) {
    let ap = a;
    let del = 1 / a;
    let sum = del;
    for (let n = 0; n < 10000; n++) {
      ap += 1;
      del *= x / ap;
      sum += del;
      if (Math.abs(del) < Math.abs(sum) * 1e-15) break;
    }
    return 1 - sum * Math.exp(-x + a * Math.log(x) - gln);
  }
  let b = x + 1 - a;
  let c = 1 / 1e-300;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 10000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (Math.abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-15) break;
  }
  return Math.exp(-x + a * Math.log(x) - gln) * h;
}

/** Survival function of the chi-square distribution with `df` degrees of freedom. */
export function chiSquareSf(x: number, df: number): number {
  return gammaQ(df / 2, x / 2);
}

/** Observed counts fit the probabilities (chi-square, α = 1e-6); cells with expected < 5 are pooled. */
export function assertChiSquare(observed: number[], probs: number[], what: string): void {
  const n = observed.reduce((a, b) => a + b, 0);
  const total = probs.reduce((a, b) => a + b, 0);
  assert.ok(Math.abs(total - 1) < 1e-9, `${what}: probabilities sum to ${total}`);
  let stat = 0;
  let cells = 0;
  let poolO = 0;
  let poolE = 0;
  observed.forEach((o, i) => {
    const e = n * (probs[i] ?? 0);
    if (e < 5) {
      poolO += o;
      poolE += e;
      return;
    }
    stat += ((o - e) * (o - e)) / e;
    cells += 1;
  });
  if (poolE > 0) {
    if (poolE >= 5) {
      stat += ((poolO - poolE) * (poolO - poolE)) / poolE;
      cells += 1;
    } else {
      assert.ok(poolO <= poolE + Z * Math.sqrt(poolE) + 10, `${what}: ${poolO} reports where ${poolE} expected`);
    }
  }
  const df = Math.max(cells - 1, 1);
  const p = chiSquareSf(stat, df);
  assert.ok(p > ALPHA, `${what}: chi-square ${stat.toFixed(2)} on ${df} df, p = ${p.toExponential(2)} < ${ALPHA} (n = ${n})`);
}

/** |estimate − target| ≤ z·se. */
export function assertClose(estimate: number, target: number, se: number, what: string): void {
  assert.ok(se > 0 && Number.isFinite(se), `${what}: se ${se}`);
  assert.ok(Math.abs(estimate - target) <= Z * se, `${what}: estimate ${estimate} target ${target} > ${Z} × se ${se}`);
}

/** A binomial count against its exact probability (z = 6). */
export function assertBinomial(count: number, n: number, p: number, what: string): void {
  assertClose(count / n, p, Math.sqrt((p * (1 - p)) / n), what);
}
