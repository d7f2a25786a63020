"""Print the README's "Choosing ε, k and m" table from the variance formulas and ldptel's effective parameters.

    .venv/bin/python tests/bench/accuracy_table.py

Rare value (f ≈ 0), n = 10⁶ reports: the 95% half-width of the frequency estimate and the reports needed
for a ±1% half-width. Formulas: client/mechanisms/cms.py and hcms.py docstrings (ldp-math §1.4, §1.5, §7).
"""

from __future__ import annotations

import math

from ldptel.client import CmsParams, HcmsParams, OueCmsParams, RrParams

N = 1_000_000
Z = 1.96  # the reference tables use 1.96


def count_variance(params: CmsParams | OueCmsParams | HcmsParams, n: int) -> float:
    k, m = params.k, params.m
    scale = (m / (m - 1)) ** 2
    if isinstance(params, HcmsParams):
        c = params.effective_c
        return scale * (n * c * c - n * (1 / m**2 + (m - 1) / (k * m * m)))
    p, q = params.p, params.q
    noise = ((n / m) * p * (1 - p) + n * (1 - 1 / m) * q * (1 - q)) / (p - q) ** 2
    return scale * noise + n * (k - 1) / (k * (m - 1))


def main() -> None:
    print("| mechanism | k × m | ε | effective ε | bits/report on the wire | ±95% at n = 10⁶ | reports for ±1% |")
    print("|---|---|---|---|---|---|---|")
    for cls in (CmsParams, OueCmsParams, HcmsParams):
        for k, m in ((2048, 1024), (256, 256)):
            for eps in (1, 2, 4, 8):
                params = cls(epsilon=eps, k=k, m=m)
                var = count_variance(params, N)
                bits = 33 if cls is HcmsParams else 16 + m
                half = Z * math.sqrt(var) / N
                need = Z**2 * (var / N) / 0.01**2
                print(f"| {params.mechanism} | {k} × {m} | {eps} | {params.effective_epsilon:.3f} | {bits} | {half:.5f} | {need:,.0f} |")
    for eps in (1, 2, 4, 8):
        rr = RrParams(epsilon=eps)
        per = 0.25 / (1 - 2 * rr.effective_flip) ** 2
        print(f"| rr (worst case p = ½) | – | {eps} | {rr.effective_epsilon:.3f} | 1 | {Z * math.sqrt(per / N):.5f} | {Z**2 * per / 0.01**2:,.0f} |")


if __name__ == "__main__":
    main()
