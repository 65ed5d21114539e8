#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdattn {
namespace {

// The folder that holds `path` ("." for a bare file name).
std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError(path + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return DataLossError(path + ": read failed: " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t w = ::write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    if (w == 0) {  // no progress and no error: say so rather than loop
      errno = EIO;
      return false;
    }
    p += w;
    size -= static_cast<size_t>(w);
  }
  return true;
}

Status FsyncPath(const std::string& path, int* error_number) {
  // errno of the failing call, for the caller's classification (a full or failing disk).
  auto failed = [&](Status st, int err) {
    if (error_number != nullptr) *error_number = err;
    return st;
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return failed(FailedPreconditionError(path + ": cannot open to fsync: " + std::strerror(err)),
                  err);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return failed(DataLossError(path + ": fsync failed: " + std::strerror(err)), err);
  }
  ::close(fd);
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view contents, int mode,
                           int* error_number) {
  if (path.empty()) return InvalidArgumentError("WriteFileAtomically: empty path");
  std::string tmp = path + ".tmp.XXXXXX";
  // Every failure after the temporary file exists: the file goes, errno is reported.
  auto failed = [&](Status st, int err) {
    if (error_number != nullptr) *error_number = err;
    return st;
  };
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return failed(
        FailedPreconditionError(path + ": cannot create a temporary file: " + std::strerror(err)),
        err);
  }
  auto fail = [&](Status (*make)(std::string), const std::string& what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return failed(make(what + std::strerror(err)), err);
  };
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0)
    return fail(FailedPreconditionError, tmp + ": chmod failed: ");
  if (!WriteAll(fd, contents.data(), contents.size()))
    return fail(DataLossError, path + ": write failed: ");
  if (::fsync(fd) != 0) return fail(DataLossError, path + ": fsync failed: ");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return failed(DataLossError(path + ": close failed: " + std::strerror(err)), err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return failed(
        FailedPreconditionError(path + ": cannot rename into place: " + std::strerror(err)), err);
  }
  return FsyncPath(FolderOf(path), error_number);
}

}  // namespace rdattn
