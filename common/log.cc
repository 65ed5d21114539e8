#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace rdattn::log {
namespace {

std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_rank{-1};
std::atomic<int64_t> g_step{-1};
std::mutex g_mu;                                       // guards the strings below
std::string* g_component = new std::string("rdattn");  // never destroyed: logging at exit works
std::string* g_job = new std::string();

char LevelChar(Level level) {
  switch (level) {
    case Level::kDebug:
      return 'D';
    case Level::kInfo:
      return 'I';
    case Level::kWarning:
      return 'W';
    case Level::kError:
      return 'E';
  }
  return '?';
}

}  // namespace

void SetComponent(std::string_view component) {
  std::lock_guard<std::mutex> lock(g_mu);
  *g_component = std::string(component);
}
void SetMinLevel(Level level) { g_min_level.store(static_cast<int>(level)); }
Level MinLevel() { return static_cast<Level>(g_min_level.load()); }
void SetJob(std::string_view job) {
  std::lock_guard<std::mutex> lock(g_mu);
  *g_job = std::string(job);
}
void SetRank(int rank) { g_rank.store(rank); }
void SetStep(int64_t step) { g_step.store(step); }

std::string FormatLine(Level level, std::string_view message, const Fields& fields) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char stamp[64];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                ts.tv_nsec / 1000000);
  std::string line = std::string(stamp) + ' ' + LevelChar(level) + ' ';
  {
    std::lock_guard<std::mutex> lock(g_mu);
    line += *g_component;
    const std::string& job = fields.job.empty() ? *g_job : fields.job;
    if (!job.empty()) line += " job=" + job;
  }
  const int rank = fields.rank >= 0 ? fields.rank : g_rank.load();
  if (rank >= 0) line += " rank=" + std::to_string(rank);
  const int64_t step = fields.step >= 0 ? fields.step : g_step.load();
  if (step >= 0) line += " step=" + std::to_string(step);
  line += ": ";
  line.append(message.data(), message.size());
  return line;
}

void Write(Level level, std::string_view message, const Fields& fields) {
  if (static_cast<int>(level) < g_min_level.load()) return;
  std::string line = FormatLine(level, message, fields);
  line += '\n';
  // One write(2) per line (stdio could split a long line); retried on EINTR and short writes.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

}  // namespace rdattn::log
