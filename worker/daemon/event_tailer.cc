// Tailing a JSON-lines file (see event_tailer.h).
#include "worker/daemon/event_tailer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdattn::worker {
namespace {

void AddLine(std::string line, std::vector<std::string>* lines) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.find_first_not_of(" \t") == std::string::npos) return;
  lines->push_back(std::move(line));
}

}  // namespace

EventTailer::EventTailer(std::string path) : path_(std::move(path)) {}

EventTailer::~EventTailer() {
  if (fd_ >= 0) ::close(fd_);
}

Status EventTailer::Poll(std::vector<std::string>* lines) {
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      if (errno == ENOENT) return Status::Ok();
      return InternalError("open " + path_ + ": " + std::strerror(errno));
    }
  }
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::pread(fd_, buf, sizeof buf, read_offset_);
    if (n < 0) {
      if (errno == EINTR) continue;
      return InternalError("read " + path_ + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    read_offset_ += n;
    partial_.append(buf, static_cast<size_t>(n));
  }
  size_t start = 0;
  for (size_t nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n', start)) {
    AddLine(partial_.substr(start, nl - start), lines);
    offset_ += static_cast<int64_t>(nl + 1 - start);
    start = nl + 1;
  }
  partial_.erase(0, start);
  return Status::Ok();
}

Status EventTailer::Flush(std::vector<std::string>* lines) {
  RDATTN_RETURN_IF_ERROR(Poll(lines));
  if (!partial_.empty()) {
    offset_ += static_cast<int64_t>(partial_.size());
    AddLine(std::move(partial_), lines);
    partial_.clear();
  }
  return Status::Ok();
}

}  // namespace rdattn::worker
