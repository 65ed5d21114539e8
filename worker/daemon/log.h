// rdattn-worker's logging calls, on the one line format of every binary (common/log.h):
// "<UTC time> <level> rdattn-worker: msg"; main() sets the component. Thread-safe; one write per
// line. Never log tokens.
#pragma once

#include <string_view>

namespace rdattn::worker {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Lines below this level are dropped (default kInfo).
void SetLogLevel(LogLevel level);
void Log(LogLevel level, std::string_view message);

inline void LogDebug(std::string_view m) { Log(LogLevel::kDebug, m); }
inline void LogInfo(std::string_view m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(std::string_view m) { Log(LogLevel::kWarning, m); }
inline void LogError(std::string_view m) { Log(LogLevel::kError, m); }

}  // namespace rdattn::worker
