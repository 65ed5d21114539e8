#!/usr/bin/env python3
"""Independent check of the fixtures that tests/stats/paired_stats_test.cc pins.

    crosscheck.py PAIRED_STATS_TEST_CC     exit 0 when every pinned value is reproduced
    crosscheck.py --print                  print the values (to write the fixture once)

Python 3 standard library only. Nothing here calls the C++ code: the bootstrap (SplitMix64 ->
rejection-sampled index -> resample means -> type-7 percentile, docs/report.md) is written again
from its documentation, the Student t CDF comes from the closed-form series of Abramowitz &
Stegun 26.7.3/26.7.4 evaluated in 50-digit decimals (not the incomplete beta the C++ uses), and
the sign test from exact binomial sums (fractions.Fraction). The C++ test keeps its pinned values between the lines
"// BEGIN python-crosscheck" and "// END python-crosscheck" as
    constexpr <type> <name> = <value>;
and this script reads them from there, so the two cannot drift apart unnoticed.
"""

import math
import re
import statistics
import sys
from decimal import Decimal, getcontext
from fractions import Fraction

MASK = (1 << 64) - 1

# The paper's per-seed ΔNLL (RD − Block) at 2.0B tokens, read off Fig. 2 (MODEL.md §7.1).
PAPER_S = [-0.027, -0.029, -0.030, -0.030, -0.035]
PAPER_M = [-0.012, -0.018, -0.021, -0.029, -0.043]
SMALL = [0.5, -1.25, 2.0, 0.125, -0.3, 1.7, 0.01]


# ---- the documented bootstrap, written again ------------------------------------------------

class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def uniform_index(rng, n):
    r = (1 << 64) % n              # 2^64 mod n
    max_kept = MASK - r            # keep x <= 2^64 - 1 - r
    x = rng.next()
    while x > max_kept:
        x = rng.next()
    return x % n


def bootstrap_means(xs, seed, resamples):
    rng = SplitMix64(seed)
    n = len(xs)
    means = []
    for _ in range(resamples):
        s = 0.0
        for _ in range(n):
            s += xs[uniform_index(rng, n)]   # left to right, in draw order
        means.append(s / n)
    return means


def percentile_type7(sorted_values, q):
    h = (len(sorted_values) - 1) * q
    i = math.floor(h)
    if i + 1 >= len(sorted_values):
        return sorted_values[-1]
    return sorted_values[i] + (h - i) * (sorted_values[i + 1] - sorted_values[i])


def bootstrap_ci(xs, seed, resamples, level):
    means = sorted(bootstrap_means(xs, seed, resamples))
    alpha = 1.0 - level
    return percentile_type7(means, alpha / 2.0), percentile_type7(means, 1.0 - alpha / 2.0)


def mean_in_order(xs):
    s = 0.0
    for x in xs:
        s += x
    return s / len(xs)


# ---- Student t by the closed-form series (A&S 26.7.3 / 26.7.4), in 50-digit decimals ------

getcontext().prec = 50


def d_atan(x):
    """atan of a Decimal: halve the argument until small, then the Taylor series."""
    k = 0
    while abs(x) > Decimal("0.01"):
        x = x / (1 + (1 + x * x).sqrt())
        k += 1
    total, term, n, x2, sign = Decimal(0), x, 1, x * x, 1
    while abs(term) > Decimal(10) ** -48:
        total += sign * term / n
        term *= x2
        n += 2
        sign = -sign
    return total * (2 ** k)


D_PI = 4 * d_atan(Decimal(1))


def t_two_sided_inner(t, df):
    """A(t|df) = P(|T| < t) for integer df >= 1 and Decimal t >= 0."""
    u = t / Decimal(df).sqrt()
    c2 = 1 / (1 + u * u)  # cos^2 theta, theta = atan(u)
    c = c2.sqrt()
    s = u * c
    if df % 2 == 0:
        term, total = Decimal(1), Decimal(1)
        for k in range(1, df // 2):
            term *= Decimal(2 * k - 1) / Decimal(2 * k) * c2
            total += term
        return s * total
    if df == 1:
        return 2 / D_PI * d_atan(u)
    term, total = Decimal(1), Decimal(1)
    for k in range(1, (df - 1) // 2):
        term *= Decimal(2 * k) / Decimal(2 * k + 1) * c2
        total += term
    return 2 / D_PI * (d_atan(u) + s * c * total)


def t_cdf(t, df):
    a = t_two_sided_inner(abs(t), df)
    return Decimal(1) / 2 + a / 2 if t >= 0 else Decimal(1) / 2 - a / 2


def t_quantile(p, df):
    """The p-quantile (p a decimal string) to about 45 digits, by bisection."""
    p = Decimal(p)
    lo, hi = Decimal(0), Decimal(1)
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(170):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def paired_t_test_p(deltas):
    """Two-sided p of the paired t test: t from statistics.mean/stdev (exact rational mean, then
    float), p = 1 − A(|t| | n − 1) in decimals."""
    n = len(deltas)
    t = statistics.mean(deltas) / (statistics.stdev(deltas) / math.sqrt(n))
    return float(1 - t_two_sided_inner(abs(Decimal(t)), n - 1))


def sign_test_p(wins, losses):
    n = wins + losses
    k = min(wins, losses)
    tail = sum(Fraction(math.comb(n, i), 2 ** n) for i in range(k + 1))
    return min(Fraction(1), 2 * tail)


# ---- what the C++ test pins -----------------------------------------------------------------

def computed():
    values = {}
    values["kBootSeed"] = 20260801
    values["kBootResamples"] = 10000
    lo, hi = bootstrap_ci(PAPER_S, 20260801, 10000, 0.95)
    values["kBootLowS"], values["kBootHighS"] = lo, hi
    lo, hi = bootstrap_ci(PAPER_M, 20260801, 10000, 0.95)
    values["kBootLowM"], values["kBootHighM"] = lo, hi
    # Seed 0, few resamples and level 0.9: the percentiles fall between order statistics
    # (h = 9 * 0.05 = 0.45 and 9 * 0.95 = 8.55), so the interpolation is pinned too.
    lo, hi = bootstrap_ci(SMALL, 0, 10, 0.9)
    values["kBootLowSmall"], values["kBootHighSmall"] = lo, hi
    values["kFirstSplitMix0"] = SplitMix64(0).next()
    values["kFirstSplitMix1"] = SplitMix64(1).next()
    values["kTTestPS"] = paired_t_test_p(PAPER_S)
    values["kTTestPM"] = paired_t_test_p(PAPER_M)
    values["kMeanS"] = mean_in_order(PAPER_S)
    return values


def pinned(path):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"// BEGIN python-crosscheck\n(.*?)// END python-crosscheck", text, re.S)
    if not m:
        sys.exit(f"{path}: no '// BEGIN python-crosscheck' block")
    values = {}
    for line in m.group(1).splitlines():
        d = re.match(r"\s*constexpr\s+[\w:]+\s+(\w+)\s*=\s*([^;]+);", line)
        if d:
            literal = d.group(2).strip()
            literal = re.sub(r"(ULL|ull|LL|ll|u|U)$", "", literal)
            values[d.group(1)] = float(literal) if re.search(r"[.eE]", literal) else int(literal, 0)
    return values


def check_t_quantiles(failures):
    """The quantile fixtures of the C++ test (rounded to doubles) against 45-digit values.

    The fixture for (0.975, 3) is 3.1824463052837095; the commonly quoted double
    3.182446305284263 is 1.7e-13 too high (its CDF is 0.975 + 1.06e-14).
    """
    fixtures = {("0.975", 1): 12.706204736174705, ("0.975", 2): 4.302652729749464,
                ("0.975", 3): 3.1824463052837095, ("0.975", 4): 2.7764451051977943,
                ("0.975", 5): 2.5705818356363155, ("0.975", 30): 2.042272456301238,
                ("0.995", 10): 3.1692726726169513, ("0.95", 3): 2.3533634348018238,
                ("0.9995", 2): 31.59905457644362, ("0.975", 100): 1.9839715185235522,
                ("0.9", 7): 1.4149239276505086, ("0.95", 4): 2.1318467863266504}
    for (p, df), q in fixtures.items():
        exact = t_quantile(p, df)
        if float(exact) != q:
            failures.append(f"t_{p},{df}: 45-digit value {exact} rounds to {float(exact)!r}, "
                            f"fixture {q!r}")


def check_sign_tests(failures):
    fixtures = [((5, 0), Fraction(1, 16)), ((10, 0), Fraction(1, 512)),
                ((1, 5), Fraction(7, 32)), ((3, 3), Fraction(1)), ((0, 0), Fraction(1))]
    for (wins, losses), p in fixtures:
        if sign_test_p(wins, losses) != p:
            failures.append(f"sign test {wins}/{losses}: {sign_test_p(wins, losses)} != {p}")


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--print":
        for k, v in computed().items():
            print(f"{k} = {v!r}")
        return 0
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    want = pinned(sys.argv[1])
    got = computed()
    failures = []
    for name, value in got.items():
        if name not in want:
            failures.append(f"{name}: not pinned in {sys.argv[1]}")
            continue
        if name.startswith("kTTestP"):  # decimal series vs incomplete beta: not bit-equal
            if abs(want[name] - value) > 1e-13 * value:
                failures.append(f"{name}: C++ pins {want[name]!r}, series gives {value!r}")
        elif want[name] != value:
            failures.append(f"{name}: C++ pins {want[name]!r}, Python computes {value!r}")
    check_t_quantiles(failures)
    check_sign_tests(failures)
    for f in failures:
        print("FAIL", f)
    print(f"crosscheck: {len(got)} pinned values, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
