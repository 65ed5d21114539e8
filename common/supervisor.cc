// Supervisor liveness (see supervisor.h).
#include "common/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace rdattn {
namespace {

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

}  // namespace

uint64_t ProcessStartTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  // Fields after "(comm)": 3 state, 4 ppid, ..., 22 starttime.
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

Supervisor SelfAsSupervisor() {
  Supervisor s;
  s.pid = ::getpid();
  s.start_ticks = ProcessStartTicks(s.pid);
  s.host = HostName();
  return s;
}

std::vector<std::pair<std::string, std::string>> SupervisorEnvironment(const Supervisor& s) {
  return {{"RDATTN_SUPERVISOR_PID", std::to_string(s.pid)},
          {"RDATTN_SUPERVISOR_START", std::to_string(s.start_ticks)},
          {"RDATTN_SUPERVISOR_HOST", s.host}};
}

StatusOr<std::optional<Supervisor>> SupervisorFromEnvironment() {
  const char* pid = std::getenv("RDATTN_SUPERVISOR_PID");
  if (pid == nullptr || *pid == '\0') return std::optional<Supervisor>();
  const char* start = std::getenv("RDATTN_SUPERVISOR_START");
  const char* host = std::getenv("RDATTN_SUPERVISOR_HOST");
  char* end = nullptr;
  const long p = std::strtol(pid, &end, 10);
  if (*end != '\0' || p <= 1) {
    return InvalidArgumentError(std::string("RDATTN_SUPERVISOR_PID: '") + pid + "' is not a pid");
  }
  Supervisor s;
  s.pid = static_cast<pid_t>(p);
  if (start != nullptr && *start != '\0') {
    s.start_ticks = std::strtoull(start, &end, 10);
    if (*end != '\0') {
      return InvalidArgumentError(std::string("RDATTN_SUPERVISOR_START: '") + start +
                                  "' is not a number");
    }
  }
  s.host = host == nullptr ? "" : host;
  if (!s.host.empty() && s.host != HostName()) return std::optional<Supervisor>();
  return std::optional<Supervisor>(s);
}

bool SupervisorAlive(const Supervisor& s) {
  if (::kill(s.pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream in("/proc/" + std::to_string(s.pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  if (state == 'Z' || state == 'X') return false;
  return s.start_ticks == 0 || ProcessStartTicks(s.pid) == s.start_ticks;
}

SupervisorWatch::SupervisorWatch(const Supervisor& s, int interval_ms,
                                 std::function<void()> on_gone)
    : thread_([this, s, interval_ms, on_gone = std::move(on_gone)] {
        while (!stop_.load()) {
          if (!SupervisorAlive(s)) {
            on_gone();
            return;
          }
          for (int waited = 0; waited < interval_ms && !stop_.load(); waited += 10) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
      }) {}

SupervisorWatch::~SupervisorWatch() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace rdattn
