// Spawning and stopping a job's process group (see process.h).
#include "worker/daemon/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace rdattn::worker {
namespace {

// Owns posix_spawn's attribute objects for one call.
struct SpawnAttrs {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnAttrs() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnAttrs() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::vector<pid_t> SessionMembers(pid_t sid) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || end == nullptr || *end != '\0') continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    // "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 1));
    std::string state;
    long ppid = 0, pgrp = 0, session = 0;
    // Zombies have ended already: nothing to signal.
    if (fields >> state >> ppid >> pgrp >> session && session == sid && state != "Z") {
      out.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(proc);
  return out;
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const Options& options) {
  if (options.command.argv.empty()) return InvalidArgumentError("empty command line");
  SpawnAttrs a;
  const int out_flags = O_WRONLY | O_CREAT | O_APPEND;
  posix_spawn_file_actions_addopen(&a.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(
      &a.actions, 1, options.stdout_path.empty() ? "/dev/null" : options.stdout_path.c_str(),
      out_flags, 0644);
  posix_spawn_file_actions_addopen(
      &a.actions, 2, options.stderr_path.empty() ? "/dev/null" : options.stderr_path.c_str(),
      out_flags, 0644);
  posix_spawn_file_actions_addclosefrom_np(&a.actions, 3);

  // A new session (and process group) whose id is the child's pid.
  posix_spawnattr_setflags(&a.attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&a.attr, &empty);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigdefault(&a.attr, &defaults);

  std::vector<std::string> argv_strings = options.command.argv;
  std::vector<std::string> env_strings = MergedEnvironment(options.command);
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(env_strings);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &a.actions, &a.attr, argv.data(), envp.data());
  if (rc != 0) {
    const std::string what = "start " + options.command.argv[0] + ": " + std::strerror(rc);
    if (rc == ENOENT) return NotFoundError(what);
    if (rc == EACCES || rc == EPERM) return Status(StatusCode::kPermissionDenied, what);
    return InternalError(what);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, options.launcher_is_mpirun));
}

ChildProcess::~ChildProcess() {
  KillAll();
  while (!Wait(std::chrono::milliseconds(1000)).has_value()) KillAll();
}

int ChildProcess::SignalSession(int sig, bool spare_launcher) const {
  int sent = 0;
  for (pid_t member : SessionMembers(pid_)) {
    if (spare_launcher && member == pid_) continue;
    if (::kill(member, sig) == 0) ++sent;
  }
  return sent;
}

void ChildProcess::SignalRanks(int sig) {
  absl::MutexLock lock(&mu_);
  if (exit_.has_value()) return;
  if (!launcher_is_mpirun_) {
    SignalSession(sig, /*spare_launcher=*/false);
    return;
  }
  if (SignalSession(sig, /*spare_launcher=*/true) > 0) {
    ranks_seen_ = true;
  } else if (!ranks_seen_ && !launcher_signalled_) {
    ::kill(pid_, sig);  // no ranks yet: mpirun aborts the launch
    launcher_signalled_ = true;
  }
}

void ChildProcess::KillAll() {
  absl::MutexLock lock(&mu_);
  if (exit_.has_value()) return;
  SignalSession(SIGKILL, /*spare_launcher=*/false);
  ::kill(-pid_, SIGKILL);
}

std::optional<ExitStatus> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (exit_.has_value()) return exit_;
      siginfo_t info{};
      // WNOWAIT: the launcher stays a zombie, so its pid (= the session id) cannot be reused
      // while the strays of its session are killed.
      const int rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
      if (rc == 0 && info.si_pid == pid_) {
        SignalSession(SIGKILL, /*spare_launcher=*/true);
        ::kill(-pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        exit_ = ExitStatusFromWait(status);
        return exit_;
      }
      if (rc != 0 && errno == ECHILD) {  // reaped by someone else: nothing more to learn
        exit_ = ExitStatus{-1, 0};
        return exit_;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(10)));
  }
}

}  // namespace rdattn::worker
