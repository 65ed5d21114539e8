// The report's four PNGs, drawn by gnuplot (Debian gnuplot-nox) from ReportTables: the data and
// scripts (WriteGnuplotScripts), finding the binary (FindGnuplot) and running it (RunGnuplot).
// docs/report.md "Plots" describes each figure.
#pragma once

#include <string>

#include "common/status.h"
#include "coordinator/stats/tables.h"

namespace rdattn::stats {

// Plot file names, written by WriteGnuplotScripts/RunGnuplot into the plots folder.
inline constexpr const char* kPlotNllVsTokens = "nll_vs_tokens.png";
inline constexpr const char* kPlotDeltaLastMilestone = "delta_last_milestone.png";
inline constexpr const char* kPlotJsByLayer = "js_by_layer.png";
inline constexpr const char* kPlotDeltaVsTokens = "delta_vs_tokens.png";

// Writes the plot data (*.dat) and one gnuplot script per plot (nll_vs_tokens.gp,
// delta_last_milestone.gp, js_by_layer.gp, delta_vs_tokens.gp; each writes <name>.png next to it
// with the pngcairo terminal) into out_dir, creating it. Old *.dat, *.gp and *.png files in
// out_dir are removed first: give it a folder of its own (BuildReport uses a temporary DIR/plots).
Status WriteGnuplotScripts(const ReportTables& tables, const std::string& out_dir);
// The gnuplot executable as an absolute path: `name_or_path` itself when it holds a '/' (and is
// executable), else the first match in $PATH. FAILED_PRECONDITION "\"NAME\" not found; install
// gnuplot (Debian: gnuplot-nox)" otherwise. The only PATH lookup here: rdattn-coordinator calls
// it once at startup (--gnuplot) and hands the path to every report.
StatusOr<std::string> FindGnuplot(const std::string& name_or_path);
// Runs `gnuplot_binary SCRIPT` in out_dir for every *.gp there (name order), with fork/exec (no
// shell; the child only dup2/chdir/execv). gnuplot_binary goes through FindGnuplot first: give
// an absolute path and no PATH is searched. An error names the script: gnuplot missing
// (FAILED_PRECONDITION), its exit status and output, or no PNG written.
Status RunGnuplot(const std::string& out_dir, const std::string& gnuplot_binary = "gnuplot");

}  // namespace rdattn::stats
