// Attempt fencing (see fence.h).
#include "worker/trainer/fence.h"

#include "worker/trainer/machine_failure.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace rdattn::trainer {
namespace {

constexpr const char* kMarkerPrefix = "attempt-";
constexpr const char* kMarkerSuffix = ".fence";

std::string MarkerPath(const std::string& dir, int attempt) {
  return dir + "/" + kMarkerPrefix + std::to_string(attempt) + kMarkerSuffix;
}

// "attempt-12.fence" -> 12; -1 otherwise.
int MarkerAttempt(const std::string& name) {
  const size_t pl = std::strlen(kMarkerPrefix), sl = std::strlen(kMarkerSuffix);
  if (name.size() <= pl + sl || name.compare(0, pl, kMarkerPrefix) != 0 ||
      name.compare(name.size() - sl, sl, kMarkerSuffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(pl, name.size() - pl - sl);
  if (digits.empty() || digits.size() > 9) return -1;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
  }
  return std::atoi(digits.c_str());
}

}  // namespace

AttemptFence::AttemptFence(std::string dir, int attempt)
    : dir_(std::move(dir)), attempt_(attempt) {}

Status AttemptFence::Claim() const {
  if (attempt_ <= 0 || dir_.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    const std::string why = "checkpoint.dir " + dir_ + ": cannot create (" + ec.message() + ")";
    if (IsMachineErrno(ec.value())) return UnavailableError(why);
    return InvalidArgumentError(why);
  }
  const std::string path = MarkerPath(dir_, attempt_);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    const std::string why =
        path + ": cannot create the attempt marker (" + std::strerror(err) + ")";
    return IsMachineErrno(err) ? UnavailableError(why) : InternalError(why);
  }
  // The marker's existence is the claim; its text (the pid) is for people.
  const std::string pid = std::to_string(::getpid()) + "\n";
  const ssize_t ignored = ::write(fd, pid.data(), pid.size());
  (void)ignored;
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return UnavailableError(path + ": cannot fsync the attempt marker (" + std::strerror(err) +
                            ")");
  }
  ::close(fd);
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Check();
}

int AttemptFence::HighestClaim() const {
  int highest = 0;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) highest = std::max(highest, MarkerAttempt(e->d_name));
  ::closedir(d);
  return highest;
}

Status AttemptFence::Check() const {
  if (attempt_ <= 0 || dir_.empty()) return Status::Ok();
  if (seen_ <= attempt_) seen_ = std::max(seen_, HighestClaim());
  const int highest = seen_;
  if (highest > attempt_) {
    return AbortedError("fenced: attempt " + std::to_string(highest) + " has claimed " + dir_ +
                        "; this attempt (" + std::to_string(attempt_) +
                        ") is stale and writes nothing more");
  }
  return Status::Ok();
}

}  // namespace rdattn::trainer
