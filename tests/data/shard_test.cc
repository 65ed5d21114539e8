#include "worker/data/shard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/data/test_util.h"

namespace rdattn::data {
namespace {

using testing::ListDir;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

// The bytes of a shard with the given header fields and uint16 payload (llm.c layout).
std::string ShardBytes(int32_t magic, int32_t version, int32_t count,
                       const std::vector<uint16_t>& tokens) {
  std::string s(1024, '\0');
  std::memcpy(&s[0], &magic, 4);
  std::memcpy(&s[4], &version, 4);
  std::memcpy(&s[8], &count, 4);
  s.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return s;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ShardTest, WriteThenReadRoundTrip) {
  TempDir dir;
  std::vector<uint32_t> ids;
  std::mt19937 rng(1);
  for (int i = 0; i < 100000; ++i) ids.push_back(rng() % 50257);
  ids.push_back(0);
  ids.push_back(65535);
  const std::string path = dir / "x_train_000000.bin";
  ASSERT_TRUE(WriteShard(path, ids).ok());

  const std::string bytes = ReadFileBytes(path);
  ASSERT_EQ(bytes.size(), 1024 + 2 * ids.size());
  int32_t header[256];
  std::memcpy(header, bytes.data(), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], static_cast<int32_t>(ids.size()));
  for (int i = 3; i < 256; ++i) ASSERT_EQ(header[i], 0) << "header word " << i;
  // Little-endian uint16 payload.
  EXPECT_EQ(static_cast<unsigned char>(bytes[1024 + 2 * (ids.size() - 1)]), 0xFF);

  auto shard = Shard::Open(path, 65536);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  ASSERT_EQ(shard->size(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(shard->path(), path);
  EXPECT_EQ(shard->max_token(), 65535);
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(shard->tokens()[i], ids[i]) << i;

  auto info = ReadShardInfo(path);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(info->file_bytes, static_cast<int64_t>(bytes.size()));
  // No temporary files are left behind.
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"x_train_000000.bin"});
}

TEST(ShardTest, EmptyShard) {
  TempDir dir;
  ASSERT_TRUE(WriteShard(dir / "e.bin", {}).ok());
  auto shard = Shard::Open(dir / "e.bin", 257);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->size(), 0);
  EXPECT_EQ(ReadFileBytes(dir / "e.bin").size(), 1024u);
}

TEST(ShardTest, ReadsAnLlmcShardWrittenByHand) {
  TempDir dir;
  WriteFileBytes(dir / "edu_fineweb_val_000000.bin",
                 ShardBytes(20240520, 1, 4, {50256, 15496, 995, 50256}));
  auto shard = Shard::Open(dir / "edu_fineweb_val_000000.bin", 50257);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  ASSERT_EQ(shard->size(), 4);
  EXPECT_EQ(shard->tokens()[1], 15496);
  EXPECT_EQ(shard->max_token(), 50256);
}

TEST(ShardTest, MoveKeepsTheMapping) {
  TempDir dir;
  ASSERT_TRUE(WriteShard(dir / "m.bin", {1, 2, 3}).ok());
  auto opened = Shard::Open(dir / "m.bin", 257);
  ASSERT_TRUE(opened.ok());
  Shard a = std::move(opened).value();
  const uint16_t* p = a.tokens();
  Shard b = std::move(a);
  EXPECT_EQ(b.tokens(), p);
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(a.size(), 0);  // NOLINT: moved-from is empty by contract
  EXPECT_EQ(a.tokens(), nullptr);
  std::vector<Shard> many;
  many.push_back(std::move(b));
  EXPECT_EQ(many[0].tokens()[2], 3);
}

// --- every bad-shard case: an error naming the file and the problem ---------------------------

struct BadCase {
  const char* name;
  std::string bytes;  // empty + missing = no file
  bool missing;
  uint32_t vocab;
  StatusCode code;
  std::vector<std::string> must_contain;
};

TEST(ShardTest, BadShardsAreRejectedWithTheFileAndTheProblem) {
  TempDir dir;
  std::vector<uint16_t> bad_token(20, 7);
  bad_token[17] = 50300;
  const std::vector<BadCase> cases = {
      {"missing.bin",
       "",
       true,
       50257,
       StatusCode::kNotFound,
       {"missing.bin", "cannot open", "No such file"}},
      {"short.bin",
       std::string(100, '\0'),
       false,
       50257,
       StatusCode::kDataLoss,
       {"short.bin", "truncated", "100 bytes", "1024-byte shard header"}},
      {"magic.bin",
       ShardBytes(123, 1, 0, {}),
       false,
       50257,
       StatusCode::kInvalidArgument,
       {"magic.bin: wrong magic 123 (expected 20240520)"}},
      {"version.bin",
       ShardBytes(20240520, 2, 0, {}),
       false,
       50257,
       StatusCode::kInvalidArgument,
       {"version.bin: unsupported version 2 (expected 1)"}},
      {"truncated.bin",
       ShardBytes(20240520, 1, 10, {1, 2, 3}),
       false,
       50257,
       StatusCode::kDataLoss,
       {"truncated.bin: truncated: header says 10 tokens (1044 bytes) but file has 1030 bytes"}},
      {"extra.bin",
       ShardBytes(20240520, 1, 2, {1, 2, 3}) + "x",
       false,
       50257,
       StatusCode::kDataLoss,
       {"extra.bin: size mismatch: header says 2 tokens (1028 bytes) but file has 1031 bytes"}},
      {"negative.bin",
       ShardBytes(20240520, 1, -5, {}),
       false,
       50257,
       StatusCode::kDataLoss,
       {"negative.bin", "negative token count -5"}},
      {"token.bin",
       ShardBytes(20240520, 1, 20, bad_token),
       false,
       50257,
       StatusCode::kInvalidArgument,
       {"token.bin: token 50300 at index 17 is >= vocab_size 50257"}},
      {"byte_vocab.bin",
       ShardBytes(20240520, 1, 3, {256, 257, 1}),
       false,
       257,
       StatusCode::kInvalidArgument,
       {"byte_vocab.bin: token 257 at index 1 is >= vocab_size 257"}},
  };
  for (const BadCase& c : cases) {
    const std::string path = dir / c.name;
    if (!c.missing) WriteFileBytes(path, c.bytes);
    auto shard = Shard::Open(path, c.vocab);
    ASSERT_FALSE(shard.ok()) << c.name;
    EXPECT_EQ(shard.status().code(), c.code) << c.name << ": " << shard.status().ToString();
    for (const std::string& s : c.must_contain) {
      EXPECT_TRUE(Contains(shard.status().message(), s))
          << c.name << ": '" << shard.status().message() << "' lacks '" << s << "'";
    }
    EXPECT_TRUE(Contains(shard.status().message(), path)) << shard.status().message();
  }
}

TEST(ShardTest, VocabSizeBounds) {
  TempDir dir;
  ASSERT_TRUE(WriteShard(dir / "v.bin", {65535}).ok());
  EXPECT_TRUE(Shard::Open(dir / "v.bin", 65536).ok());
  auto zero = Shard::Open(dir / "v.bin", 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Contains(zero.status().message(), "vocab_size 0")) << zero.status().message();
  EXPECT_FALSE(Shard::Open(dir / "v.bin", 65537).ok());
  EXPECT_FALSE(Shard::Open(dir / "v.bin", 65535).ok());
}

TEST(ShardTest, WriteRejectsIdsAboveUint16AndWritesNothing) {
  TempDir dir;
  const Status s = WriteShard(dir / "big.bin", {1, 2, 65536});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), dir / "big.bin")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "token id 65536 at index 2")) << s.message();
  EXPECT_TRUE(ListDir(dir.path()).empty());
}

TEST(ShardTest, OverwriteIsAtomicAndLeavesNoTemporaries) {
  TempDir dir;
  ASSERT_TRUE(WriteShard(dir / "o.bin", {1, 2, 3}).ok());
  ASSERT_TRUE(WriteShard(dir / "o.bin", {4, 5}).ok());
  auto shard = Shard::Open(dir / "o.bin", 257);
  ASSERT_TRUE(shard.ok());
  ASSERT_EQ(shard->size(), 2);
  EXPECT_EQ(shard->tokens()[0], 4);
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"o.bin"});
}

TEST(ShardTest, WriterPublishesOnlyOnCommit) {
  TempDir dir;
  {
    auto w = ShardWriter::Create(dir / "w.bin");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append({1, 2, 3}).ok());
    ASSERT_TRUE(w->Finish().ok());
    EXPECT_EQ(ListDir(dir.path()).size(), 1u);
    EXPECT_FALSE(std::filesystem::exists(dir / "w.bin"));  // still under its temporary name
  }  // destroyed without Commit: the temporary file is removed
  EXPECT_TRUE(ListDir(dir.path()).empty());

  auto w = ShardWriter::Create(dir / "w.bin");
  ASSERT_TRUE(w.ok());
  std::vector<uint32_t> ids(3000000);  // more than one write buffer
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i % 65536);
  ASSERT_TRUE(w->Append(ids).ok());
  const Status bad = w->Append({70000});
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.message(), "token id 70000 at index 3000000")) << bad.message();
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"w.bin"});
  auto shard = Shard::Open(dir / "w.bin", 65536);
  ASSERT_TRUE(shard.ok());
  ASSERT_EQ(shard->size(), 3000000);
  EXPECT_EQ(shard->tokens()[2999999], 2999999 % 65536);

  auto abandoned = ShardWriter::Create(dir / "a.bin");
  ASSERT_TRUE(abandoned.ok());
  abandoned->Abandon();
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"w.bin"});
}

TEST(ShardTest, WriteIntoMissingFolderFailsNamingThePath) {
  TempDir dir;
  const Status s = WriteShard(dir / "no/such/dir/x.bin", {1});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "no/such/dir/x.bin")) << s.message();
}

TEST(ShardTest, ExpandShardPathsSortsDedupsAndFailsOnNoMatch) {
  TempDir dir;
  for (const char* n :
       {"d_train_000002.bin", "d_train_000000.bin", "d_train_000001.bin", "d_val_000000.bin"}) {
    ASSERT_TRUE(WriteShard(dir / n, {1}).ok());
  }
  auto got = ExpandShardPaths(
      {dir / "d_train_*.bin", dir / "d_train_000000.bin", dir / "d_val_000000.bin"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, (std::vector<std::string>{dir / "d_train_000000.bin", dir / "d_train_000001.bin",
                                            dir / "d_train_000002.bin", dir / "d_val_000000.bin"}));

  auto none = ExpandShardPaths({dir / "d_train_*.bin", dir / "nothing_*.bin"});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "nothing_*.bin")) << none.status().message();
  EXPECT_TRUE(Contains(none.status().message(), "matches no files")) << none.status().message();

  auto missing = ExpandShardPaths({dir / "absent.bin"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "absent.bin")) << missing.status().message();

  EXPECT_FALSE(ExpandShardPaths({}).ok());
}

}  // namespace
}  // namespace rdattn::data
