// Writes what tests/stats/crosscheck_power.py recomputes independently (ctest
// stats_crosscheck_power): for each dataset below, the report's report.json, paired.csv and
// trend.csv (BuildTables + RenderJson/RenderCsv, exactly as GetReport renders them) into
// OUT_DIR/<dataset>/, and OUT_DIR/noncentral_t.json, a grid of NoncentralTCdf and
// PairedTTestPowerNcp values.
//
//   rdattn_stats_power_dump OUT_DIR
//
// The datasets are the edge cases of docs/report.md ("Power", "Robustness", "Trend"): the
// paper's S deltas with a gap that narrows, a gap that widens, ties and zero deltas, an
// outlier, n = 1, n = 2, sd = 0 (MAD = 0), MAD = 0 with one other Δ, n = 25 (the largest exact
// Wilcoxon) and n = 30 (normal approximation), and a user target delta.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/stats/distributions.h"
#include "coordinator/stats/paired_stats.h"
#include "coordinator/stats/render.h"

namespace {

using rdattn::stats::BuildTables;
using rdattn::stats::ReportInput;
using rdattn::stats::RunResult;

// seed -> milestone tokens -> Δ. The reference NLL is 3.3 − 0.05 · ln(m/2.5e8), the same for
// every seed, and the arm's is that plus Δ: the Δ the report sees is the difference of two
// doubles, and equal inputs stay exactly equal (ties, sd = 0).
using Deltas = std::map<uint64_t, std::map<int64_t, double>>;

ReportInput MakeInput(const std::string& name, const Deltas& deltas, double target_delta) {
  ReportInput in;
  in.sweep_id = name;
  in.sweep_name = name;
  in.scales = {"S"};
  in.arms = {"block", "rd"};
  in.target_delta = target_delta;
  for (const auto& [seed, by_m] : deltas) {
    in.seeds.push_back(seed);
    RunResult ref, arm;
    ref.job_id = name + "-block-" + std::to_string(seed);
    arm.job_id = name + "-rd-" + std::to_string(seed);
    ref.scale = arm.scale = "S";
    ref.arm = "block";
    arm.arm = "rd";
    ref.seed = arm.seed = seed;
    ref.state = arm.state = rdattn::stats::RunState::kSucceeded;
    for (const auto& [m, d] : by_m) {
      const double base = 3.3 - 0.05 * std::log(static_cast<double>(m) / 2.5e8);
      ref.milestones[m].val_nll = base;
      arm.milestones[m].val_nll = base + d;
    }
    in.runs.push_back(ref);
    in.runs.push_back(arm);
  }
  return in;
}

// A small deterministic generator for the larger datasets (not the report's SplitMix64 use).
double Uniform(uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<double>(state >> 11) / 9007199254740992.0;
}

std::map<std::string, std::pair<Deltas, double>> Datasets() {
  std::map<std::string, std::pair<Deltas, double>> out;
  const std::vector<int64_t> ms = {250000000, 500000000, 1000000000, 2000000000};
  {  // the paper's S deltas at 2B; earlier the gap is larger: it narrows with training
    const std::vector<double> s = {-0.027, -0.029, -0.030, -0.030, -0.035};
    Deltas d;
    for (size_t i = 0; i < s.size(); ++i) {
      for (size_t k = 0; k < ms.size(); ++k) {
        d[i + 1][ms[k]] = s[i] - 0.012 * static_cast<double>(ms.size() - 1 - k) +
                          0.002 * std::sin(static_cast<double>(7 * i + 3 * k));
      }
    }
    out["narrows"] = {d, 0.015};
  }
  {  // a gap that grows, with one seed missing its first milestone
    Deltas d;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      for (size_t k = 0; k < ms.size(); ++k) {
        if (seed == 4 && k == 0) continue;
        d[seed][ms[k]] = -0.004 - 0.006 * static_cast<double>(k) +
                         0.001 * std::cos(static_cast<double>(5 * seed + k));
      }
    }
    out["widens"] = {d, 0.0};
  }
  {  // ties: zeros (dropped by Wilcoxon, ties in the sign test) and equal |Δ|; no trend
    const std::vector<double> a = {0.01, -0.01, 0.02, 0.0, -0.02, -0.02, 0.03, 0.0, -0.01};
    const std::vector<double> b = {0.01, -0.01, 0.02, 0.0, -0.02, -0.02, 0.03, 0.0, -0.01};
    Deltas d;
    for (size_t i = 0; i < a.size(); ++i) {
      d[10 + i][ms[0]] = a[i];
      d[10 + i][ms[3]] = b[(i + 4) % b.size()];
    }
    out["ties"] = {d, 0.0};
  }
  {  // one outlier seed
    const std::vector<double> a = {-0.020, -0.021, -0.019, -0.022, -0.018, -0.020, 0.050};
    Deltas d;
    for (size_t i = 0; i < a.size(); ++i) d[100 + i][ms[3]] = a[i];
    out["outlier"] = {d, 0.005};
  }
  {
    Deltas d;
    d[7][ms[3]] = -0.03;
    out["n1"] = {d, 0.02};
  }
  {
    Deltas d;
    d[1][ms[2]] = -0.03;
    d[1][ms[3]] = -0.02;
    d[2][ms[2]] = -0.01;
    d[2][ms[3]] = -0.025;
    out["n2"] = {d, 0.0};
  }
  {  // every Δ equal: sd = 0, MAD = 0
    Deltas d;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      d[seed][ms[2]] = -0.01;
      d[seed][ms[3]] = -0.01;
    }
    out["sd0"] = {d, 0.0};
  }
  {  // MAD = 0 but one Δ differs: that seed is the outlier (robust z = −inf)
    Deltas d;
    for (uint64_t seed = 1; seed <= 6; ++seed) d[seed][ms[3]] = seed == 5 ? -0.012 : -0.01;
    out["mad0"] = {d, 0.0};
  }
  for (int n : {25, 30}) {
    uint64_t state = 12345 + n;
    Deltas d;
    for (int i = 0; i < n; ++i) {
      const double u = Uniform(state) + Uniform(state) + Uniform(state) - 1.5;
      d[static_cast<uint64_t>(i + 1)][ms[3]] = -0.004 + 0.01 * u;
      d[static_cast<uint64_t>(i + 1)][ms[1]] = -0.006 + 0.01 * u + 0.003 * (Uniform(state) - 0.5);
    }
    out["n" + std::to_string(n)] = {d, 0.0025};
  }
  return out;
}

bool Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  namespace fs = std::filesystem;
  const fs::path out(argv[1]);
  fs::create_directories(out);
  for (const auto& [name, data] : Datasets()) {
    const auto tables = BuildTables(MakeInput(name, data.first, data.second), 20260801, 200,
                                    name == "n2" ? 0.9 : 0.95);
    fs::create_directories(out / name);
    if (!Write(out / name / "report.json", rdattn::stats::RenderJson(tables))) return 1;
    const auto csv = rdattn::stats::RenderCsv(tables);
    for (const char* f : {"paired.csv", "trend.csv", "paired_seeds.csv"}) {
      if (!Write(out / name / f, csv.at(f))) return 1;
    }
  }
  nlohmann::ordered_json grid = nlohmann::ordered_json::array();
  for (double df : {1.0, 2.0, 4.0, 9.0, 29.0, 200.0}) {
    for (double ncp : {0.0, 0.5, -1.5, 3.0, 8.0, 25.0, 60.0}) {
      for (double t : {-2.0, 0.0, 0.7, 2.3, 4.0, 12.7, 30.0, 61.0}) {
        grid.push_back({{"t", t},
                        {"df", df},
                        {"ncp", ncp},
                        {"cdf", rdattn::stats::NoncentralTCdf(t, df, ncp)}});
      }
    }
  }
  // Far tails with t² ≫ df and a huge ncp: the starting I_x(a, b) has a ~ 1e7 and 1 − x ~ 1e-8.
  for (const auto& [t, df, ncp] :
       {std::tuple{6366.19767131205, 1.0, 12000.0}, std::tuple{6300.0, 3.0, 9000.0},
        std::tuple{8400.0, 3.0, 12000.0}}) {
    grid.push_back(
        {{"t", t}, {"df", df}, {"ncp", ncp}, {"cdf", rdattn::stats::NoncentralTCdf(t, df, ncp)}});
  }
  nlohmann::ordered_json power = nlohmann::ordered_json::array();
  for (int64_t n : {2, 3, 5, 10, 40}) {
    for (double alpha : {0.05, 0.1, 0.01, 1e-4}) {
      for (double ncp : {0.0, 1.0, 2.8, 6.0, 15.0}) {
        power.push_back({{"n", n},
                         {"alpha", alpha},
                         {"ncp", ncp},
                         {"power", rdattn::stats::PairedTTestPowerNcp(ncp, n, alpha)}});
      }
    }
  }
  // n = 2 at α = 1e-4: 80% power needs ncp ≈ 8159 (λ ≈ 3.3e7 around the Poisson mode).
  for (double ncp : {4000.0, 8159.0, 12000.0}) {
    power.push_back({{"n", 2},
                     {"alpha", 1e-4},
                     {"ncp", ncp},
                     {"power", rdattn::stats::PairedTTestPowerNcp(ncp, 2, 1e-4)}});
  }
  nlohmann::ordered_json all{{"cdf", grid}, {"power", power}};
  return Write(out / "noncentral_t.json", all.dump(1) + "\n") ? 0 : 1;
}
