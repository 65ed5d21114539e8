// The `rdattn` command line as typed option structs: one per command, filled by CLI11 (commands.cc
// declares each flag with its check: a validator, ->required(), or one check after parse per
// command). An empty string or a negative number is "not given" where a flag has no default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/connection_flags.h"

namespace rdattn::client {

// The flags of every remote command, also accepted before the command name.
struct ConnectionOptions {
  cli::ConnectionFlags flags;  // --coordinator, --token, --token-file, --tls, --ca-cert
  double timeout_seconds = 0;  // --timeout; 0: not given (the config file's, else 30)
  std::string config;          // --config; empty: $RDATTN_CONFIG, else the default path
};

struct ValidateOptions {
  std::string file;
  bool jobs = false;
  std::string format = "text";  // text or json
};

// --format and --interval of `watch` and `submit --watch`.
struct FollowOptions {
  std::string format;    // table, text or json; empty: table on a terminal, else text
  double interval = -1;  // seconds between progress lines; < 0: the printer's default
};

struct SubmitOptions {
  std::string file;
  std::string request_id;  // empty: DefaultRequestId
  bool validate_only = false;
  bool watch = false;
  FollowOptions follow;
};

struct ListOptions {
  std::vector<std::string> states;  // each a known state (pending, running, ...)
  std::string owner;
  int64_t page_size = 0;  // 0: the coordinator's
  std::string page_token;
  bool all = false;
  std::string format = "text";
};

struct GetOptions {
  std::string sweep_id;
  int64_t limit = -1;  // -1: every job
  std::string format = "text";
};

struct WatchOptionsOfCli {
  std::string sweep_id;
  int64_t from_seq = 0;
  FollowOptions follow;
};

struct CancelOptions {
  std::string sweep_id;
  std::string reason = "cancelled with rdattn cancel";
};

struct ReportOptions {
  std::string sweep_id;
  std::string format;  // text, md, csv or json; empty: md with --out, else text
  std::string out;     // empty: stdout (--out '' is refused)
  std::string reference, reference_arm;
  double level = 0, confidence = 0;  // 0: the coordinator's
  int64_t resamples = 0;             // 0: the coordinator's
  double target_delta = 0;           // 0: the coordinator's
};

// Every command's options; RunCli fills the one of the command given.
struct CliOptions {
  ConnectionOptions connection;
  ValidateOptions validate;
  SubmitOptions submit;
  ListOptions list;
  GetOptions get;
  WatchOptionsOfCli watch;
  CancelOptions cancel;
  ReportOptions report;
  std::string help_command;  // `rdattn help [COMMAND]`
};

}  // namespace rdattn::client
