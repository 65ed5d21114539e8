// libFuzzer target: llm.c token shards (worker/data/shard.h). The input is written to a file
// (one per process, rewritten for every input) that data::Shard::Open and ReadShardInfo read,
// with the vocabularies the trainer uses; an accepted shard is indexed by trainer::WindowIndex
// at a few contexts and its windows are copied out. Properties beyond "no crash, no leak, no
// sanitizer report": Open and ReadShardInfo agree; every token of an accepted shard is below the
// vocabulary; every window is the run of tokens it names.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "worker/data/shard.h"
#include "worker/trainer/sampler.h"

namespace {

using rdattn::data::Shard;

// The file the inputs are written to, created once in $TMPDIR and removed at exit.
const std::string& InputPath() {
  static const std::string* path = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/rdattn_fuzz_shard_XXXXXX";
    const int fd = ::mkstemp(templ.data());
    FUZZ_CHECK(fd >= 0, "mkstemp " + templ);
    ::close(fd);
    auto* p = new std::string(templ);
    std::atexit([] { ::unlink(InputPath().c_str()); });
    return p;
  }();
  return *path;
}

void WriteInput(const uint8_t* data, size_t size) {
  const int fd = ::open(InputPath().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  FUZZ_CHECK(fd >= 0, "open " + InputPath());
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    FUZZ_CHECK(n > 0, "write " + InputPath());
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

void CheckWindows(const Shard& shard) {
  for (const int64_t context : {int64_t{1}, int64_t{3}, int64_t{64}}) {
    // The shard twice: windows never straddle two shards, and the second's start after the
    // first's.
    const rdattn::trainer::WindowIndex index({&shard, &shard}, context);
    const int64_t per_shard = shard.size() > context ? (shard.size() - 1) / context : 0;
    FUZZ_CHECK(index.size() == 2 * per_shard, "window count " + std::to_string(index.size()));
    std::vector<int64_t> window(static_cast<size_t>(context + 1));
    for (int64_t w = 0; w < index.size(); ++w) {
      if (w >= 64 && w < index.size() - 64) w = index.size() - 64;  // the first and last 64
      index.Copy(w, window.data());
      const int64_t start = (w % std::max<int64_t>(per_shard, 1)) * context;
      for (int64_t i = 0; i <= context; ++i) {
        FUZZ_CHECK(window[static_cast<size_t>(i)] == shard.tokens()[start + i],
                   "window " + std::to_string(w) + " token " + std::to_string(i));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  WriteInput(data, size);
  const std::string& path = InputPath();
  auto info = rdattn::data::ReadShardInfo(path);
  for (const uint32_t vocab : {65536u, 50257u, 257u, 0u, 65537u}) {
    auto shard = Shard::Open(path, vocab);
    if (vocab == 0 || vocab > 65536) {
      FUZZ_CHECK(!shard.ok() && shard.status().code() == rdattn::StatusCode::kInvalidArgument,
                 "vocab_size " + std::to_string(vocab) + " accepted");
      continue;
    }
    if (!shard.ok()) {
      FUZZ_CHECK(!shard.status().message().empty(), "an error without a message");
      if (vocab == 65536) FUZZ_CHECK(!info.ok(), "ReadShardInfo accepts what Open rejects");
      continue;
    }
    FUZZ_CHECK(info.ok(), "Open accepts what ReadShardInfo rejects: " + info.status().ToString());
    FUZZ_CHECK(info->num_tokens == shard->size(), "token counts differ");
    FUZZ_CHECK(info->file_bytes == static_cast<int64_t>(size), "file size");
    FUZZ_CHECK(shard->size() == 0 || uint32_t{shard->max_token()} < vocab, "max token");
    for (int64_t i = 0; i < shard->size(); ++i) {
      FUZZ_CHECK(uint32_t{shard->tokens()[i]} < vocab, "token " + std::to_string(i));
    }
    if (vocab == 65536) CheckWindows(*shard);
  }
  return 0;
}
