#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdattn {
namespace {

std::string Reason() { return std::strerror(errno); }

// The folder that holds `path` ("." for a bare file name).
std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FailedPreconditionError(path + ": cannot open to fsync: " + Reason());
  if (::fsync(fd) != 0) {
    const std::string why = Reason();
    ::close(fd);
    return DataLossError(path + ": fsync failed: " + why);
  }
  ::close(fd);
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view contents, int mode) {
  if (path.empty()) return InvalidArgumentError("WriteFileAtomically: empty path");
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0)
    return FailedPreconditionError(path + ": cannot create a temporary file: " + Reason());
  auto fail = [&](Status st) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  };
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0)
    return fail(FailedPreconditionError(tmp + ": chmod failed: " + Reason()));
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail(DataLossError(path + ": write failed: " + Reason()));
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) return fail(DataLossError(path + ": fsync failed: " + Reason()));
  if (::close(fd) != 0) {
    const std::string why = Reason();
    ::unlink(tmp.c_str());
    return DataLossError(path + ": close failed: " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = Reason();
    ::unlink(tmp.c_str());
    return FailedPreconditionError(path + ": cannot rename into place: " + why);
  }
  return FsyncPath(FolderOf(path));
}

}  // namespace rdattn
