#!/usr/bin/env python3
"""Independent check of the report's power, robustness and trend figures (docs/report.md).

    crosscheck_power.py DUMP_BINARY OUT_DIR    run the dump tool into OUT_DIR, check every figure

Python 3 standard library only; nothing here calls the C++ statistics. The dump tool
(power_robust_trend_dump.cc) renders report.json, paired.csv, trend.csv and paired_seeds.csv of
several datasets exactly as GetReport does, plus a grid of noncentral t CDF and power values.
From each report's per-seed deltas this script recomputes, written again from docs/report.md:

- the noncentral t CDF by quadrature of its mixture form
  F(t; df, ncp) = ∫ Φ(t·s − ncp) f_S(s) ds, S = √(χ²_df / df) (composite Gauss–Legendre,
  panels refined around the step s = ncp/t) — not the Poisson series the C++ sums;
- the power of the two-sided paired t test, the minimum detectable effect (its own bisection)
  and the seeds needed (checked against the definition: power(n) >= 0.8 > power(n − 1));
  the central t quantile from the closed-form A&S 26.7.3/26.7.4 series;
- median, MAD, scaled MAD (1/Φ⁻¹(¾) from statistics.NormalDist), outlier seeds, robust z;
- the Wilcoxon signed-rank p: exact by enumerating all 2^m sign patterns (m <= 14), by a
  dictionary recursion over exact Fraction midranks (15 <= m <= 25), else the tie-corrected
  normal approximation with continuity correction;
- the trend: per seed statistics.linear_regression of Δ on ln(tokens) from the paired rows'
  deltas, then mean, sd, t interval (50-digit t quantile of crosscheck.py) and t-test p;
  the reading;
- that paired.csv / trend.csv / paired_seeds.csv carry the same numbers as report.json.
"""

import csv
import functools
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crosscheck  # noqa: E402  (the decimal Student t of the bootstrap cross-check)

POWER = 0.8
PLANNED = [0.01, 0.02, 0.03]
MAD_SCALE = 1.0 / statistics.NormalDist().inv_cdf(0.75)

failures = []


def fail(msg):
    failures.append(msg)


def close(a, b, rel, abs_=0.0):
    if a is None or b is None:
        return a is None and b is None
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


# ---- Gauss–Legendre nodes (Newton on P_n) --------------------------------------------------

@functools.lru_cache(maxsize=None)
def gauss_legendre(n):
    nodes = []
    for i in range(1, n + 1):
        x = math.cos(math.pi * (i - 0.25) / (n + 0.5))
        for _ in range(100):
            p0, p1 = 1.0, x
            for k in range(2, n + 1):
                p0, p1 = p1, ((2 * k - 1) * x * p1 - (k - 1) * p0) / k
            dp = n * (x * p1 - p0) / (x * x - 1)
            dx = p1 / dp
            x -= dx
            if abs(dx) < 1e-16:
                break
        nodes.append((x, 2.0 / ((1 - x * x) * dp * dp)))
    return nodes


def integrate(f, a, b, panels):
    total = 0.0
    if b <= a:
        return 0.0
    h = (b - a) / panels
    for p in range(panels):
        lo = a + p * h
        mid, half = lo + h / 2, h / 2
        for x, w in gauss_legendre(20):
            total += w * half * f(mid + half * x)
    return total


def norm_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def nct_cdf(t, df, ncp):
    """P(T <= t), T = (Z + ncp) / S, by quadrature over S = sqrt(chi2_df / df)."""
    log_c = math.log(2.0) + (df / 2) * math.log(df / 2) - math.lgamma(df / 2)

    def f(s):
        if s <= 0:
            return 0.0
        return norm_cdf(t * s - ncp) * math.exp(log_c + (df - 1) * math.log(s) - df * s * s / 2)

    if df > 30:
        sd = 1 / math.sqrt(2 * df)
        lo, hi = max(0.0, 1 - 16 * sd), 1 + 16 * sd
    else:
        lo, hi = 0.0, 1 + 40 / math.sqrt(df)
    cuts = [lo, hi]
    if t != 0:
        s0, w = ncp / t, 12.0 / abs(t)
        cuts += [x for x in (s0 - w, s0, s0 + w) if lo < x < hi]
    cuts = sorted(cuts)
    return sum(integrate(f, a, b, 40) for a, b in zip(cuts, cuts[1:]))


# ---- central t (floats: the A&S series; quantile by bisection) -----------------------------

def t_cdf_float(t, df):
    u = abs(t) / math.sqrt(df)
    c2 = 1 / (1 + u * u)
    s = u * math.sqrt(c2)
    if df % 2 == 0:
        term = total = 1.0
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * c2
            total += term
        a = s * total
    elif df == 1:
        a = 2 / math.pi * math.atan(u)
    else:
        term = total = 1.0
        for k in range(1, (df - 1) // 2):
            term *= (2 * k) / (2 * k + 1) * c2
            total += term
        a = 2 / math.pi * (math.atan(u) + s * math.sqrt(c2) * total)
    return 0.5 + a / 2 if t >= 0 else 0.5 - a / 2


@functools.lru_cache(maxsize=None)
def t_quantile_float(p, df):
    lo, hi = 0.0, 1.0
    while t_cdf_float(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf_float(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@functools.lru_cache(maxsize=None)
def power_ncp(ncp, n, alpha):
    df = n - 1
    c = t_quantile_float(1 - alpha / 2, df)
    return min(1.0, 1 - nct_cdf(c, df, ncp) + nct_cdf(-c, df, ncp))


def power_effect(d, sd, n, alpha):
    if sd == 0:
        return 1.0 if d != 0 else alpha
    return power_ncp(d * math.sqrt(n) / sd, n, alpha)


def mde(sd, n, alpha):
    if sd == 0:
        return 0.0, None
    lo, hi = 0.0, 1.0
    while power_ncp(hi, n, alpha) < POWER:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-11 * hi:
        mid = (lo + hi) / 2
        if power_ncp(mid, n, alpha) < POWER:
            lo = mid
        else:
            hi = mid
    ncp = (lo + hi) / 2
    return ncp * sd / math.sqrt(n), ncp


# ---- Wilcoxon ------------------------------------------------------------------------------

def midranks(values):
    """Exact midranks (Fractions) of the |values|, in the given order."""
    order = sorted(range(len(values)), key=lambda i: abs(values[i]))
    ranks = [None] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and abs(values[order[j + 1]]) == abs(values[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = Fraction(i + 1 + j + 1, 2)
        i = j + 1
    return ranks


def wilcoxon(deltas):
    nz = [d for d in deltas if d != 0]
    m = len(nz)
    if m == 0:
        return 0, Fraction(0), 1.0, True
    ranks = midranks(nz)
    w = sum(r for r, d in zip(ranks, nz) if d > 0)
    if m <= 14:
        below = above = 0
        for signs in itertools.product((0, 1), repeat=m):
            s = sum(r for r, b in zip(ranks, signs) if b)
            below += s <= w
            above += s >= w
        return m, w, min(1.0, float(2 * Fraction(min(below, above), 2 ** m))), True
    if m <= 25:
        dist = {Fraction(0): 1}
        for r in ranks:
            nxt = dict(dist)
            for s, c in dist.items():
                nxt[s + r] = nxt.get(s + r, 0) + c
            dist = nxt
        below = sum(c for s, c in dist.items() if s <= w)
        above = sum(c for s, c in dist.items() if s >= w)
        return m, w, min(1.0, float(2 * Fraction(min(below, above), 2 ** m))), True
    ties = {}
    for d in nz:
        ties[abs(d)] = ties.get(abs(d), 0) + 1
    var = m * (m + 1) * (2 * m + 1) / 24 - sum(t ** 3 - t for t in ties.values()) / 48
    z = max(0.0, abs(float(w) - m * (m + 1) / 4) - 0.5) / math.sqrt(var)
    return m, w, min(1.0, math.erfc(z / math.sqrt(2))), False


# ---- checks --------------------------------------------------------------------------------

def num(x):
    return None if x is None else float(x)


def check_grid(path):
    grid = json.load(open(path))
    worst = 0.0
    for g in grid["cdf"]:
        py = nct_cdf(g["t"], g["df"], g["ncp"])
        worst = max(worst, abs(py - g["cdf"]))
        if not close(py, g["cdf"], 0, 5e-12):
            fail(f"noncentral t F({g['t']}; {g['df']}, {g['ncp']}): C++ {g['cdf']!r}, "
                 f"quadrature {py!r}")
    for g in grid["power"]:
        py = power_ncp(g["ncp"], g["n"], g["alpha"])
        worst = max(worst, abs(py - g["power"]))
        if not close(py, g["power"], 0, 5e-12):
            fail(f"power(ncp {g['ncp']}, n {g['n']}, alpha {g['alpha']}): C++ {g['power']!r}, "
                 f"Python {py!r}")
    print(f"noncentral t: {len(grid['cdf'])} CDF and {len(grid['power'])} power values, "
          f"largest difference {worst:.2e}")


def check_power(name, row, deltas, level):
    p = row["power"]
    n = len(deltas)
    alpha = 1 - level
    label = f"{name} {row['kind']} {row['milestone_tokens']}"
    if not close(p["alpha"], alpha, 1e-15):
        fail(f"{label}: alpha {p['alpha']} != {alpha}")
    if n < 2:
        if p["defined"] or p["mde"] is not None or any(e["seeds"] is not None
                                                       for e in p["seeds_needed"]):
            fail(f"{label}: n < 2 must leave the power figures undefined: {p}")
        return None
    sd = statistics.stdev(deltas)
    want_mde, _ = mde(sd, n, alpha)
    if not close(p["mde"], want_mde, 1e-8, 1e-15):
        fail(f"{label}: MDE C++ {p['mde']!r}, Python {want_mde!r}")
    if sd > 0 and not close(power_effect(p["mde"], sd, n, alpha), POWER, 0, 1e-9):
        fail(f"{label}: power at the MDE is {power_effect(p['mde'], sd, n, alpha)}")
    want_deltas = PLANNED[:]
    for e in p["seeds_needed"]:
        if e["user_given"]:
            want_deltas.append(e["delta"])
    if [e["delta"] for e in p["seeds_needed"]] != want_deltas:
        fail(f"{label}: deltas {[e['delta'] for e in p['seeds_needed']]}")
    out = []
    for e in p["seeds_needed"]:
        d, k = e["delta"], e["seeds"]
        now = power_effect(d, sd, n, alpha)
        if not close(e["power_at_n"], now, 0, 1e-9):
            fail(f"{label}: power at n for {d}: C++ {e['power_at_n']!r}, Python {now!r}")
        if k is None or k < 2:
            fail(f"{label}: seeds for {d} undefined ({k}) with n >= 2")
            continue
        at_k = power_effect(d, sd, k, alpha)
        if at_k < POWER - 1e-9:
            fail(f"{label}: {k} seeds for {d} give power {at_k} < 0.8")
        if k > 2 and power_effect(d, sd, k - 1, alpha) >= POWER + 1e-9:
            fail(f"{label}: {k - 1} seeds already give 0.8 for {d}")
        out.append(f"{d:g}:{k}")
    return sd, p["mde"], out


def check_robust(name, row, deltas, seeds):
    r = row["robust"]
    label = f"{name} {row['kind']} {row['milestone_tokens']}"
    if not deltas:
        if r["median"] is not None:
            fail(f"{label}: median of no deltas")
        return None
    med = statistics.median(deltas)
    mad = statistics.median([abs(d - med) for d in deltas])
    scaled = MAD_SCALE * mad
    if r["median"] != med or r["mad"] != mad or not close(r["mad_scaled"], scaled, 1e-15):
        fail(f"{label}: median/MAD C++ {r['median']!r}/{r['mad']!r}/{r['mad_scaled']!r}, "
             f"Python {med!r}/{mad!r}/{scaled!r}")
    outliers = [s for s, d in zip(seeds, deltas) if abs(d - med) > 3 * scaled]
    if r["outlier_seeds"] != outliers:
        fail(f"{label}: outliers C++ {r['outlier_seeds']}, Python {outliers}")
    complete = [pr for pr in row["pairs"] if pr["complete"]]
    for pr, d in zip(complete, deltas):
        if scaled > 0:
            z = (d - med) / scaled
            if not close(pr["robust_z"], z, 1e-14, 1e-300):
                fail(f"{label}: robust z of seed {pr['seed']}: {pr['robust_z']} != {z}")
        elif (pr["robust_z"] is None) == (d == med):  # MAD 0: z is 0 or +-inf (null in JSON)
            fail(f"{label}: robust z of seed {pr['seed']} with MAD 0: {pr['robust_z']}")
        if pr["outlier"] != (pr["seed"] in outliers):
            fail(f"{label}: outlier flag of seed {pr['seed']}")
    m, w, p, exact = wilcoxon(deltas)
    cw = r["wilcoxon"]
    if cw["n"] != m or Fraction(cw["w_plus"]) != w or cw["exact"] != exact:
        fail(f"{label}: Wilcoxon n/W+/exact C++ {cw}, Python {m}/{float(w)}/{exact}")
    if not close(cw["p"], p, 1e-13):
        fail(f"{label}: Wilcoxon p C++ {cw['p']!r}, Python {p!r}")
    if cw["zeros"] != sum(1 for d in deltas if d == 0):
        fail(f"{label}: zeros {cw['zeros']}")
    return med, scaled, float(w), p, exact, outliers


def check_trend(name, report):
    level = report["level"]
    out = []
    for tr in report["trend"]:
        rows = [r for r in report["paired"] if r["scale"] == tr["scale"] and r["arm"] == tr["arm"]
                and r["split"] == "val"]
        rows.sort(key=lambda r: r["milestone_tokens"])
        slopes = []
        for ts in tr["seeds"]:
            xs, ys = [], []
            for r in rows:
                pr = next(p for p in r["pairs"] if p["seed"] == ts["seed"])
                if pr["complete"]:
                    xs.append(math.log(r["milestone_tokens"]))
                    ys.append(pr["delta"])
            want = statistics.linear_regression(xs, ys).slope if len(xs) >= 2 else None
            if not close(ts["slope"], want, 1e-10, 1e-15):
                fail(f"{name} trend seed {ts['seed']}: slope C++ {ts['slope']!r}, Python {want!r}")
            if want is not None:
                slopes.append(want)
        s = tr["summary"]
        gap_rows = [r for r in rows if r["n"] >= 1]
        gap = gap_rows[-1]["summary"]["mean"] if gap_rows else None
        if tr["gap"] != gap:
            fail(f"{name} trend gap {tr['gap']} != {gap}")
        if s["n"] != len(slopes):
            fail(f"{name} trend n {s['n']} != {len(slopes)}")
        reading = "no evidence"
        if len(slopes) >= 2:
            n = len(slopes)
            mean, sd = statistics.mean(slopes), statistics.stdev(slopes)
            tq = float(crosscheck.t_quantile(str((1 + level) / 2), n - 1))
            lo, hi = mean - tq * sd / math.sqrt(n), mean + tq * sd / math.sqrt(n)
            for key, want in (("mean", mean), ("sd", sd), ("ci_low", lo), ("ci_high", hi)):
                if not close(s[key], want, 1e-9, 1e-14):
                    fail(f"{name} trend {key}: C++ {s[key]!r}, Python {want!r}")
            if sd > 0:
                t = mean / (sd / math.sqrt(n))
                p = float(1 - crosscheck.t_two_sided_inner(abs(crosscheck.Decimal(t)), n - 1))
                if not close(s["t_test_p"], p, 1e-8, 1e-15):
                    fail(f"{name} trend p: C++ {s['t_test_p']!r}, Python {p!r}")
            if (lo > 0 or hi < 0) and gap not in (None, 0):
                reading = "the gap widens" if (mean > 0) == (gap > 0) else "the gap narrows"
        if s["reading"] != reading:
            fail(f"{name} trend reading: C++ '{s['reading']}', Python '{reading}'")
        out.append(f"{tr['arm']}: slope {s['mean'] if s['mean'] is None else round(s['mean'], 5)}"
                   f" over {s['n']} seeds, {s['reading']}")
    return out


def check_csv(name, d, report):
    rows = list(csv.DictReader(open(os.path.join(d, "paired.csv"), newline="")))
    if len(rows) != len(report["paired"]):
        fail(f"{name}: paired.csv has {len(rows)} rows")
    for c, j in zip(rows, report["paired"]):
        pairs = [("mde", num(j["power"]["mde"])), ("median_delta", num(j["robust"]["median"])),
                 ("wilcoxon_p", num(j["robust"]["wilcoxon"]["p"]))]
        for key, want in pairs:
            got = num(c[key]) if c[key] != "" else None
            if got != want:
                fail(f"{name} paired.csv {key}: {c[key]!r} != {want!r}")
        want_outliers = ";".join(str(s) for s in j["robust"]["outlier_seeds"])
        if c["outlier_seeds"] != want_outliers:
            fail(f"{name} paired.csv outlier_seeds {c['outlier_seeds']!r}")
        for e, key in zip(j["power"]["seeds_needed"], ["seeds_for_0.01", "seeds_for_0.02",
                                                        "seeds_for_0.03"]):
            if c[key] != ("" if e["seeds"] is None else str(e["seeds"])):
                fail(f"{name} paired.csv {key} {c[key]!r} != {e['seeds']}")
    trend = list(csv.DictReader(open(os.path.join(d, "trend.csv"), newline="")))
    for c, j in zip(trend, report["trend"]):
        if c["reading"] != j["summary"]["reading"] or \
                (num(c["mean_slope"]) if c["mean_slope"] else None) != j["summary"]["mean"]:
            fail(f"{name} trend.csv differs from report.json")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, out = sys.argv[1], sys.argv[2]
    subprocess.run([binary, out], check=True)
    if abs(MAD_SCALE - 1.482602218505602) > 1e-15:
        fail(f"1/Phi^-1(3/4) = {MAD_SCALE!r}")
    check_grid(os.path.join(out, "noncentral_t.json"))
    names = sorted(n for n in os.listdir(out) if os.path.isdir(os.path.join(out, n)))
    for name in names:
        d = os.path.join(out, name)
        report = json.load(open(os.path.join(d, "report.json")))
        level = report["level"]
        for row in report["paired"]:
            complete = [p for p in row["pairs"] if p["complete"]]
            deltas = [p["delta"] for p in complete]
            seeds = [p["seed"] for p in complete]
            pw = check_power(name, row, deltas, level)
            rb = check_robust(name, row, deltas, seeds)
            if row is report["paired"][-1]:
                text = f"{name:8s} {row['milestone_tokens'] / 1e9:g}B n={len(deltas)}"
                if pw:
                    text += f" sd={pw[0]:.5f} mde={pw[1]:.5f} seeds {' '.join(pw[2])}"
                if rb:
                    text += (f" | median={rb[0]:+.4f} sMAD={rb[1]:.4f} W+={rb[2]:g} "
                             f"p={rb[3]:.4g}{' exact' if rb[4] else ' normal'} "
                             f"outliers={rb[5]}")
                print(text)
        for line in check_trend(name, report):
            print(f"{'':8s} trend {line}")
        check_csv(name, d, report)
    for f in failures:
        print("FAIL", f)
    print(f"crosscheck_power: {len(names)} datasets, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
