// Files written so that a reader never sees half of one (the one atomic write of the tree), and
// the one "read a whole file".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rdattn {

// Writes `contents` to `path` so that `path` holds either its old contents or all of the new
// ones, even across a crash or power loss: a temporary file in the same folder (mkostemp), every
// byte written, fsync, rename over `path`, then fsync of the folder. On any failure the
// temporary file is removed and `path` is untouched. The file gets `mode` exactly (it is set
// with fchmod, so the umask does not apply).
//
// Errors name the path and the system's reason: FAILED_PRECONDITION when the temporary file
// cannot be created or renamed into place (a missing or read-only folder), DATA_LOSS when a
// write or fsync fails (a full disk).
// On a failure of a system call, `*error_number` (when given) gets its errno, so that a caller
// can tell a failing machine (ENOSPC, EIO, ...) from a wrong setup without reading the message.
Status WriteFileAtomically(const std::string& path, std::string_view contents, int mode = 0644,
                           int* error_number = nullptr);

// fsync of a file or a folder (a folder: so that a rename or a new entry in it is durable).
// FAILED_PRECONDITION if it cannot be opened, DATA_LOSS if fsync fails; `*error_number` as above.
Status FsyncPath(const std::string& path, int* error_number = nullptr);

// The whole contents of the file at `path`. NOT_FOUND "PATH: <the system's reason>" when it
// cannot be opened (missing, unreadable); DATA_LOSS "PATH: read failed: <reason>" when a read
// fails (a folder, an I/O error). Callers add their context with WithPrefix.
StatusOr<std::string> ReadFile(const std::string& path);

// Writes all `size` bytes to `fd`, retrying short writes and EINTR. false on an error, with errno
// set (EIO when write() makes no progress without one).
bool WriteAll(int fd, const void* data, size_t size);

}  // namespace rdattn
