// Files written so that a reader never sees half of one: the one atomic write of the tree.
#pragma once

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
Status WriteFileAtomically(const std::string& path, std::string_view contents, int mode = 0644);

// fsync of a file or a folder (a folder: so that a rename or a new entry in it is durable).
// FAILED_PRECONDITION if it cannot be opened, DATA_LOSS if fsync fails.
Status FsyncPath(const std::string& path);

}  // namespace rdattn
