// WriteReportFiles(): one format of the report written into a folder (plots drawn for "md").
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "coordinator/stats/plots.h"
#include "coordinator/stats/render.h"

namespace rdattn::stats {
namespace {

Status WriteFile(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InternalError("cannot write " + path.string());
  out << content;
  out.close();
  if (!out) return InternalError("cannot write " + path.string());
  return Status::Ok();
}

}  // namespace

StatusOr<WrittenReport> WriteReportFiles(const ReportTables& tables, const std::string& out_dir,
                                         const std::string& format,
                                         const std::string& gnuplot_binary) {
  namespace fs = std::filesystem;
  if (format != "md" && format != "csv" && format != "json") {
    return InvalidArgumentError("--format must be md, csv or json, not \"" + format + "\"");
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InternalError("cannot create " + out_dir + ": " + ec.message());
  WrittenReport written;
  const fs::path dir(out_dir);
  if (format == "json") {
    RDATTN_RETURN_IF_ERROR(WriteFile(dir / "report.json", RenderJson(tables)));
    written.files.push_back((dir / "report.json").string());
    return written;
  }
  if (format == "csv") {
    for (const auto& [name, content] : RenderCsv(tables)) {
      RDATTN_RETURN_IF_ERROR(WriteFile(dir / name, content));
      written.files.push_back((dir / name).string());
    }
    return written;
  }
  const fs::path plots = dir / "plots";
  Status plotted = WriteGnuplotScripts(tables, plots.string());
  if (plotted.ok()) plotted = RunGnuplot(plots.string(), gnuplot_binary);
  std::string md;
  if (plotted.ok()) {
    md = RenderMarkdown(tables, "plots");
    for (const char* png :
         {kPlotNllVsTokens, kPlotDeltaLastMilestone, kPlotJsByLayer, kPlotDeltaVsTokens}) {
      written.files.push_back((plots / png).string());
    }
  } else {
    written.warnings.push_back("plots not drawn: " + plotted.ToString());
    md = RenderMarkdown(tables, "", plotted.ToString());
  }
  RDATTN_RETURN_IF_ERROR(WriteFile(dir / "report.md", md));
  written.files.insert(written.files.begin(), (dir / "report.md").string());
  return written;
}

}  // namespace rdattn::stats
