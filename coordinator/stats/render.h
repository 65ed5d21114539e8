// The report's text renderers: ReportTables (tables.h) as report.md, one CSV per table and
// report.json, each in its own file (render_markdown.cc, render_csv.cc, render_json.cc). They
// only read the tables. Nothing here knows protobuf or gRPC. The coordinator's BuildReport
// (coordinator/report.h) calls them and the plots (plots.h) and returns the files;
// `rdattn report --out DIR` writes what it returns.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "coordinator/stats/tables.h"

namespace rdattn::stats {

// report.md. plots_dir_relative: the plots folder relative to the markdown file (e.g. "plots");
// empty: no plots are embedded. plots_missing: why the plots could not be drawn, said in a note
// after the legend; empty: no note.
std::string RenderMarkdown(const ReportTables& tables, const std::string& plots_dir_relative,
                           const std::string& plots_missing = "");
// One CSV per table (RFC 4180, header row first, NaN as an empty field): file name -> content.
// nll.csv, paired.csv, paired_seeds.csv, controls.csv, trend.csv, trend_seeds.csv, depth.csv,
// depth_layers.csv, cost.csv, cost_pairs.csv, cost_excluded.csv, missing.csv, and looks.csv
// when the tables have a seed policy.
std::map<std::string, std::string> RenderCsv(const ReportTables& tables);
// The whole report as one JSON document (NaN as null), pretty-printed.
std::string RenderJson(const ReportTables& tables);

}  // namespace rdattn::stats
