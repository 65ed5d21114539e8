// The commands of the `rdattn` client. Each takes its parsed arguments and returns a Status;
// RunCli prints errors and maps them to exit codes. The network part is CoordinatorClient, the
// text is format.h, and following a sweep is watch.h.
#include "client/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "client/coordinator_client.h"
#include "client/format.h"
#include "client/options.h"
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
  const CliOptions& options;
  std::ostream& out;
  std::ostream& err;
  const EnvGetter& env;
  int exit_code = kExitOk;  // set by a command that succeeds with a non-zero exit (watch)
};

struct Command {
  std::string name;
  std::string usage;    // after "rdattn NAME", the first line of the footer of its --help
  std::string summary;  // one line, in `rdattn --help`'s list of commands
  std::string details;  // more text for `rdattn NAME --help` ("" when the flags say it all)
  bool remote = true;   // talks to the coordinator (takes the connection flags)
  // Its positional arguments and flags, each with its check, stored into `options`.
  std::function<void(CLI::App* sub, CliOptions& options)> add;
  std::function<Status(Invocation&)> run;
};

const std::vector<Command>& Commands();

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Helpers.

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
  auto connection = ResolveConnection(inv.options.connection, inv.env);
  if (!connection.ok()) return connection.status();
  return std::make_unique<CoordinatorClient>(*connection);
}

// ---------------------------------------------------------------------------------------------
// validate

Status RunValidate(Invocation& inv) {
  const ValidateOptions& o = inv.options.validate;
  const std::string& path = o.file;
  const std::string& format = o.format;
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
  inv.out << path << ": ok\n" << FormatExpansion(spec, jobs, o.jobs);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// watch (also used by submit --watch)

// --format of watch and submit --watch: table, text or json; without it, the table when stdout
// is a terminal (the process's own stdout, not a stream a test passes in), else text.
WatchOptions MakeWatchOptions(const Invocation& inv, const FollowOptions& follow) {
  WatchOptions options;
  const bool terminal = &inv.out == &std::cout && ::isatty(STDOUT_FILENO) == 1;
  const std::string format = follow.format.empty() ? (terminal ? "table" : "text") : follow.format;
  if (format == "table") {
    options.format = WatchFormat::kTable;
    options.terminal_fd = terminal ? STDOUT_FILENO : -1;
  } else if (format == "json") {
    options.format = WatchFormat::kJson;
  } else {
    options.format = WatchFormat::kText;
  }
  if (follow.interval >= 0) options.printer.progress_interval_seconds = follow.interval;
  return options;
}

// Follows the sweep and sets the exit code from its end.
Status WatchLoop(Invocation& inv, CoordinatorClient& client, const std::string& sweep_id,
                 uint64_t after_seq, const FollowOptions& follow) {
  const WatchOptions options = MakeWatchOptions(inv, follow);
  pb::SweepState final_state = pb::SWEEP_STATE_UNSPECIFIED;
  RDATTN_RETURN_IF_ERROR(
      FollowSweep(client, sweep_id, after_seq, options, inv.out, inv.err, &final_state));
  if (final_state != pb::SWEEP_STATE_SUCCEEDED) inv.exit_code = kExitSweepUnsuccessful;
  return Status::Ok();
}

Status RunWatch(Invocation& inv) {
  const WatchOptionsOfCli& o = inv.options.watch;
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));
  return WatchLoop(inv, *client, o.sweep_id, static_cast<uint64_t>(o.from_seq), o.follow);
}

// ---------------------------------------------------------------------------------------------
// submit

Status RunSubmit(Invocation& inv) {
  const SubmitOptions& o = inv.options.submit;
  const std::string& path = o.file;
  std::string content;
  RDATTN_ASSIGN_OR_RETURN(pb::SweepSpec spec, LoadSweep(path, &content));
  RDATTN_ASSIGN_OR_RETURN(const Connection connection,
                          ResolveConnection(inv.options.connection, inv.env));
  CoordinatorClient client(connection);

  pb::SubmitSweepRequest request;
  request.set_request_id(!o.request_id.empty()
                             ? o.request_id
                             : DefaultRequestId(content, spec.owner(), connection.token));
  *request.mutable_spec() = spec;
  request.set_validate_only(o.validate_only);
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
  if (!o.watch) return Status::Ok();
  return WatchLoop(inv, client, sweep.sweep_id(), 0, o.follow);
}

// ---------------------------------------------------------------------------------------------
// list, get, cancel, report

Status RunList(Invocation& inv) {
  const ListOptions& o = inv.options.list;
  const std::string& format = o.format;
  pb::ListSweepsRequest request;
  for (const std::string& name : o.states) request.add_states(*ParseSweepState(name));
  request.set_owner(o.owner);
  if (o.page_size > 0) {
    request.set_page_size(static_cast<int32_t>(std::min<int64_t>(o.page_size, 1 << 20)));
  }
  request.set_page_token(o.page_token);
  request.set_view(pb::SWEEP_VIEW_BASIC);
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));

  std::vector<pb::SweepStatus> sweeps;
  std::string next;
  while (true) {
    RDATTN_ASSIGN_OR_RETURN(pb::ListSweepsResponse page, client->ListSweeps(request));
    sweeps.insert(sweeps.end(), page.sweeps().begin(), page.sweeps().end());
    next = page.next_page_token();
    if (next.empty() || !o.all) break;
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
  const GetOptions& o = inv.options.get;
  const std::string& format = o.format;
  const int64_t limit = o.limit;  // -1: every job
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));
  // The summary first (a few KB whatever the sweep's size), then the jobs page by page
  // (docs/client.md "get ID").
  pb::GetSweepRequest request;
  request.set_sweep_id(o.sweep_id);
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
  request.set_sweep_id(inv.options.cancel.sweep_id);
  request.set_reason(inv.options.cancel.reason);
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

// The format of `rdattn report`: --format, else md with --out, else text.
std::string ReportFormat(const ReportOptions& o) {
  if (!o.format.empty()) return o.format;
  return o.out.empty() ? "text" : "md";
}

// The flags of `rdattn report` checked together, after each one's validator.
std::string CheckReportFlags(const ReportOptions& o) {
  const std::string format = ReportFormat(o);
  if (!o.out.empty() && format == "text") {
    return "--out: needs --format md, csv or json (text goes to stdout)";
  }
  if (o.out.empty() && format == "csv") {
    return "--format csv: writes one file per table; give --out DIR";
  }
  return "";
}

Status RunReport(Invocation& inv) {
  const ReportOptions& o = inv.options.report;
  const std::optional<std::string> out_dir =
      o.out.empty() ? std::nullopt : std::optional<std::string>(o.out);
  const std::string format = ReportFormat(o);
  pb::GetReportRequest request;
  request.set_sweep_id(o.sweep_id);
  request.set_reference_arm(!o.reference.empty() ? o.reference : o.reference_arm);
  const double level = o.level > 0 ? o.level : o.confidence;
  if (level > 0) request.set_confidence_level(level);
  if (o.resamples > 0) request.set_bootstrap_resamples(static_cast<int32_t>(o.resamples));
  if (o.target_delta > 0) request.set_target_delta_nll(o.target_delta);
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

// ---------------------------------------------------------------------------------------------
// The flags: every one with --help's text and default, and its check.

// A value flag, shown as every value flag of rdattn is: TEXT and `default_text` ("" shows none).
template <typename T>
CLI::Option* Value(CLI::App* app, const std::string& name, T& target, const std::string& help,
                   const std::string& default_text = "") {
  return app->add_option(name, target, help)->type_name("TEXT")->default_str(default_text);
}

// A positional argument (FILE, ID, COMMAND), required unless `optional`.
CLI::Option* Positional(CLI::App* app, const std::string& name, std::string& target,
                        const std::string& help, bool optional = false) {
  CLI::Option* opt = app->add_option(name, target, help)->type_name("")->default_str("");
  return optional ? opt : opt->required();
}

CLI::Validator Between(double lo, double hi, const std::string& range) {
  return cli::NumberWhere([lo, hi](double v) { return v >= lo && v <= hi; }, "must be in " + range);
}

CLI::Validator IntegerAtLeast(double min) {
  return cli::NumberWhere([min](double v) { return v >= min && v == std::floor(v); },
                          "must be an integer >= " + std::to_string(static_cast<int64_t>(min)));
}

CLI::Validator NotEmpty() {
  return CLI::Validator(
      [](const std::string& text) { return text.empty() ? "must not be empty" : ""; }, "");
}

// --state's values (comma-separated ones split by CLI11): each a sweep state. Checked after
// parse, so that a stray argument is reported first, as before.
std::string CheckStates(const ListOptions& o) {
  for (const std::string& name : o.states) {
    if (!ParseSweepState(name)) {
      return "--state: unknown state '" + name +
             "' (valid: pending, running, succeeded, failed, cancelled)";
    }
  }
  return "";
}

// The connection flags of every remote command, accepted before the command name too.
void AddConnectionOptions(CLI::App* app, ConnectionOptions& o) {
  cli::ConnectionFlagsSpec spec;
  spec.client = true;
  cli::AddConnectionFlags(app, &o.flags, spec);
  Value(app, "--timeout", o.timeout_seconds,
        "deadline of each call, seconds (config `timeout_seconds:`)", "30")
      ->check(cli::NumberWhere([](double v) { return v > 0 && v <= 86400; },
                               "expected seconds in (0, 86400]"));
  Value(app, "--config", o.config, "config file (env RDATTN_CONFIG)",
        "~/.config/rdattn/config.yaml");
}

// --format and --interval of `watch` and `submit --watch`.
void AddFollowOptions(CLI::App* sub, FollowOptions& o, const std::string& with) {
  Value(sub, "--interval", o.interval,
        with + (with.empty() ? "seconds between progress lines (text)"
                             : "seconds between progress lines"),
        "10")
      ->check(Between(0, 86400, "[0, 86400]"));
  Value(sub, "--format", o.format, with + "table, text or json", "table on a terminal, else text")
      ->check(cli::OneOf({"table", "text", "json"}));
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"validate", "FILE [--jobs] [--format text|json]",
       "check a sweep file offline and show its jobs and pair groups", "", false,
       [](CLI::App* sub, CliOptions& o) {
         Positional(sub, "FILE", o.validate.file, "the sweep: YAML, JSON or text proto");
         sub->add_flag("--jobs", o.validate.jobs, "list every job");
         Value(sub, "--format", o.validate.format, "text or json (the planned jobs)", "text")
             ->check(cli::OneOf({"text", "json"}));
       },
       RunValidate},
      {"submit", "FILE [--request-id ID] [--validate-only] [--watch [--interval S] [--format F]]",
       "submit a sweep; prints its id. --watch follows it as `watch` does", "", true,
       [](CLI::App* sub, CliOptions& o) {
         Positional(sub, "FILE", o.submit.file, "the sweep: YAML, JSON or text proto");
         Value(sub, "--request-id", o.submit.request_id, "idempotency key",
               "sha256 of the owner and the file's bytes")
             ->check(NotEmpty());
         sub->add_flag("--validate-only", o.submit.validate_only,
                       "let the coordinator check it; store nothing");
         sub->add_flag("--watch", o.submit.watch,
                       "follow the sweep until it ends (exit 3 unless SUCCEEDED)");
         AddFollowOptions(sub, o.submit.follow, "with --watch: ");
       },
       RunSubmit},
      {"list", "[--state S[,S]] [--owner O] [--page-size N] [--page-token T] [--all] [--format F]",
       "list sweeps, newest first", "", true,
       [](CLI::App* sub, CliOptions& o) {
         Value(sub, "--state", o.list.states,
               "only these states, comma-separated or repeated: pending, running, succeeded, "
               "failed, cancelled")
             ->delimiter(',')
             ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
             ->allow_extra_args(false);
         Value(sub, "--owner", o.list.owner, "only this owner's sweeps");
         Value(sub, "--page-size", o.list.page_size, "sweeps per page (>= 1)", "the coordinator's")
             ->check(IntegerAtLeast(1));
         Value(sub, "--page-token", o.list.page_token, "the page after a previous listing's");
         sub->add_flag("--all", o.list.all, "every page");
         Value(sub, "--format", o.list.format, "text or json", "text")
             ->check(cli::OneOf({"text", "json"}));
         cli::CheckAfterParse(sub, [&o] { return CheckStates(o.list); });
       },
       RunList},
      {"get", "ID [--limit N] [--format text|json]",
       "a sweep's state, its summary and its per-job table",
       "The summary (pair groups by state, jobs per stored milestone, retries, the latest\n"
       "failures) comes in one small reply; the jobs are read in pages of 1,000.",
       true,
       [](CLI::App* sub, CliOptions& o) {
         Positional(sub, "ID", o.get.sweep_id, "the sweep id");
         Value(sub, "--limit", o.get.limit,
               "at most N jobs in the table (>= 0; 0: the summary only)", "every job")
             ->check(IntegerAtLeast(0));
         Value(sub, "--format", o.get.format, "text or json", "text")
             ->check(cli::OneOf({"text", "json"}));
       },
       RunGet},
      {"watch", "ID [--from-seq N] [--interval S] [--format table|text|json]",
       "follow a sweep live until it ends",
       "--format table (the default on a terminal): one row per job (state, attempt, progress,\n"
       "loss, val NLL, tok/s, ETA) under a sweep line (jobs done/total, overall ETA), redrawn in\n"
       "place; text (the default otherwise): one line per event, progress at most every\n"
       "--interval seconds; json: every event as one JSON line. Exit 3 when the sweep ends\n"
       "FAILED or CANCELLED.",
       true,
       [](CLI::App* sub, CliOptions& o) {
         Positional(sub, "ID", o.watch.sweep_id, "the sweep id");
         Value(sub, "--from-seq", o.watch.from_seq, "start after this event sequence number (>= 0)",
               "0")
             ->check(IntegerAtLeast(0));
         AddFollowOptions(sub, o.watch.follow, "");
       },
       RunWatch},
      {"cancel", "ID [--reason TEXT]", "cancel every job of a sweep that has not ended", "", true,
       [](CLI::App* sub, CliOptions& o) {
         Positional(sub, "ID", o.cancel.sweep_id, "the sweep id");
         Value(sub, "--reason", o.cancel.reason, "recorded with the cancellation",
               "cancelled with rdattn cancel");
       },
       RunCancel},
      {"report",
       "ID [--format text|md|csv|json] [--out DIR] [--reference ARM] [--level 0.95] "
       "[--resamples N] [--target-delta NATS]",
       "the paired report: text table to stdout, or report.md (+ plots/), CSVs, report.json "
       "written into DIR",
       "", true,
       [](CLI::App* sub, CliOptions& o) {
         ReportOptions& r = o.report;
         Positional(sub, "ID", r.sweep_id, "the sweep id");
         Value(sub, "--format", r.format, "text, md, csv (needs --out) or json",
               "text; md with --out")
             ->check(cli::OneOf({"text", "md", "csv", "json"}));
         Value(sub, "--out", r.out, "folder DIR to write the report's files into")
             ->check(NotEmpty());
         Value(sub, "--reference", r.reference, "the reference arm of the pairs", "the sweep's");
         Value(sub, "--reference-arm", r.reference_arm, "the same as --reference");
         const CLI::Validator level = Between(0.5, 0.9999, "[0.5, 0.9999]");
         Value(sub, "--level", r.level, "confidence level of the intervals, in [0.5, 0.9999]",
               "the coordinator's")
             ->check(level);
         Value(sub, "--confidence", r.confidence, "the same as --level")->check(level);
         Value(sub, "--resamples", r.resamples, "bootstrap resamples (1 to 1000000)",
               "the coordinator's")
             ->check(IntegerAtLeast(1))
             ->check(Between(1, 1000000, "[1, 1000000]"));
         Value(sub, "--target-delta", r.target_delta, "the NLL difference (nats) to size seeds for",
               "the coordinator's")
             ->check(Between(1e-9, 10, "[1e-9, 10]"));
         cli::CheckAfterParse(sub, [&r] { return CheckReportFlags(r); });
       },
       RunReport},
      {"help", "[COMMAND]", "this help, or one command's (as `rdattn COMMAND --help`)", "", false,
       [](CLI::App* sub, CliOptions& o) {
         Positional(sub, "COMMAND", o.help_command, "the command", /*optional=*/true);
       },
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

// The app: the connection flags (also accepted before the command name) and one subcommand per
// command, each with its positional arguments and flags. An offline command refuses connection
// flags given before its name.
void AddCommands(CLI::App& app, CliOptions& options) {
  AddConnectionOptions(&app, options.connection);
  app.require_subcommand(1);
  for (const Command& c : Commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    sub->footer("rdattn " + c.name + " " + c.usage + (c.details.empty() ? "" : "\n" + c.details));
    c.add(sub, options);
    if (c.remote) AddConnectionOptions(sub, options.connection);
  }
  cli::CheckAfterParse(&app, [&app]() -> std::string {
    const Command* command = FindCommand(app.get_subcommands().front()->get_name());
    if (command->remote) return "";
    for (const char* flag : {"--ca-cert", "--config", "--coordinator", "--timeout", "--tls",
                             "--token", "--token-file"}) {
      if (app.count(flag) > 0) return command->name + " does not take " + flag;
    }
    return "";
  });
}

}  // namespace

int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           const EnvGetter& env) {
  CLI::App app("Runs matched-seed pretraining sweeps on an rdattn coordinator (docs/client.md).",
               "rdattn");
  cli::Setup(app);
  CliOptions options;
  AddCommands(app, options);
  app.footer(
      "Exit codes: 0 ok, 1 error, 2 usage error or invalid sweep, 3 the watched sweep ended\n"
      "FAILED or CANCELLED. `rdattn COMMAND --help` (or `rdattn help COMMAND`) shows one "
      "command.");
  if (argv.size() <= 1) return cli::Usage(app, "no command given", kExitUsage, err);
  if (const int code = cli::Parse(app, argv, kExitUsage, out, err); code >= 0) return code;
  const Command* command = FindCommand(app.get_subcommands().front()->get_name());
  if (command->name == "help") {  // `rdattn help [COMMAND]`: `rdattn [COMMAND] --help`
    if (options.help_command.empty()) {
      out << app.get_formatter()->make_help(&app, "rdattn", CLI::AppFormatMode::Normal);
      return kExitOk;
    }
    if (FindCommand(options.help_command) == nullptr) {
      return cli::Usage(app, "unknown command '" + options.help_command + "'", kExitUsage, err);
    }
    out << app.get_subcommand(options.help_command)->help("rdattn");
    return kExitOk;
  }

  Invocation inv{options, out, err, env};
  const Status status = command->run(inv);
  out.flush();
  if (!status.ok()) {
    // A bad sweep names its file; flag errors ("--format: ...") and RPC errors do not.
    const bool file_command = command->name == "validate" || command->name == "submit";
    const bool about_file =
        status.code() == StatusCode::kInvalidArgument && status.message().rfind("--", 0) != 0;
    const std::string& file =
        command->name == "validate" ? options.validate.file : options.submit.file;
    PrintError(err, status, file_command && about_file ? file : "");
    return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
  }
  return inv.exit_code;
}

}  // namespace rdattn::client
