// The report's files from its tables (report_files.h): the renderers of coordinator/stats
// (render.h, plots.h) and gnuplot in a private temporary folder.
#include "coordinator/report_files.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "coordinator/stats/plots.h"
#include "coordinator/stats/render.h"

namespace rdattn::coordinator {
namespace {

namespace fs = std::filesystem;

void AddFile(pb::GetReportResponse& resp, const std::string& name, std::string content,
             const std::string& media_type) {
  pb::ReportFile* f = resp.add_files();
  f->set_name(name);
  f->set_content(std::move(content));
  f->set_media_type(media_type);
}

// A fresh private folder under `parent` (/tmp when empty), removed by the destructor.
class TempDir {
 public:
  static StatusOr<std::unique_ptr<TempDir>> Make(std::string parent) {
    if (parent.empty()) parent = "/tmp";
    std::string templ = (fs::path(parent) / "rdattn-report-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) {
      return InternalError("cannot create a temporary folder in " + parent);
    }
    return std::unique_ptr<TempDir>(new TempDir(templ));
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  fs::path path_;
};

// Draws the plots in a temporary folder (removed on return) and returns plots/* as files: the
// four PNGs, then the gnuplot scripts and data.
StatusOr<std::vector<pb::ReportFile>> RenderPlots(const stats::ReportTables& tables,
                                                  const ReportOptions& options) {
  if (options.gnuplot_binary.empty()) {
    return FailedPreconditionError(
        "no gnuplot: rdattn-coordinator found none at startup (--gnuplot); install gnuplot "
        "(Debian: gnuplot-nox) and restart it");
  }
  RDATTN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> tmp, TempDir::Make(options.temp_parent));
  const fs::path plots = tmp->path() / "plots";
  RDATTN_RETURN_IF_ERROR(stats::WriteGnuplotScripts(tables, plots.string()));
  RDATTN_RETURN_IF_ERROR(stats::RunGnuplot(plots.string(), options.gnuplot_binary));
  std::vector<std::pair<std::string, std::string>> names;  // file name, media type
  for (const char* png : {stats::kPlotNllVsTokens, stats::kPlotDeltaLastMilestone,
                          stats::kPlotJsByLayer, stats::kPlotDeltaVsTokens}) {
    names.emplace_back(png, "image/png");
  }
  std::vector<std::string> other;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(plots, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".gp" || ext == ".dat")) {
      other.push_back(e.path().filename().string());
    }
  }
  if (ec) return InternalError("cannot list " + plots.string() + ": " + ec.message());
  std::sort(other.begin(), other.end());
  for (const std::string& name : other) names.emplace_back(name, "text/plain");
  std::vector<pb::ReportFile> files;
  for (const auto& [name, type] : names) {
    RDATTN_ASSIGN_OR_RETURN(std::string content, ReadFile((plots / name).string()));
    pb::ReportFile f;
    f.set_name("plots/" + name);
    f.set_content(std::move(content));
    f.set_media_type(type);
    files.push_back(std::move(f));
  }
  return files;
}

}  // namespace

void AddReportFiles(const stats::ReportTables& tables, const ReportOptions& options,
                    pb::GetReportResponse& resp) {
  auto wanted = [&](const char* format) {
    return options.formats.empty() || options.formats.count(format) > 0;
  };
  if (wanted("md")) {
    StatusOr<std::vector<pb::ReportFile>> plots = RenderPlots(tables, options);
    std::string md;
    if (plots.ok()) {
      md = stats::RenderMarkdown(tables, "plots");
    } else {
      resp.set_warning("plots not drawn: " + plots.status().ToString());
      md = stats::RenderMarkdown(tables, "", plots.status().ToString());
    }
    AddFile(resp, "report.md", std::move(md), "text/markdown");
    if (plots.ok()) {
      for (pb::ReportFile& f : *plots) *resp.add_files() = std::move(f);
    }
  }
  if (wanted("csv")) {
    for (auto& [name, content] : stats::RenderCsv(tables)) {
      AddFile(resp, name, std::move(content), "text/csv");
    }
  }
  if (wanted("json")) {
    AddFile(resp, "report.json", stats::RenderJson(tables), "application/json");
  }
}

}  // namespace rdattn::coordinator
