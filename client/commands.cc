// The commands of the `rdattn` client. Each takes its parsed arguments and returns a Status;
// RunCli prints errors and maps them to exit codes. The network part is CoordinatorClient, the
// text is format.h, and following a sweep is watch.h.
#include "client/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "client/cli_args.h"
#include "client/coordinator_client.h"
#include "client/format.h"
#include "client/watch.h"
#include "common/cli.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "proto/contract/contract.h"

namespace rdattn::client {
namespace {

// ---------------------------------------------------------------------------------------------
// Command table.

struct Invocation {
  const Args& args;
  std::ostream& out;
  std::ostream& err;
  const EnvGetter& env;
  int exit_code = kExitOk;  // set by a command that succeeds with a non-zero exit (watch)
};

struct Positional {
  std::string name;  // as --help shows it: FILE, ID, COMMAND
  std::string help;
  bool required = true;
};

struct Command {
  std::string name;
  std::string usage;    // after "rdattn NAME", the first line of the footer of its --help
  std::string summary;  // one line, in `rdattn --help`'s list of commands
  std::string details;  // more text for `rdattn NAME --help` ("" when the flags say it all)
  std::vector<Positional> positional;
  std::vector<FlagSpec> flags;
  bool remote = true;  // talks to the coordinator (takes the connection flags)
  std::function<Status(Invocation&)> run;
};

// The flags of every remote command, accepted before the command name too.
const std::vector<FlagSpec>& ConnectionFlags() {
  static const std::vector<FlagSpec> flags = {
      {"coordinator", FlagKind::kValue,
       "coordinator address (env RDATTN_COORDINATOR, config `coordinator:`)", "127.0.0.1:50051"},
      {"token", FlagKind::kValue, "bearer token (env RDATTN_TOKEN, config `token:`)", ""},
      {"token-file", FlagKind::kValue,
       "file holding the token (env RDATTN_TOKEN_FILE, config `token_file:`)", ""},
      {"timeout", FlagKind::kValue, "deadline of each call, seconds (config `timeout_seconds:`)",
       "30"},
      {"tls", FlagKind::kSwitch, "TLS channel with the system's root certificates", ""},
      {"ca-cert", FlagKind::kValue, "TLS channel with these PEM root certificates", ""},
      {"config", FlagKind::kValue, "config file (env RDATTN_CONFIG)",
       "~/.config/rdattn/config.yaml"}};
  return flags;
}

const std::vector<Command>& Commands();

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Helpers.

StatusOr<std::string> FormatFlag(const Args& args) {
  const std::string format = args.Get("format").value_or("text");
  if (format != "text" && format != "json") {
    return InvalidArgumentError("--format: expected text or json, got '" + format + "'");
  }
  return format;
}

enum class SweepFormat { kYaml, kJson, kTextProto };

// By extension; otherwise JSON when the text starts with '{', else YAML.
SweepFormat FormatOf(const std::string& path, const std::string& content) {
  auto ends_with = [&path](const std::string& ext) {
    return path.size() >= ext.size() &&
           path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends_with(".json")) return SweepFormat::kJson;
  if (ends_with(".yaml") || ends_with(".yml")) return SweepFormat::kYaml;
  if (ends_with(".textproto") || ends_with(".txtpb") || ends_with(".pbtxt")) {
    return SweepFormat::kTextProto;
  }
  const size_t first = content.find_first_not_of(" \t\r\n");
  return first != std::string::npos && content[first] == '{' ? SweepFormat::kJson
                                                             : SweepFormat::kYaml;
}

// Reads and parses a sweep file (YAML, JSON or text proto).
StatusOr<pb::SweepSpec> LoadSweep(const std::string& path, std::string* content) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  *content = *text;
  switch (FormatOf(path, *content)) {
    case SweepFormat::kJson:
      return contract::ParseSweepJson(*content);
    case SweepFormat::kTextProto:
      return contract::ParseSweepTextProto(*content);
    case SweepFormat::kYaml:
      break;
  }
  return contract::ParseSweepYaml(*content);
}

StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const Invocation& inv) {
  auto connection = ResolveConnection(inv.args, inv.env);
  if (!connection.ok()) return connection.status();
  return std::make_unique<CoordinatorClient>(*connection);
}

// ---------------------------------------------------------------------------------------------
// validate

Status RunValidate(Invocation& inv) {
  const std::string& path = inv.args.positional[1];
  RDATTN_ASSIGN_OR_RETURN(const std::string format, FormatFlag(inv.args));
  std::string content;
  RDATTN_ASSIGN_OR_RETURN(pb::SweepSpec spec, LoadSweep(path, &content));
  RDATTN_ASSIGN_OR_RETURN(std::vector<pb::JobSpec> jobs, contract::ExpandSweep(spec, ""));
  if (format == "json") {
    pb::SubmitSweepResponse planned;  // the shape `submit --validate-only` returns
    *planned.mutable_sweep()->mutable_spec() = spec;
    for (auto& j : jobs) *planned.add_planned_jobs() = std::move(j);
    inv.out << MessageJson(planned, true) << "\n";
    return Status::Ok();
  }
  inv.out << path << ": ok\n" << FormatExpansion(spec, jobs, inv.args.Has("jobs"));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// watch (also used by submit --watch)

// --format of watch and submit --watch: table, text or json; without it, the table when stdout
// is a terminal (the process's own stdout, not a stream a test passes in), else text.
StatusOr<WatchOptions> WatchFlags(const Invocation& inv) {
  WatchOptions options;
  const bool terminal = &inv.out == &std::cout && ::isatty(STDOUT_FILENO) == 1;
  const std::string format = inv.args.Get("format").value_or(terminal ? "table" : "text");
  if (format == "table") {
    options.format = WatchFormat::kTable;
    options.terminal_fd = terminal ? STDOUT_FILENO : -1;
  } else if (format == "text") {
    options.format = WatchFormat::kText;
  } else if (format == "json") {
    options.format = WatchFormat::kJson;
  } else {
    return InvalidArgumentError("--format: expected table, text or json, got '" + format + "'");
  }
  if (auto v = inv.args.Get("interval")) {
    RDATTN_ASSIGN_OR_RETURN(options.printer.progress_interval_seconds,
                            ParseDoubleFlag("interval", *v, 0, 86400));
  }
  return options;
}

// Follows the sweep and sets the exit code from its end.
Status WatchLoop(Invocation& inv, CoordinatorClient& client, const std::string& sweep_id,
                 uint64_t after_seq) {
  RDATTN_ASSIGN_OR_RETURN(const WatchOptions options, WatchFlags(inv));
  pb::SweepState final_state = pb::SWEEP_STATE_UNSPECIFIED;
  RDATTN_RETURN_IF_ERROR(
      FollowSweep(client, sweep_id, after_seq, options, inv.out, inv.err, &final_state));
  if (final_state != pb::SWEEP_STATE_SUCCEEDED) inv.exit_code = kExitSweepUnsuccessful;
  return Status::Ok();
}

Status RunWatch(Invocation& inv) {
  uint64_t from_seq = 0;
  if (auto v = inv.args.Get("from-seq")) {
    RDATTN_ASSIGN_OR_RETURN(const long long n, ParseIntFlag("from-seq", *v, 0));
    from_seq = static_cast<uint64_t>(n);
  }
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));
  return WatchLoop(inv, *client, inv.args.positional[1], from_seq);
}

// ---------------------------------------------------------------------------------------------
// submit

Status RunSubmit(Invocation& inv) {
  const std::string& path = inv.args.positional[1];
  if (inv.args.Has("watch")) RDATTN_RETURN_IF_ERROR(WatchFlags(inv).status());  // before submitting
  std::string content;
  RDATTN_ASSIGN_OR_RETURN(pb::SweepSpec spec, LoadSweep(path, &content));
  RDATTN_ASSIGN_OR_RETURN(const Connection connection, ResolveConnection(inv.args, inv.env));
  CoordinatorClient client(connection);

  pb::SubmitSweepRequest request;
  request.set_request_id(inv.args.Get("request-id")
                             .value_or(DefaultRequestId(content, spec.owner(), connection.token)));
  if (request.request_id().empty()) return InvalidArgumentError("--request-id: must not be empty");
  *request.mutable_spec() = spec;
  request.set_validate_only(inv.args.Has("validate-only"));
  RDATTN_ASSIGN_OR_RETURN(pb::SubmitSweepResponse response, client.SubmitSweep(request));

  if (request.validate_only()) {
    std::vector<pb::JobSpec> jobs(response.planned_jobs().begin(), response.planned_jobs().end());
    inv.out << path << ": accepted by the coordinator (nothing stored)\n"
            << FormatExpansion(spec, jobs, false);
    // A seed policy's design, as the coordinator computed it (boundaries and their simulated
    // type-I error and expected seeds).
    if (response.sweep().sequential().design().look_seeds_size() > 0) {
      inv.out << FormatSequential(response.sweep().sequential());
    }
    return Status::Ok();
  }
  // The id alone on stdout (ID=$(rdattn submit f.yaml)); the story on stderr.
  const pb::SweepStatus& sweep = response.sweep();
  if (response.created()) {
    inv.err << "submitted sweep " << sweep.sweep_id() << ": " << sweep.job_counts().total()
            << " jobs (request id " << request.request_id() << ")" << std::endl;
  } else {
    inv.err << "sweep " << sweep.sweep_id() << " was already submitted with request id "
            << request.request_id() << " (it is " << SweepStateName(sweep.state())
            << "); pass --request-id to submit the file again as a new sweep" << std::endl;
  }
  inv.out << sweep.sweep_id() << std::endl;
  if (!inv.args.Has("watch")) return Status::Ok();
  return WatchLoop(inv, client, sweep.sweep_id(), 0);
}

// ---------------------------------------------------------------------------------------------
// list, get, cancel, report

Status RunList(Invocation& inv) {
  RDATTN_ASSIGN_OR_RETURN(const std::string format, FormatFlag(inv.args));
  pb::ListSweepsRequest request;
  for (const std::string& value : inv.args.GetAll("state")) {
    size_t start = 0;
    while (start <= value.size()) {
      const size_t comma = std::min(value.find(',', start), value.size());
      const std::string name = value.substr(start, comma - start);
      const auto state = ParseSweepState(name);
      if (!state) {
        return InvalidArgumentError("--state: unknown state '" + name +
                                    "' (valid: pending, running, succeeded, failed, cancelled)");
      }
      request.add_states(*state);
      start = comma + 1;
    }
  }
  request.set_owner(inv.args.Get("owner").value_or(""));
  if (auto v = inv.args.Get("page-size")) {
    RDATTN_ASSIGN_OR_RETURN(const long long n, ParseIntFlag("page-size", *v, 1));
    request.set_page_size(static_cast<int32_t>(std::min<long long>(n, 1 << 20)));
  }
  request.set_page_token(inv.args.Get("page-token").value_or(""));
  request.set_view(pb::SWEEP_VIEW_BASIC);
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));

  std::vector<pb::SweepStatus> sweeps;
  std::string next;
  while (true) {
    RDATTN_ASSIGN_OR_RETURN(pb::ListSweepsResponse page, client->ListSweeps(request));
    sweeps.insert(sweeps.end(), page.sweeps().begin(), page.sweeps().end());
    next = page.next_page_token();
    if (next.empty() || !inv.args.Has("all")) break;
    request.set_page_token(next);
  }
  if (format == "json") {
    inv.out << "[";
    for (size_t i = 0; i < sweeps.size(); ++i) {
      inv.out << (i ? ",\n " : "") << MessageJson(sweeps[i], false);
    }
    inv.out << "]\n";
    if (!next.empty()) inv.err << "next page: --page-token " << next << "\n";
    return Status::Ok();
  }
  if (sweeps.empty()) {
    inv.out << "no sweeps\n";
  } else {
    inv.out << FormatSweepList(sweeps);
  }
  if (!next.empty()) inv.out << "more: rdattn list --page-token " << next << " (or --all)\n";
  return Status::Ok();
}

Status RunGet(Invocation& inv) {
  RDATTN_ASSIGN_OR_RETURN(const std::string format, FormatFlag(inv.args));
  int64_t limit = -1;  // every job
  if (auto v = inv.args.Get("limit")) {
    RDATTN_ASSIGN_OR_RETURN(limit, ParseIntFlag("limit", *v, 0));
  }
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));
  // The summary first (a few KB whatever the sweep's size), then the jobs page by page
  // (docs/client.md "get ID").
  pb::GetSweepRequest request;
  request.set_sweep_id(inv.args.positional[1]);
  request.set_view(pb::SWEEP_VIEW_SUMMARY);
  RDATTN_ASSIGN_OR_RETURN(pb::GetSweepResponse response, client->GetSweep(request));
  pb::SweepStatus sweep = std::move(*response.mutable_sweep());
  bool more = false;
  if (!sweep.has_summary() && sweep.jobs_size() > 0) {
    // A coordinator older than the summary view answered with the full view: every job.
    if (limit >= 0 && sweep.jobs_size() > limit) {
      sweep.mutable_jobs()->DeleteSubrange(static_cast<int>(limit),
                                           sweep.jobs_size() - static_cast<int>(limit));
      more = true;
    }
  } else if (limit != 0) {
    RDATTN_ASSIGN_OR_RETURN(
        pb::SweepStatus paged,
        client->GetSweepJobs(sweep.sweep_id(), std::max<int64_t>(limit, 0), &more));
    sweep.mutable_jobs()->Swap(paged.mutable_jobs());
  } else {
    more = sweep.job_counts().total() > 0;
  }
  if (format == "json") {
    inv.out << MessageJson(sweep, true) << "\n";
  } else {
    inv.out << FormatSweep(sweep) << "\n";
    if (more) {
      inv.out << "(" << sweep.jobs_size() << " of " << sweep.job_counts().total()
              << " jobs shown; --limit N shows more)\n";
    }
  }
  return Status::Ok();
}

Status RunCancel(Invocation& inv) {
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));
  pb::CancelSweepRequest request;
  request.set_sweep_id(inv.args.positional[1]);
  request.set_reason(inv.args.Get("reason").value_or("cancelled with rdattn cancel"));
  RDATTN_ASSIGN_OR_RETURN(pb::CancelSweepResponse response, client->CancelSweep(request));
  const pb::SweepStatus& s = response.sweep();
  inv.out << "sweep " << s.sweep_id() << ": " << SweepStateName(s.state());
  const int active = s.job_counts().running() + s.job_counts().leased();
  if (active > 0) inv.out << " (" << active << " job(s) still stopping)";
  inv.out << "\n";
  return Status::Ok();
}

// A file name the coordinator returned: "NAME" or "plots/NAME", NAME of [A-Za-z0-9._-] and not
// starting with '.', so nothing is written outside the output folder.
bool SafeReportFileName(const std::string& name) {
  std::string base = name;
  if (base.rfind("plots/", 0) == 0) base = base.substr(6);
  if (base.empty() || base[0] == '.' || base.size() > 200) return false;
  for (char c : base) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Whether a returned file belongs to a --format: md -> report.md and plots/*, csv -> *.csv,
// json -> report.json.
bool FileOfFormat(const std::string& name, const std::string& format) {
  auto ends_with = [&name](const std::string& ext) {
    return name.size() >= ext.size() &&
           name.compare(name.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (format == "md") return name == "report.md" || name.rfind("plots/", 0) == 0;
  if (format == "csv") return name.find('/') == std::string::npos && ends_with(".csv");
  return name == "report.json";
}

Status RunReport(Invocation& inv) {
  const std::optional<std::string> out_dir = inv.args.Get("out");
  const std::string format = inv.args.Get("format").value_or(out_dir ? "md" : "text");
  if (format != "text" && format != "md" && format != "csv" && format != "json") {
    return InvalidArgumentError("--format: expected text, md, csv or json, got '" + format + "'");
  }
  if (out_dir && format == "text") {
    return InvalidArgumentError("--out: needs --format md, csv or json (text goes to stdout)");
  }
  if (out_dir && out_dir->empty()) return InvalidArgumentError("--out: must not be empty");
  if (!out_dir && format == "csv") {
    return InvalidArgumentError("--format csv: writes one file per table; give --out DIR");
  }
  pb::GetReportRequest request;
  request.set_sweep_id(inv.args.positional[1]);
  request.set_reference_arm(
      inv.args.Get("reference").value_or(inv.args.Get("reference-arm").value_or("")));
  std::optional<std::string> level = inv.args.Get("level");
  if (!level) level = inv.args.Get("confidence");
  if (level) {
    RDATTN_ASSIGN_OR_RETURN(const double c, ParseDoubleFlag("level", *level, 0.5, 0.9999));
    request.set_confidence_level(c);
  }
  if (auto v = inv.args.Get("resamples")) {
    RDATTN_ASSIGN_OR_RETURN(const long long n, ParseIntFlag("resamples", *v, 1));
    if (n > 1000000) return InvalidArgumentError("--resamples: at most 1000000, got " + *v);
    request.set_bootstrap_resamples(static_cast<int32_t>(n));
  }
  if (auto v = inv.args.Get("target-delta")) {
    RDATTN_ASSIGN_OR_RETURN(const double d, ParseDoubleFlag("target-delta", *v, 1e-9, 10));
    request.set_target_delta_nll(d);
  }
  if (format == "text") {
    request.set_omit_files(true);
  } else {
    request.add_formats(format);
  }
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));
  RDATTN_ASSIGN_OR_RETURN(pb::GetReportResponse response, client->GetReport(request));
  if (format == "text") {
    inv.out << FormatReport(response.report());
    return Status::Ok();
  }
  if (!response.warning().empty()) inv.err << "rdattn: warning: " << response.warning() << "\n";
  std::vector<const pb::ReportFile*> files;
  for (const pb::ReportFile& f : response.files()) {
    if (!SafeReportFileName(f.name())) {
      return InternalError("the coordinator returned a report file with an unsafe name '" +
                           f.name() + "'");
    }
    if (FileOfFormat(f.name(), format)) files.push_back(&f);
  }
  const std::string main_name = format == "md"     ? "report.md"
                                : format == "json" ? "report.json"
                                                   : "";
  const bool has_main = std::any_of(files.begin(), files.end(), [&](const pb::ReportFile* f) {
    return main_name.empty() || f->name() == main_name;
  });
  if (files.empty() || !has_main) {
    return InternalError("the coordinator returned no " + format +
                         " report (is it older than "
                         "this client?)");
  }
  if (!out_dir) {  // md or json to stdout
    for (const pb::ReportFile* f : files) {
      if (f->name() == main_name) inv.out << f->content();
    }
    return Status::Ok();
  }
  namespace fs = std::filesystem;
  const fs::path dir(*out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir.string() + ": " + ec.message());
  bool plot_data = false;
  for (const pb::ReportFile* f : files) {
    const fs::path path = dir / f->name();
    if (f->name().rfind("plots/", 0) == 0) {
      fs::create_directories(path.parent_path(), ec);
      if (ec)
        return InternalError("cannot create " + path.parent_path().string() + ": " + ec.message());
    }
    RDATTN_RETURN_IF_ERROR(WriteFileAtomically(path.string(), f->content()));
    const std::string ext = path.extension().string();
    if (ext == ".png") {
      inv.out << "plot: " << path.string() << "\n";
    } else if (ext == ".gp" || ext == ".dat") {
      plot_data = true;
    } else {
      inv.out << "report: " << path.string() << "\n";
    }
  }
  if (plot_data) {
    inv.out << "plot scripts and data: " << (dir / "plots").string() << "/*.gp, *.dat\n";
  }
  return Status::Ok();
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"validate",
       "FILE [--jobs] [--format text|json]",
       "check a sweep file offline and show its jobs and pair groups",
       "",
       {{"FILE", "the sweep: YAML, JSON or text proto"}},
       {{"jobs", FlagKind::kSwitch, "list every job", ""},
        {"format", FlagKind::kValue, "text or json (the planned jobs)", "text"}},
       false,
       RunValidate},
      {"submit",
       "FILE [--request-id ID] [--validate-only] [--watch [--interval S] [--format F]]",
       "submit a sweep; prints its id. --watch follows it as `watch` does",
       "",
       {{"FILE", "the sweep: YAML, JSON or text proto"}},
       {{"request-id", FlagKind::kValue, "idempotency key",
         "sha256 of the owner and the file's bytes"},
        {"validate-only", FlagKind::kSwitch, "let the coordinator check it; store nothing", ""},
        {"watch", FlagKind::kSwitch, "follow the sweep until it ends (exit 3 unless SUCCEEDED)",
         ""},
        {"interval", FlagKind::kValue, "with --watch: seconds between progress lines", "10"},
        {"format", FlagKind::kValue, "with --watch: table, text or json",
         "table on a terminal, else text"}},
       true,
       RunSubmit},
      {"list",
       "[--state S[,S]] [--owner O] [--page-size N] [--page-token T] [--all] [--format F]",
       "list sweeps, newest first",
       "",
       {},
       {{"state", FlagKind::kValue,
         "only these states, comma-separated or repeated: pending, running, succeeded, failed, "
         "cancelled",
         ""},
        {"owner", FlagKind::kValue, "only this owner's sweeps", ""},
        {"page-size", FlagKind::kValue, "sweeps per page (>= 1)", "the coordinator's"},
        {"page-token", FlagKind::kValue, "the page after a previous listing's", ""},
        {"all", FlagKind::kSwitch, "every page", ""},
        {"format", FlagKind::kValue, "text or json", "text"}},
       true,
       RunList},
      {"get",
       "ID [--limit N] [--format text|json]",
       "a sweep's state, its summary and its per-job table",
       "The summary (pair groups by state, jobs per stored milestone, retries, the latest\n"
       "failures) comes in one small reply; the jobs are read in pages of 1,000.",
       {{"ID", "the sweep id"}},
       {{"limit", FlagKind::kValue, "at most N jobs in the table (>= 0; 0: the summary only)",
         "every job"},
        {"format", FlagKind::kValue, "text or json", "text"}},
       true,
       RunGet},
      {"watch",
       "ID [--from-seq N] [--interval S] [--format table|text|json]",
       "follow a sweep live until it ends",
       "--format table (the default on a terminal): one row per job (state, attempt, progress,\n"
       "loss, val NLL, tok/s, ETA) under a sweep line (jobs done/total, overall ETA), redrawn in\n"
       "place; text (the default otherwise): one line per event, progress at most every\n"
       "--interval seconds; json: every event as one JSON line. Exit 3 when the sweep ends\n"
       "FAILED or CANCELLED.",
       {{"ID", "the sweep id"}},
       {{"from-seq", FlagKind::kValue, "start after this event sequence number (>= 0)", "0"},
        {"interval", FlagKind::kValue, "seconds between progress lines (text)", "10"},
        {"format", FlagKind::kValue, "table, text or json", "table on a terminal, else text"}},
       true,
       RunWatch},
      {"cancel",
       "ID [--reason TEXT]",
       "cancel every job of a sweep that has not ended",
       "",
       {{"ID", "the sweep id"}},
       {{"reason", FlagKind::kValue, "recorded with the cancellation",
         "cancelled with rdattn cancel"}},
       true,
       RunCancel},
      {"report",
       "ID [--format text|md|csv|json] [--out DIR] [--reference ARM] [--level 0.95] "
       "[--resamples N] [--target-delta NATS]",
       "the paired report: text table to stdout, or report.md (+ plots/), CSVs, report.json "
       "written into DIR",
       "",
       {{"ID", "the sweep id"}},
       {{"format", FlagKind::kValue, "text, md, csv (needs --out) or json", "text; md with --out"},
        {"out", FlagKind::kValue, "folder DIR to write the report's files into", ""},
        {"reference", FlagKind::kValue, "the reference arm of the pairs", "the sweep's"},
        {"reference-arm", FlagKind::kValue, "the same as --reference", ""},
        {"level", FlagKind::kValue, "confidence level of the intervals, in [0.5, 0.9999]",
         "the coordinator's"},
        {"confidence", FlagKind::kValue, "the same as --level", ""},
        {"resamples", FlagKind::kValue, "bootstrap resamples (1 to 1000000)", "the coordinator's"},
        {"target-delta", FlagKind::kValue, "the NLL difference (nats) to size seeds for",
         "the coordinator's"}},
       true,
       RunReport},
      {"help",
       "[COMMAND]",
       "this help, or one command's (as `rdattn COMMAND --help`)",
       "",
       {{"COMMAND", "the command", false}},
       {},
       false,
       nullptr},
  };
  return commands;
}

// "rdattn: CODE: message", or one line per field error when there are several: those of a local
// check, or those the coordinator sent as google.rpc.BadRequest details (never split from text).
void PrintError(std::ostream& err, const Status& status, const std::string& context) {
  const std::vector<FieldError>& fields = status.field_errors();
  const std::string code(StatusCodeName(status.code()));
  if (fields.size() <= 1) {
    err << "rdattn: " << code << ": " << (context.empty() ? "" : context + ": ") << status.message()
        << "\n";
    return;
  }
  err << "rdattn: " << code << ": " << fields.size() << " errors"
      << (context.empty() ? "" : " in " + context) << ":\n";
  for (const FieldError& f : fields) err << "  " << f.Text() << "\n";
}

}  // namespace

std::string DefaultRequestId(const std::string& file_content, const std::string& spec_owner,
                             const std::string& token) {
  const std::string owner = !spec_owner.empty() ? "owner:" + spec_owner
                            : token.empty()     ? std::string("anonymous")
                                                : "token:" + Sha256Hex(token);
  return "sha256:" + Sha256Hex("rdattn submit v1\n" + owner + "\n" + file_content);
}

namespace {

// The CLI11 options of one command's flags.
void AddFlags(CLI::App* app, const std::vector<FlagSpec>& flags) {
  for (const FlagSpec& f : flags) {
    CLI::Option* opt = f.kind == FlagKind::kSwitch
                           ? app->add_flag("--" + f.name, f.help)
                           : app->add_option("--" + f.name, f.help)->type_name("TEXT");
    if (!f.default_text.empty()) opt->default_str(f.default_text);
  }
}

// The flags of `flags` given to `app`, into `args`: a value flag's every value, in order.
void CollectFlags(const CLI::App& app, const std::vector<FlagSpec>& flags, Args* args) {
  for (const FlagSpec& f : flags) {
    const CLI::Option* opt = app.get_option("--" + f.name);
    if (opt->count() == 0) continue;
    if (f.kind == FlagKind::kSwitch) {
      if (opt->as<bool>()) args->switches.insert(f.name);  // --watch, or --watch=true; not =false
    } else {
      std::vector<std::string>& values = args->values[f.name];
      values.insert(values.end(), opt->results().begin(), opt->results().end());
    }
  }
}

// The app: the connection flags (also accepted before the command name) and one subcommand per
// command, each with its positional arguments and flags.
void AddCommands(CLI::App& app) {
  AddFlags(&app, ConnectionFlags());
  app.require_subcommand(1);
  for (const Command& c : Commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    sub->footer("rdattn " + c.name + " " + c.usage + (c.details.empty() ? "" : "\n" + c.details));
    for (const Positional& p : c.positional) {
      CLI::Option* opt = sub->add_option(p.name, p.help);
      if (p.required) opt->required();
    }
    AddFlags(sub, c.flags);
    if (c.remote) AddFlags(sub, ConnectionFlags());
  }
}

}  // namespace

int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           const EnvGetter& env) {
  CLI::App app("Runs matched-seed pretraining sweeps on an rdattn coordinator (docs/client.md).",
               "rdattn");
  cli::Setup(app);
  AddCommands(app);
  app.footer(
      "Exit codes: 0 ok, 1 error, 2 usage error or invalid sweep, 3 the watched sweep ended\n"
      "FAILED or CANCELLED. `rdattn COMMAND --help` (or `rdattn help COMMAND`) shows one "
      "command.");
  if (argv.size() <= 1) return cli::Usage(app, "no command given", kExitUsage, err);
  if (const int code = cli::Parse(app, argv, kExitUsage, out, err); code >= 0) return code;
  const CLI::App& sub = *app.get_subcommands().front();
  const Command* command = FindCommand(sub.get_name());
  Args args;
  args.positional.push_back(command->name);
  for (const Positional& p : command->positional) {
    const CLI::Option* opt = sub.get_option(p.name);
    args.positional.insert(args.positional.end(), opt->results().begin(), opt->results().end());
  }
  CollectFlags(app, ConnectionFlags(), &args);
  if (!command->remote && !args.FlagNames().empty()) {
    return cli::Usage(app, command->name + " does not take --" + *args.FlagNames().begin(),
                      kExitUsage, err);
  }
  CollectFlags(sub, command->flags, &args);
  if (command->remote) CollectFlags(sub, ConnectionFlags(), &args);
  if (command->name == "help") {  // `rdattn help [COMMAND]`: `rdattn [COMMAND] --help`
    if (args.positional.size() == 1) {
      out << app.get_formatter()->make_help(&app, "rdattn", CLI::AppFormatMode::Normal);
      return kExitOk;
    }
    if (FindCommand(args.positional[1]) == nullptr) {
      return cli::Usage(app, "unknown command '" + args.positional[1] + "'", kExitUsage, err);
    }
    out << app.get_subcommand(args.positional[1])->help("rdattn");
    return kExitOk;
  }

  Invocation inv{args, out, err, env};
  const Status status = command->run(inv);
  out.flush();
  if (!status.ok()) {
    // A bad sweep names its file; flag errors ("--format: ...") and RPC errors do not.
    const bool file_command = command->name == "validate" || command->name == "submit";
    const bool about_file =
        status.code() == StatusCode::kInvalidArgument && status.message().rfind("--", 0) != 0;
    PrintError(err, status, file_command && about_file ? args.positional[1] : "");
    return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
  }
  return inv.exit_code;
}

}  // namespace rdattn::client
