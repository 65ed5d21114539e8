// Text output of the `rdattn` client: state names, human-readable numbers, aligned tables, the
// sweep and job tables of `get`/`list`, the paired table of `report` and the expansion summary
// of `validate`. Pure functions of the messages, so they are unit-tested without a server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rdattn/v1/coordinator.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::client {

namespace pb = ::rdattn::v1;

// "RUNNING" for JOB_STATE_RUNNING / SWEEP_STATE_RUNNING.
std::string JobStateName(pb::JobState state);
std::string SweepStateName(pb::SweepState state);
bool IsTerminal(pb::JobState state);
bool IsTerminal(pb::SweepState state);
// "running", "RUNNING" or "SWEEP_STATE_RUNNING"; nullopt for anything else.
std::optional<pb::SweepState> ParseSweepState(const std::string& text);

// 4096 -> "4096", 491520 -> "491.5k", 1000000 -> "1.00M", 2000158720 -> "2.00B".
std::string HumanTokens(int64_t tokens);
// 2100 -> "2.10k"; below 1000 with one decimal.
std::string HumanRate(double per_second);
// 252 -> "4m12s", 11040 -> "3h04m", 9 -> "9s"; negative or non-finite -> "?".
std::string HumanDuration(double seconds);
// Fixed-point with `digits` decimals; non-finite -> "-".
std::string Fixed(double v, int digits);
// "2024-05-01T12:03:04Z" (UTC), or "-" when unset.
std::string FormatTime(const google::protobuf::Timestamp& t);

// Tokens a job trains: schedule.stop_at_tokens for a control (capped at total_tokens), else
// schedule.total_tokens of its (resolved) RunSpec; 0 when unknown.
int64_t TargetTokens(const pb::JobSpec& job);
// Seconds left at `tokens_per_second`; nullopt when the rate or the target is unknown.
std::optional<double> EtaSeconds(int64_t tokens, int64_t target_tokens, double tokens_per_second);
// A job id without its "<sweep_id>/" prefix, for compact lines.
std::string ShortJobId(const std::string& job_id, const std::string& sweep_id);

// A table with one header row; columns are padded to their widest cell. Columns whose header
// starts with '>' are right-aligned (the '>' is not printed).
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A message in protobuf's JSON mapping with proto field names; `pretty` adds indentation.
std::string MessageJson(const google::protobuf::Message& message, bool pretty);

// `rdattn get`: the sweep's header lines, its summary (when the status has one) and its
// per-job table.
std::string FormatSweep(const pb::SweepStatus& sweep);
// The summary's lines (SweepStatus.summary): pair groups, val NLL per milestone, retries, the
// latest problems.
std::string FormatSweepSummary(const pb::SweepStatus& sweep);
// `rdattn list`: one row per sweep.
std::string FormatSweepList(const std::vector<pb::SweepStatus>& sweeps);
// `rdattn report`: the paired rows (per scale, milestone, arm), then what is missing.
std::string FormatReport(const pb::Report& report);
// A seed policy's design, looks and where it stopped (part of FormatReport).
std::string FormatSequential(const pb::SequentialState& state);
// `rdattn validate`: job count, arms, and the pair groups with their jobs.
std::string FormatExpansion(const pb::SweepSpec& spec, const std::vector<pb::JobSpec>& jobs,
                            bool list_jobs);

}  // namespace rdattn::client
