// WriteGnuplotScripts() and RunGnuplot(): the report's four PNGs, drawn by gnuplot (Debian
// gnuplot-nox) with the pngcairo terminal. Each script X.gp reads X_*.dat next to it and writes
// X.png; RunGnuplot runs them with the plots folder as working directory. FindGnuplot is the
// only PATH lookup (the coordinator calls it once, at startup).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "coordinator/stats/plots.h"

namespace rdattn::stats {
namespace {

namespace fs = std::filesystem;

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// A gnuplot single-quoted string: no escapes are processed inside, '' is a quote.
std::string GnuplotQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "''";
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string Num(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  return buffer;
}

std::string TokensLabel(int64_t t) {
  char buffer[40];
  const double v = static_cast<double>(t);
  if (t >= 1000000000) {
    std::snprintf(buffer, sizeof(buffer), "%.4gB", v / 1e9);
  } else if (t >= 1000000) {
    std::snprintf(buffer, sizeof(buffer), "%.4gM", v / 1e6);
  } else if (t >= 1000) {
    std::snprintf(buffer, sizeof(buffer), "%.4gk", v / 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(t));
  }
  return buffer;
}

Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InternalError("cannot write " + path.string());
  out << text;
  out.close();
  if (!out) return InternalError("cannot write " + path.string());
  return Status::Ok();
}

std::string Terminal(const std::string& png, size_t rows, size_t cols) {
  std::ostringstream gp;
  gp << "# Written by rdattn (coordinator/stats/plots.cc). Run: gnuplot "
     << "<this file>\n"
     << "set encoding utf8\n"
     << "set terminal pngcairo size " << 720 * cols << "," << 500 * rows
     << " noenhanced font 'DejaVu Sans,10'\n"
     << "set output " << GnuplotQuoted(png) << "\n";
  return gp.str();
}

// The start of a script that draws `panels` panels (one per scale) into `png`: the terminal,
// sized for up to 2 panels per row, and the multiplot with its `title`.
std::string MultiplotStart(const std::string& png, size_t panels, const std::string& title) {
  const size_t cols = std::min<size_t>(std::max<size_t>(panels, 1), 2);
  const size_t rows = (std::max<size_t>(panels, 1) + cols - 1) / cols;
  std::ostringstream gp;
  gp << Terminal(png, rows, cols);
  gp << "set multiplot layout " << rows << "," << cols << " title " << GnuplotQuoted(title) << "\n";
  return gp.str();
}

// The x axis of a panel over training tokens (non-empty `xs`): log scale when the milestones
// span 4x or more, a margin on both sides, and ticks at the milestones labelled like the tables
// (250M, 1B).
std::string TokensAxis(const std::set<int64_t>& xs) {
  std::ostringstream gp;
  const double lo = static_cast<double>(*xs.begin());
  const double hi = static_cast<double>(*xs.rbegin());
  const bool log_x = lo > 0 && hi >= 4 * lo;
  gp << (log_x ? "set logscale x 2\n" : "unset logscale x\n");
  if (xs.size() == 1) {
    gp << "set xrange [" << Num(0.5 * lo) << ":" << Num(1.5 * lo) << "]\n";
  } else if (log_x) {
    gp << "set xrange [" << Num(lo / 1.25) << ":" << Num(hi * 1.25) << "]\n";
  } else {
    gp << "set xrange [" << Num(lo - 0.08 * (hi - lo)) << ":" << Num(hi + 0.08 * (hi - lo))
       << "]\n";
  }
  std::string tics;
  for (int64_t x : xs) {
    if (!tics.empty()) tics += ", ";
    tics += GnuplotQuoted(TokensLabel(x)) + " " + std::to_string(x);
  }
  gp << "set xtics (" << tics << ")\n";
  return gp.str();
}

// A panel over training tokens (non-empty `xs`): its title, the axis labels, the key, the grid
// and the x axis of TokensAxis.
std::string TokensPanel(const std::string& title, const std::string& ylabel,
                        const std::set<int64_t>& xs) {
  return "set title " + GnuplotQuoted(title) + "\nset xlabel 'training tokens'\nset ylabel " +
         GnuplotQuoted(ylabel) + "\nset key top right\nset grid\n" + TokensAxis(xs);
}

std::string NoDataPanel(const std::string& title, const std::string& why) {
  std::ostringstream gp;
  gp << "set title " << GnuplotQuoted(title) << "\n"
     << "set xrange [0:1]\nset yrange [0:1]\nunset xtics\nunset ytics\n"
     << "set label 1 " << GnuplotQuoted(why) << " at 0.5,0.5 center\n"
     << "plot 2 notitle\n"
     << "unset label 1\nset xtics\nset ytics\nset autoscale x\nset autoscale y\n";
  return gp.str();
}

// A script of one panel per scale, `png` drawn by <png's stem>.gp: MultiplotStart with `title`,
// each scale's panel, the end of the multiplot.
using Panel = Status (*)(const ReportTables& t, size_t si, const fs::path& dir,
                         std::ostringstream& gp);
Status WritePanels(const ReportTables& t, const fs::path& dir, const std::string& png,
                   const std::string& title, Panel panel) {
  std::ostringstream gp;
  gp << MultiplotStart(png, t.scales.size(), title);
  for (size_t si = 0; si < t.scales.size(); ++si) RDATTN_RETURN_IF_ERROR(panel(t, si, dir, gp));
  gp << "unset multiplot\n";
  return WriteText(dir / fs::path(png).replace_extension(".gp"), gp.str());
}

// (a) Validation NLL against tokens, one panel per scale, one line per arm (mean over seeds)
// with a band from the lowest to the highest seed.
Status NllPanel(const ReportTables& t, size_t si, const fs::path& dir, std::ostringstream& gp) {
  const std::string& scale = t.scales[si];
  // arm -> rows "tokens mean min max sd n"
  std::vector<std::string> arms;
  std::map<std::string, std::string> data;
  std::set<int64_t> xs;
  for (const NllTable& table : t.nll) {
    if (table.scale != scale || table.split != kSplitVal) continue;
    for (size_t a = 0; a < table.arms.size(); ++a) {
      if (std::find(arms.begin(), arms.end(), table.arms[a]) == arms.end()) {
        arms.push_back(table.arms[a]);
      }
      if (table.n[a] < 1) continue;
      double lo = 0, hi = 0;
      bool first = true;
      for (const auto& row : table.cells) {
        if (!row[a].present) continue;
        lo = first ? row[a].nll : std::min(lo, row[a].nll);
        hi = first ? row[a].nll : std::max(hi, row[a].nll);
        first = false;
      }
      const double sd = std::isnan(table.sd[a]) ? 0.0 : table.sd[a];
      data[table.arms[a]] += std::to_string(table.milestone_tokens) + " " + Num(table.mean[a]) +
                             " " + Num(lo) + " " + Num(hi) + " " + Num(sd) + " " +
                             std::to_string(table.n[a]) + "\n";
      xs.insert(table.milestone_tokens);
    }
  }
  const std::string title = "scale " + scale;
  if (xs.empty()) {
    gp << NoDataPanel(title, "no validation NLL yet");
    return Status::Ok();
  }
  gp << TokensPanel(title, "validation NLL (nats/token)", xs);
  std::string plot;
  for (size_t ai = 0; ai < arms.size(); ++ai) {
    auto it = data.find(arms[ai]);
    if (it == data.end()) continue;
    const std::string file =
        "nll_vs_tokens_s" + std::to_string(si) + "_a" + std::to_string(ai) + ".dat";
    RDATTN_RETURN_IF_ERROR(
        WriteText(dir / file, "# tokens mean_nll min_nll max_nll sd_nll n\n" + it->second));
    const std::string color = kPalette[ai % kPaletteSize];
    if (!plot.empty()) plot += ", \\\n     ";
    plot += GnuplotQuoted(file) + " using 1:3:4 with filledcurves fc rgb " + GnuplotQuoted(color) +
            " fs transparent solid 0.18 noborder notitle, \\\n     " + GnuplotQuoted(file) +
            " using 1:2 with linespoints lc rgb " + GnuplotQuoted(color) + " lw 2 pt 7 title " +
            GnuplotQuoted(arms[ai]);
  }
  gp << "plot " << plot << "\n";
  gp << "unset logscale x\nset autoscale x\nset xtics autofreq\n";
  return Status::Ok();
}

Status WriteNllPlot(const ReportTables& t, const fs::path& dir) {
  return WritePanels(
      t, dir, kPlotNllVsTokens,
      "Validation NLL against training tokens: mean over seeds, band = min to max seed", NllPanel);
}

// (b) Per-seed Δ at each scale's last validation milestone, like the paper's Fig. 2: one column
// per (scale, arm), a dot per seed, the mean with its bootstrap interval, a zero line.
Status WriteDeltaPlot(const ReportTables& t, const fs::path& dir) {
  std::vector<const PairedRow*> rows;
  for (const std::string& scale : t.scales) {
    int64_t last = -1;
    for (const PairedRow& r : t.paired) {
      if (r.scale == scale && r.split == kSplitVal) last = std::max(last, r.milestone_tokens);
    }
    for (const PairedRow& r : t.paired) {
      if (r.scale == scale && r.split == kSplitVal && r.milestone_tokens == last) {
        rows.push_back(&r);
      }
    }
  }
  std::ostringstream gp;
  gp << Terminal(kPlotDeltaLastMilestone, 1, 1);
  const int pct = static_cast<int>(std::lround(100.0 * t.level));
  const std::string title = "Δ NLL (arm − " + t.reference_arm +
                            ") per seed at the last milestone; mean with " + std::to_string(pct) +
                            "% bootstrap CI";
  std::string seeds_text = "# x delta seed\n";
  std::string means_text = "# x mean ci_low ci_high\n";
  std::string tics;
  size_t points = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PairedRow& r = *rows[i];
    const double x = static_cast<double>(i + 1);
    std::vector<const SeedPair*> complete;
    for (const SeedPair& p : r.pairs) {
      if (p.complete) complete.push_back(&p);
    }
    for (size_t j = 0; j < complete.size(); ++j) {
      // Spread the dots a little so equal deltas stay visible.
      const double offset =
          complete.size() > 1
              ? 0.16 * (static_cast<double>(j) / static_cast<double>(complete.size() - 1) - 0.5)
              : 0.0;
      seeds_text += Num(x - 0.2 + offset) + " " + Num(complete[j]->delta) + " " +
                    std::to_string(complete[j]->seed) + "\n";
      ++points;
    }
    const PairedSummary& s = r.summary;
    if (s.n >= 1) {
      const double lo = s.bootstrap_ci_defined ? s.bootstrap_ci_low : s.mean;
      const double hi = s.bootstrap_ci_defined ? s.bootstrap_ci_high : s.mean;
      means_text += Num(x + 0.15) + " " + Num(s.mean) + " " + Num(lo) + " " + Num(hi) + "\n";
    }
    if (!tics.empty()) tics += ", ";
    tics += GnuplotQuoted(r.scale + ": " + r.arm + " @" + TokensLabel(r.milestone_tokens) +
                          " (n=" + std::to_string(s.n) + ")") +
            " " + Num(x);
  }
  if (points == 0) {
    gp << NoDataPanel(title, "no complete pairs at the last milestone");
    return WriteText(dir / "delta_last_milestone.gp", gp.str());
  }
  RDATTN_RETURN_IF_ERROR(WriteText(dir / "delta_last_milestone_seeds.dat", seeds_text));
  RDATTN_RETURN_IF_ERROR(WriteText(dir / "delta_last_milestone_means.dat", means_text));
  // The y range holds every dot, every interval and the zero line, with a margin.
  double y_lo = 0.0, y_hi = 0.0;
  for (const PairedRow* r : rows) {
    for (const SeedPair& p : r->pairs) {
      if (!p.complete) continue;
      y_lo = std::min(y_lo, p.delta);
      y_hi = std::max(y_hi, p.delta);
    }
    if (r->summary.bootstrap_ci_defined) {
      y_lo = std::min(y_lo, r->summary.bootstrap_ci_low);
      y_hi = std::max(y_hi, r->summary.bootstrap_ci_high);
    }
  }
  const double pad = y_hi > y_lo ? 0.08 * (y_hi - y_lo) : 0.01;
  gp << "set title " << GnuplotQuoted(title) << "\n"
     << "set yrange [" << Num(y_lo - pad) << ":" << Num(y_hi + pad) << "]\n"
     << "set ylabel 'Δ validation NLL (nats/token); below 0: the arm is better'\n"
     << "set xrange [0.4:" << Num(static_cast<double>(rows.size()) + 0.6) << "]\n"
     << "set xtics (" << tics << ")\n"
     << "set grid ytics\nset key outside bottom center horizontal\n"
     << "plot 0 with lines dt 2 lc rgb 'black' notitle, \\\n"
     << "     'delta_last_milestone_seeds.dat' using 1:2 with points pt 7 ps 1.3 lc rgb "
     << GnuplotQuoted(kPalette[0]) << " title 'per-seed Δ', \\\n"
     << "     'delta_last_milestone_means.dat' using 1:2:3:4 with yerrorbars pt 5 ps 1.6 lw 2 "
        "lc rgb "
     << GnuplotQuoted(kPalette[1]) << " title "
     << GnuplotQuoted("mean Δ, " + std::to_string(pct) + "% bootstrap CI") << "\n";
  return WriteText(dir / "delta_last_milestone.gp", gp.str());
}

// (c) JS(QK‖V) by layer at each arm's last milestone, one panel per scale, one line per arm with
// a V route, error bars = sd over seeds.
Status JsPanel(const ReportTables& t, size_t si, const fs::path& dir, std::ostringstream& gp) {
  const std::string& scale = t.scales[si];
  std::vector<const DepthRow*> last;  // each V-route arm's last milestone
  for (size_t i = 0; i < t.depth.size(); ++i) {
    const DepthRow& r = t.depth[i];
    if (r.scale != scale || !r.has_js) continue;
    auto it =
        std::find_if(last.begin(), last.end(), [&](const DepthRow* d) { return d->arm == r.arm; });
    if (it == last.end()) {
      last.push_back(&r);
    } else if (r.milestone_tokens > (*it)->milestone_tokens) {
      *it = &r;
    }
  }
  const std::string title = "scale " + scale;
  std::string plot;
  size_t layers = 1;
  for (size_t k = 0; k < last.size(); ++k) {
    const DepthRow& r = *last[k];
    std::string text = "# layer js_nats_mean js_nats_sd n\n";
    size_t lines = 0;
    for (const DepthLayer& l : r.layers) {
      if (std::isnan(l.js_nats_mean)) continue;
      text += std::to_string(l.layer) + " " + Num(l.js_nats_mean) + " " +
              Num(std::isnan(l.js_nats_sd) ? 0.0 : l.js_nats_sd) + " " + std::to_string(l.n) + "\n";
      ++lines;
      layers = std::max(layers, static_cast<size_t>(l.layer) + 1);
    }
    if (lines == 0) continue;
    const std::string file =
        "js_by_layer_s" + std::to_string(si) + "_a" + std::to_string(k) + ".dat";
    RDATTN_RETURN_IF_ERROR(WriteText(dir / file, text));
    if (!plot.empty()) plot += ", \\\n     ";
    plot += GnuplotQuoted(file) + " using 1:2:3 with yerrorlines lw 2 pt 7 lc rgb " +
            GnuplotQuoted(kPalette[k % kPaletteSize]) + " title " +
            GnuplotQuoted(r.arm + " @" + TokensLabel(r.milestone_tokens) +
                          " (n=" + std::to_string(r.n) + ")");
  }
  if (plot.empty()) {
    gp << NoDataPanel(title, "no arm with a separate V route");
    return Status::Ok();
  }
  gp << "set title " << GnuplotQuoted(title) << "\n"
     << "set xlabel 'layer'\nset ylabel 'JS(QK‖V) (nats); max ln 2 = 0.693'\n"
     << "set xtics 1\nset xrange [-0.5:" << Num(static_cast<double>(layers) - 0.5) << "]\n"
     << "set yrange [0:*]\n"
     << "set key top left\nset grid\n"
     << "plot " << plot << "\n"
     << "set autoscale x\nset autoscale y\nset xtics autofreq\n";
  return Status::Ok();
}

Status WriteJsPlot(const ReportTables& t, const fs::path& dir) {
  return WritePanels(
      t, dir, kPlotJsByLayer,
      "JS(QK‖V) by layer, mean over seeds at the last milestone (bars: sd over seeds)", JsPanel);
}

// PATH lookup done before fork, so the child only calls async-signal-safe functions.
// (d) Δ per seed against training tokens: one panel per scale, per arm a thin line per seed and
// a thick line for the mean over seeds (the paired rows' mean Δ); a dashed zero line.
Status DeltaTrendPanel(const ReportTables& t, size_t si, const fs::path& dir,
                       std::ostringstream& gp) {
  const std::string& scale = t.scales[si];
  const std::string title = "scale " + scale;
  std::set<int64_t> xs;
  std::vector<const TrendRow*> trends;
  for (const TrendRow& tr : t.trend) {
    if (tr.scale != scale) continue;
    trends.push_back(&tr);
    for (const TrendSeed& ts : tr.seeds) xs.insert(ts.milestones.begin(), ts.milestones.end());
  }
  if (xs.empty()) {
    gp << NoDataPanel(title, "no complete pair yet");
    return Status::Ok();
  }
  gp << TokensPanel(title, "delta NLL (nats/token)", xs);
  std::string plot = "0 with lines dt 2 lc rgb '#555555' notitle";
  for (size_t ai = 0; ai < trends.size(); ++ai) {
    const TrendRow& tr = *trends[ai];
    std::string seeds_data;
    for (const TrendSeed& ts : tr.seeds) {
      if (ts.milestones.empty()) continue;
      for (size_t i = 0; i < ts.milestones.size(); ++i) {
        seeds_data += std::to_string(ts.milestones[i]) + " " + Num(ts.deltas[i]) + " " +
                      std::to_string(ts.seed) + "\n";
      }
      seeds_data += "\n";  // a blank line ends one seed's line
    }
    std::string mean_data;
    for (const PairedRow& row : t.paired) {
      if (row.scale == scale && row.arm == tr.arm && row.split == kSplitVal && row.summary.n > 0) {
        mean_data += std::to_string(row.milestone_tokens) + " " + Num(row.summary.mean) + " " +
                     std::to_string(row.summary.n) + "\n";
      }
    }
    const std::string base = "delta_vs_tokens_s" + std::to_string(si) + "_a" + std::to_string(ai);
    const std::string color = kPalette[(ai + 1) % kPaletteSize];
    if (!seeds_data.empty()) {
      RDATTN_RETURN_IF_ERROR(
          WriteText(dir / (base + "_seeds.dat"), "# tokens delta seed\n" + seeds_data));
      plot += ", \\\n     " + GnuplotQuoted(base + "_seeds.dat") +
              " using 1:2 with linespoints lc rgb " + GnuplotQuoted(color) +
              " lw 1 pt 7 ps 0.6 title " + GnuplotQuoted(tr.arm + ", per seed");
    }
    if (!mean_data.empty()) {
      RDATTN_RETURN_IF_ERROR(
          WriteText(dir / (base + "_mean.dat"), "# tokens mean_delta n\n" + mean_data));
      plot += ", \\\n     " + GnuplotQuoted(base + "_mean.dat") +
              " using 1:2 with linespoints lc rgb " + GnuplotQuoted(color) + " lw 3 pt 5 title " +
              GnuplotQuoted(tr.arm + ", mean");
    }
  }
  gp << "plot " << plot << "\n";
  gp << "unset logscale x\nset autoscale x\nset xtics autofreq\n";
  return Status::Ok();
}

Status WriteDeltaTrendPlot(const ReportTables& t, const fs::path& dir) {
  return WritePanels(t, dir, kPlotDeltaVsTokens,
                     "Delta NLL (arm - " + t.reference_arm +
                         ") per seed against training tokens; thick: mean over seeds",
                     DeltaTrendPanel);
}

// `name` itself when it holds a '/', else the first executable regular file `name` in a PATH
// folder (an empty entry is "."); made absolute, since the child changes folder before execv.
std::string FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return access(name.c_str(), X_OK) == 0 ? fs::absolute(name).string() : std::string();
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string d = dirs.substr(start, end - start);
    if (d.empty()) d = ".";
    const std::string candidate = d + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return fs::absolute(candidate).string();
    }
    start = end + 1;
  }
  return "";
}

// Runs `binary script` in dir; returns its exit status (or -signal) and its output.
Status RunOne(const std::string& binary, const std::string& dir, const std::string& script,
              int& exit_status, std::string& output) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return InternalError(std::string("pipe: ") + std::strerror(errno));
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<char*> argv{const_cast<char*>(binary.c_str()), const_cast<char*>(script.c_str()),
                          nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    if (devnull >= 0) close(devnull);
    return InternalError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (chdir(dir.c_str()) != 0) _exit(126);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  if (devnull >= 0) close(devnull);
  char buffer[4096];
  for (;;) {
    const ssize_t got = read(fds[0], buffer, sizeof(buffer));
    if (got > 0) {
      output.append(buffer, static_cast<size_t>(got));
      if (output.size() > 65536) output.erase(0, output.size() - 65536);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return InternalError(std::string("waitpid: ") + std::strerror(errno));
  }
  exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return Status::Ok();
}

std::string Tail(const std::string& text, size_t max) {
  std::string t = text.size() > max ? "..." + text.substr(text.size() - max) : text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

}  // namespace

Status WriteGnuplotScripts(const ReportTables& tables, const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InternalError("cannot create " + out_dir + ": " + ec.message());
  const fs::path dir(out_dir);
  // Old data of a previous report would be plotted by nobody but could confuse a reader.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (ext == ".dat" || ext == ".gp" || ext == ".png") fs::remove(entry.path(), ec);
  }
  RDATTN_RETURN_IF_ERROR(WriteNllPlot(tables, dir));
  RDATTN_RETURN_IF_ERROR(WriteDeltaPlot(tables, dir));
  RDATTN_RETURN_IF_ERROR(WriteJsPlot(tables, dir));
  RDATTN_RETURN_IF_ERROR(WriteDeltaTrendPlot(tables, dir));
  return Status::Ok();
}

StatusOr<std::string> FindGnuplot(const std::string& name_or_path) {
  std::string binary = FindExecutable(name_or_path);
  if (binary.empty()) {
    return FailedPreconditionError("\"" + name_or_path +
                                   "\" not found; install gnuplot (Debian: gnuplot-nox)");
  }
  return binary;
}

Status RunGnuplot(const std::string& out_dir, const std::string& gnuplot_binary) {
  std::error_code ec;
  std::vector<std::string> scripts;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    if (entry.path().extension() == ".gp") scripts.push_back(entry.path().filename().string());
  }
  if (ec) return NotFoundError("cannot list " + out_dir + ": " + ec.message());
  if (scripts.empty()) return NotFoundError("no gnuplot scripts (*.gp) in " + out_dir);
  std::sort(scripts.begin(), scripts.end());
  StatusOr<std::string> found = FindGnuplot(gnuplot_binary);
  if (!found.ok()) {
    return FailedPreconditionError("cannot draw " + scripts.front() + " (and " +
                                   std::to_string(scripts.size() - 1) +
                                   " more): " + found.status().message());
  }
  const std::string& binary = *found;
  for (const std::string& script : scripts) {
    int exit_status = 0;
    std::string output;
    RDATTN_RETURN_IF_ERROR(RunOne(binary, out_dir, script, exit_status, output));
    if (exit_status == 127 || exit_status == 126) {
      return FailedPreconditionError("gnuplot script " + script + ": could not run " + binary +
                                     (exit_status == 126 ? " in " + out_dir : std::string()));
    }
    if (exit_status != 0) {
      return InternalError("gnuplot script " + script + " failed (exit status " +
                           std::to_string(exit_status) + "): " + Tail(output, 2000));
    }
    const fs::path png = fs::path(out_dir) / (fs::path(script).stem().string() + ".png");
    if (!fs::exists(png, ec) || fs::file_size(png, ec) == 0) {
      return InternalError("gnuplot script " + script + " wrote no " + png.filename().string() +
                           ": " + Tail(output, 2000));
    }
  }
  return Status::Ok();
}

}  // namespace rdattn::stats
