// rdattn-worker's logging: the shared line format of common/log.h (see log.h).
#include "worker/daemon/log.h"

#include "common/log.h"

namespace rdattn::worker {
namespace {

log::Level ToLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return log::Level::kDebug;
    case LogLevel::kInfo:
      return log::Level::kInfo;
    case LogLevel::kWarning:
      return log::Level::kWarning;
    case LogLevel::kError:
      return log::Level::kError;
  }
  return log::Level::kError;
}

}  // namespace

void SetLogLevel(LogLevel level) { log::SetMinLevel(ToLevel(level)); }

void Log(LogLevel level, std::string_view message) { log::Write(ToLevel(level), message); }

}  // namespace rdattn::worker
