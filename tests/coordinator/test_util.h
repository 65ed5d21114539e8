// Helpers shared by the coordinator tests: a fresh temporary directory per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace rdattn::coordinator::testing {

// A new empty directory under the test temp dir, removed at destruction.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("rdattn_coord_") + (info ? info->name() : "x") + "_" +
                       std::to_string(::getpid()) + "_" + std::to_string(counter_++);
    path_ = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace rdattn::coordinator::testing
