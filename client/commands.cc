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

struct Command {
  std::string name;
  std::string usage;    // after "rdattn NAME"
  std::string summary;  // one line
  int positional = 0;   // required positional arguments after the name
  std::vector<FlagSpec> flags;
  bool remote = true;  // talks to the coordinator (takes the connection flags)
  std::function<Status(Invocation&)> run;
};

const std::vector<FlagSpec>& ConnectionFlags() {
  static const std::vector<FlagSpec> flags = {
      {"coordinator", FlagKind::kValue}, {"token", FlagKind::kValue},
      {"token-file", FlagKind::kValue},  {"timeout", FlagKind::kValue},
      {"tls", FlagKind::kSwitch},        {"ca-cert", FlagKind::kValue},
      {"config", FlagKind::kValue}};
  return flags;
}

const std::vector<Command>& Commands();

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string Usage() {
  std::string s =
      "usage: rdattn [global flags] COMMAND [args]\n"
      "\n"
      "Runs matched-seed pretraining sweeps on an rdattn coordinator (docs/client.md).\n"
      "\n"
      "commands:\n";
  for (const Command& c : Commands())
    s += "  " + c.name + " " + c.usage + "\n      " + c.summary + "\n";
  s += "\n"
       "global flags (remote commands):\n"
       "  --coordinator ADDR   coordinator address (env RDATTN_COORDINATOR, config\n"
       "                       `coordinator:`; default 127.0.0.1:50051)\n"
       "  --token TOKEN        bearer token (env RDATTN_TOKEN, config `token:`)\n"
       "  --token-file FILE    file holding the token (env RDATTN_TOKEN_FILE, config "
       "`token_file:`)\n"
       "  --tls, --ca-cert PEM TLS channel, with the system roots or these root certificates\n"
       "  --timeout SECONDS    deadline of each call (config `timeout_seconds:`; default 30)\n"
       "  --config FILE        config file (env RDATTN_CONFIG; default\n"
       "                       ~/.config/rdattn/config.yaml)\n"
       "\n"
       "exit codes: 0 ok, 1 error, 2 usage error or invalid sweep, 3 the watched sweep ended\n"
       "FAILED or CANCELLED. `rdattn help COMMAND` shows one command.\n";
  return s;
}

std::string CommandUsage(const Command& c) {
  std::string s = "usage: rdattn " + c.name + " " + c.usage + "\n  " + c.summary + "\n";
  if (c.remote) s += "  (and the global flags; see `rdattn help`)\n";
  return s;
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
  RDATTN_ASSIGN_OR_RETURN(auto client, Connect(inv));
  pb::GetSweepRequest request;
  request.set_sweep_id(inv.args.positional[1]);
  request.set_view(pb::SWEEP_VIEW_FULL);
  RDATTN_ASSIGN_OR_RETURN(pb::GetSweepResponse response, client->GetSweep(request));
  if (format == "json") {
    inv.out << MessageJson(response.sweep(), true) << "\n";
  } else {
    inv.out << FormatSweep(response.sweep()) << "\n";
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

Status RunHelp(Invocation& inv) {
  if (inv.args.positional.size() > 1) {
    const Command* c = FindCommand(inv.args.positional[1]);
    if (c == nullptr) {
      return InvalidArgumentError("unknown command '" + inv.args.positional[1] + "'");
    }
    inv.out << CommandUsage(*c);
    return Status::Ok();
  }
  inv.out << Usage();
  return Status::Ok();
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"validate",
       "FILE [--jobs] [--format text|json]",
       "check a sweep file offline and show its jobs and pair groups",
       1,
       {{"jobs", FlagKind::kSwitch}, {"format", FlagKind::kValue}},
       false,
       RunValidate},
      {"submit",
       "FILE [--request-id ID] [--validate-only] [--watch [--interval S] [--format F]]",
       "submit a sweep; prints its id. --watch follows it as `watch` does",
       1,
       {{"request-id", FlagKind::kValue},
        {"validate-only", FlagKind::kSwitch},
        {"watch", FlagKind::kSwitch},
        {"interval", FlagKind::kValue},
        {"format", FlagKind::kValue}},
       true,
       RunSubmit},
      {"list",
       "[--state S[,S]] [--owner O] [--page-size N] [--page-token T] [--all] [--format F]",
       "list sweeps, newest first",
       0,
       {{"state", FlagKind::kValue},
        {"owner", FlagKind::kValue},
        {"page-size", FlagKind::kValue},
        {"page-token", FlagKind::kValue},
        {"all", FlagKind::kSwitch},
        {"format", FlagKind::kValue}},
       true,
       RunList},
      {"get",
       "ID [--format text|json]",
       "a sweep's state and its per-job table",
       1,
       {{"format", FlagKind::kValue}},
       true,
       RunGet},
      {"watch",
       "ID [--from-seq N] [--interval S] [--format table|text|json]",
       "follow a sweep live until it ends. --format table (the default on a terminal): one\n"
       "      row per job (state, attempt, progress, loss, val NLL, tok/s, ETA) under a sweep\n"
       "      line (jobs done/total, overall ETA), redrawn in place; text (the default\n"
       "      otherwise): one line per event, progress at most every --interval seconds\n"
       "      (default 10); json: every event as one JSON line",
       1,
       {{"from-seq", FlagKind::kValue},
        {"interval", FlagKind::kValue},
        {"format", FlagKind::kValue}},
       true,
       RunWatch},
      {"cancel",
       "ID [--reason TEXT]",
       "cancel every job of a sweep that has not ended",
       1,
       {{"reason", FlagKind::kValue}},
       true,
       RunCancel},
      {"report",
       "ID [--format text|md|csv|json] [--out DIR] [--reference ARM] [--level 0.95] "
       "[--resamples N] [--target-delta NATS]",
       "the paired report: text table to stdout, or report.md (+ plots/), CSVs, report.json "
       "written into DIR",
       1,
       {{"format", FlagKind::kValue},
        {"out", FlagKind::kValue},
        {"reference", FlagKind::kValue},
        {"reference-arm", FlagKind::kValue},
        {"level", FlagKind::kValue},
        {"confidence", FlagKind::kValue},
        {"resamples", FlagKind::kValue},
        {"target-delta", FlagKind::kValue}},
       true,
       RunReport},
      {"help", "[COMMAND]", "this help, or one command's", 0, {}, false, RunHelp},
  };
  return commands;
}

void PrintError(std::ostream& err, const Status& status, const std::string& context) {
  const std::vector<std::string> parts = contract::SplitFieldErrors(status.message());
  const std::string code(StatusCodeName(status.code()));
  if (parts.size() <= 1) {
    err << "rdattn: " << code << ": " << (context.empty() ? "" : context + ": ") << status.message()
        << "\n";
    return;
  }
  err << "rdattn: " << code << ": " << parts.size() << " errors"
      << (context.empty() ? "" : " in " + context) << ":\n";
  for (const std::string& p : parts) err << "  " << p << "\n";
}

}  // namespace

std::string DefaultRequestId(const std::string& file_content, const std::string& spec_owner,
                             const std::string& token) {
  const std::string owner = !spec_owner.empty() ? "owner:" + spec_owner
                            : token.empty()     ? std::string("anonymous")
                                                : "token:" + Sha256Hex(token);
  return "sha256:" + Sha256Hex("rdattn submit v1\n" + owner + "\n" + file_content);
}

int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           const EnvGetter& env) {
  // Every flag any command takes; the command's own list is checked after.
  std::vector<FlagSpec> all = ConnectionFlags();
  all.push_back({"help", FlagKind::kSwitch});
  for (const Command& c : Commands()) all.insert(all.end(), c.flags.begin(), c.flags.end());
  auto args = ParseArgs(argv, all);
  if (!args.ok()) {
    err << "rdattn: " << args.status().message() << "\n(see `rdattn help`)\n";
    return kExitUsage;
  }
  if (args->positional.empty()) {
    (args->Has("help") ? out : err) << Usage();
    return args->Has("help") ? kExitOk : kExitUsage;
  }
  const Command* command = FindCommand(args->positional[0]);
  if (command == nullptr) {
    err << "rdattn: unknown command '" << args->positional[0] << "'\n\n" << Usage();
    return kExitUsage;
  }
  if (args->Has("help")) {
    out << CommandUsage(*command);
    return kExitOk;
  }
  // Flags the command does not take.
  for (const std::string& name : args->FlagNames()) {
    bool ok = false;
    for (const FlagSpec& f : command->flags) ok = ok || f.name == name;
    for (const FlagSpec& f : ConnectionFlags()) ok = ok || (command->remote && f.name == name);
    if (!ok) {
      err << "rdattn: " << command->name << " does not take --" << name << "\n"
          << CommandUsage(*command);
      return kExitUsage;
    }
  }
  const int given = static_cast<int>(args->positional.size()) - 1;
  const bool optional_extra = command->name == "help" && given <= 1;
  if (given != command->positional && !optional_extra) {
    err << "rdattn: " << command->name << " takes " << command->positional << " argument(s), got "
        << given << "\n"
        << CommandUsage(*command);
    return kExitUsage;
  }

  Invocation inv{*args, out, err, env};
  const Status status = command->run(inv);
  out.flush();
  if (!status.ok()) {
    // A bad sweep names its file; flag errors ("--format: ...") and RPC errors do not.
    const bool file_command = command->name == "validate" || command->name == "submit";
    const bool about_file =
        status.code() == StatusCode::kInvalidArgument && status.message().rfind("--", 0) != 0;
    PrintError(err, status, file_command && about_file ? args->positional[1] : "");
    return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
  }
  return inv.exit_code;
}

}  // namespace rdattn::client
