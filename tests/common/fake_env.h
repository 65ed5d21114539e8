// Test helpers for code that reads the environment and files through common/connection_flags.h:
// an environment made from a map, and a file written into the test's temporary folder. Used by
// the connection-flags tests (tests/common) and the client's settings tests (tests/client).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "common/connection_flags.h"

namespace rdattn::test {

inline cli::EnvGetter FakeEnv(const std::map<std::string, std::string>& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Writes `content` to <gtest temp dir>/<name> and returns the path.
inline std::string WriteTemp(const std::string& name, const std::string& content) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

}  // namespace rdattn::test
