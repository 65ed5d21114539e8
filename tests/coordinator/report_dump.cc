// report_dump DB SWEEP_ID OUT_DIR: every report file BuildReport renders for one stored sweep,
// in five variants, and the CLI's text of each (client::FormatReport), written under OUT_DIR so
// that two builds can be compared byte for byte (issue 25: the report files stay identical
// across refactors of the renderers, apart from listed rule changes). Variants:
//   plain/      the sweep as stored, plots drawn with gnuplot from PATH
//   target/     --target-delta 0.015, the other main arm as reference, level 0.9, no gnuplot
//   partial/    only the first half of the metric events (missing cells, NaN everywhere)
//   sequential/ a seed policy's design with two looks (one comparison with NaN figures)
//   nolook/     a seed policy's design before its first look
// Nothing here is a test assertion: compare two OUT_DIRs with `diff -r`.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "client/format.h"
#include "coordinator/report.h"
#include "coordinator/seed_policy.h"
#include "coordinator/store.h"

namespace {

namespace fs = std::filesystem;
namespace pb = ::rdattn::v1;
using rdattn::coordinator::BuildReport;
using rdattn::coordinator::ReportOptions;
using rdattn::coordinator::ReportSource;

bool Dump(const ReportSource& source, const ReportOptions& options, const fs::path& dir) {
  const pb::GetReportResponse resp = BuildReport(source, options);
  fs::create_directories(dir / "plots");
  for (const pb::ReportFile& f : resp.files()) {
    std::ofstream out(dir / f.name(), std::ios::binary);
    out << f.content();
    if (!out) return false;
  }
  std::ofstream cli(dir / "cli.txt", std::ios::binary);
  cli << rdattn::client::FormatReport(resp.report()) << "warning: " << resp.warning() << "\n";
  return static_cast<bool>(cli);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: report_dump DB SWEEP_ID OUT_DIR\n";
    return 2;
  }
  auto store = rdattn::coordinator::Store::OpenReader(argv[1]);
  if (!store.ok()) {
    std::cerr << store.status().ToString() << "\n";
    return 1;
  }
  const std::string id = argv[2];
  const fs::path out = argv[3];
  ReportSource source;
  auto sweep = (*store)->GetSweep(id);
  auto jobs = (*store)->ListJobs(id);
  if (!sweep.ok() || !jobs.ok()) {
    std::cerr << "cannot read sweep " << id << "\n";
    return 1;
  }
  source.sweep = *sweep;
  source.jobs = *jobs;
  for (int kind : {pb::MetricEvent::KIND_INIT, pb::MetricEvent::KIND_TRAIN_STEP,
                   pb::MetricEvent::KIND_EVAL, pb::MetricEvent::KIND_FINISHED}) {
    auto events = (*store)->ReadMetricEvents(id, kind);
    if (!events.ok()) return 1;
    for (auto& e : *events) source.events.push_back(std::move(e));
  }
  std::sort(source.events.begin(), source.events.end(),
            [](const auto& a, const auto& b) { return a.seq < b.seq; });

  bool ok = true;
  ReportOptions plain;
  ok &= Dump(source, plain, out / "plain");

  ReportOptions target;
  target.gnuplot_binary = "";
  target.target_delta = 0.015;
  target.confidence_level = 0.9;
  const auto& arms = source.sweep.spec.arms();
  if (arms.size() > 1) target.reference_arm = arms[arms.size() - 1];
  ok &= Dump(source, target, out / "target");

  ReportOptions no_plots;
  no_plots.gnuplot_binary = "";
  ReportSource partial = source;
  partial.events.resize(partial.events.size() / 2);
  ok &= Dump(partial, no_plots, out / "partial");

  pb::SeedPolicy policy;
  std::vector<uint64_t> seeds;
  for (const auto& j : source.jobs) {
    if (std::find(seeds.begin(), seeds.end(), j.spec.seed()) == seeds.end()) {
      seeds.push_back(j.spec.seed());
    }
  }
  for (size_t i = 0; i + 1 < seeds.size(); ++i) policy.add_initial(seeds[i]);
  policy.set_step(1);
  policy.set_max(static_cast<int>(seeds.size()) + 2);
  policy.set_simulations(20000);
  auto design = rdattn::coordinator::DesignSeedPolicy(policy);
  if (!design.ok()) {
    std::cerr << design.status().ToString() << "\n";
    return 1;
  }
  ReportSource nolook = source;
  nolook.sequential = *design;
  ok &= Dump(nolook, no_plots, out / "nolook");

  pb::SequentialState state = *design;
  const auto input = rdattn::coordinator::MakeStatsInput(partial, "");
  const auto tables = rdattn::stats::BuildTables(
      input, rdattn::coordinator::ReportBootstrapSeed(source.sweep.id), 2000);
  *state.add_looks() = rdattn::coordinator::EvaluateLook(policy, state, tables, 2);
  pb::SeedLook second = rdattn::coordinator::EvaluateLook(
      policy, state,
      rdattn::stats::BuildTables(rdattn::coordinator::MakeStatsInput(source, ""),
                                 rdattn::coordinator::ReportBootstrapSeed(source.sweep.id), 2000),
      3);
  pb::LookComparison* nan = second.add_comparisons();
  nan->set_scale("s, \"quoted\"");
  nan->set_arm("x|y");
  nan->set_reference_arm("block");
  nan->set_n(1);
  nan->set_mean_delta_nll(-0.25);
  nan->set_sd_delta_nll(std::numeric_limits<double>::quiet_NaN());
  nan->set_t_statistic(std::numeric_limits<double>::quiet_NaN());
  nan->set_efficacy_t(std::numeric_limits<double>::infinity());
  nan->set_adjusted_p(3.2e-7);
  nan->set_rci_low(std::numeric_limits<double>::quiet_NaN());
  nan->set_rci_high(std::numeric_limits<double>::quiet_NaN());
  nan->set_outcome("continue");
  *state.add_looks() = second;
  state.set_stopped(true);
  state.set_stopped_at_look(2);
  ReportSource sequential = source;
  sequential.sequential = state;
  ok &= Dump(sequential, no_plots, out / "sequential");
  return ok ? 0 : 1;
}
