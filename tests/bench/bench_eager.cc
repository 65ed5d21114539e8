#include "tests/bench/bench_eager.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sstream>

namespace rdattn::bench {
namespace {

std::string ArmList(const std::vector<model::Arm>& arms) {
  std::string out;
  for (model::Arm a : arms) out += (out.empty() ? "" : ",") + std::string(model::ArmName(a));
  return out;
}

std::string ExitText(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

EagerPeer::~EagerPeer() { Stop(); }

std::string EagerPeer::Start(const EagerPeerCommand& cmd, const std::string& preset,
                             const model::ModelConfig& cfg, const std::vector<model::Arm>& arms,
                             int64_t batch, int64_t threads) {
  Stop();
  std::signal(SIGPIPE, SIG_IGN);  // a peer that died is an error from write(), not our death
  const nlohmann::json config = {{"layers", cfg.layers},
                                 {"width", cfg.width},
                                 {"heads", cfg.heads},
                                 {"ffn_hidden", cfg.ffn_hidden},
                                 {"blocks", cfg.blocks},
                                 {"context", cfg.context},
                                 {"vocab_size", cfg.vocab_size},
                                 {"norm_eps", cfg.norm_eps},
                                 {"key_norm_eps", cfg.key_norm_eps},
                                 {"rope_theta", cfg.rope_theta}};
  const std::vector<std::string> args = {cmd.python,
                                         cmd.script,
                                         "--serve",
                                         "--preset",
                                         preset,
                                         "--config",
                                         config.dump(),
                                         "--arms",
                                         ArmList(arms),
                                         "--batch",
                                         std::to_string(batch),
                                         "--threads",
                                         std::to_string(threads),
                                         "--init-seed",
                                         "0",
                                         "--batch-seed",
                                         "1"};
  int in[2], out[2];
  if (pipe(in) != 0) return std::string("pipe: ") + std::strerror(errno);
  if (pipe(out) != 0) {
    const int err = errno;
    close(in[0]);
    close(in[1]);
    return std::string("pipe: ") + std::strerror(err);
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    return std::string("fork: ") + std::strerror(err);
  }
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "eager peer: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  pid_ = pid;
  from_ = out[0];
  pending_.clear();
  to_ = fdopen(in[1], "w");
  if (to_ == nullptr) {
    close(in[1]);
    Stop();
    return "fdopen failed";
  }
  std::string tag, rest;
  if (const Read r = ReadTagged(&tag, &rest); r != Read::kOk) {
    const std::string how = Reap();
    Stop();
    return "'" + cmd.python + " " + cmd.script + "' " +
           (r == Read::kTimeout
                ? "was not ready within " + std::to_string(kReplySeconds) + " s and was killed"
                : "ended before it was ready (" + how +
                      "; a python3 with Debian's python3-torch is needed)");
  }
  if (tag != "READY") {
    Stop();
    return "'" + cmd.script + "': " + rest;
  }
  info_ = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (info_.is_discarded() || !info_.contains("arms")) {
    Stop();
    return "'" + cmd.script + "': unreadable READY line";
  }
  return "";
}

EagerPeer::Read EagerPeer::ReadTagged(std::string* tag, std::string* rest) {
  const std::string prefix = "EAGER_PEER_";
  for (;;) {
    for (size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
      const std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (line.compare(0, prefix.size(), prefix) != 0) continue;  // anything else it printed
      const size_t space = line.find(' ');
      *tag = line.substr(prefix.size(),
                         space == std::string::npos ? std::string::npos : space - prefix.size());
      *rest = space == std::string::npos ? "" : line.substr(space + 1);
      return Read::kOk;
    }
    if (from_ < 0) return Read::kEof;
    pollfd p{from_, POLLIN, 0};
    const int ready = poll(&p, 1, kReplySeconds * 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (pid_ > 0) kill(pid_, SIGKILL);  // our own child, stuck
      return Read::kTimeout;
    }
    char buf[1 << 16];
    const ssize_t n = ready < 0 ? -1 : read(from_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Read::kEof;
    pending_.append(buf, static_cast<size_t>(n));
  }
}

std::string EagerPeer::Reap() {
  if (pid_ <= 0) return "not running";
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return ExitText(status);
}

std::string EagerPeer::Step(model::Arm arm, int64_t steps, double* seconds,
                            std::vector<double>* losses) {
  if (to_ == nullptr) return "the eager peer is not running";
  std::fprintf(to_, "step %s %lld\n", std::string(model::ArmName(arm)).c_str(),
               static_cast<long long>(steps));
  std::fflush(to_);
  std::string tag, rest;
  if (const Read r = ReadTagged(&tag, &rest); r != Read::kOk) {
    const std::string how = Reap();
    Stop();
    return r == Read::kTimeout ? "the eager peer did not answer within " +
                                     std::to_string(kReplySeconds) + " s and was killed"
                               : "the eager peer ended during a step (" + how + ")";
  }
  if (tag != "DONE") return "the eager peer: " + rest;
  std::istringstream in(rest);
  losses->clear();
  if (!(in >> *seconds)) return "the eager peer: unreadable DONE line '" + rest + "'";
  for (double l; in >> l;) losses->push_back(l);
  if (static_cast<int64_t>(losses->size()) != steps)
    return "the eager peer: " + std::to_string(losses->size()) + " losses for " +
           std::to_string(steps) + " steps";
  return "";
}

void EagerPeer::Stop() {
  if (to_ != nullptr) {
    std::fputs("quit\n", to_);
    std::fclose(to_);  // EOF ends the peer's loop too
    to_ = nullptr;
  }
  if (from_ >= 0) {
    close(from_);
    from_ = -1;
  }
  if (pid_ > 0) {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

}  // namespace rdattn::bench
