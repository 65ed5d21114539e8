// Data identity on the data side (worker/data/shard_digest.h): prepare writes each shard's
// content digest into the manifest; a shard rewritten in place (same size, other text) is found
// by the digest check against the manifest and by the on-disk check of an open shard; manifests
// older than digests are unknown, not errors.
#include "worker/data/shard_digest.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/digest.h"
#include "tests/data/test_util.h"
#include "worker/data/shard.h"

namespace rdattn::data {
namespace {

using testing::Quote;
using testing::ReadFileBytes;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteFileBytes;

const std::string kBin = RDATTN_DATA_BIN;

bool Contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

// Prepares two text documents (byte tokenizer) into DIR/out as NAME_{train,val}_000000.bin.
std::string Prepare(const TempDir& dir, const std::string& name = "tiny") {
  WriteFileBytes(dir / "a.txt", "The first document, for training, long enough to matter.");
  WriteFileBytes(dir / "b.txt", "The second one, held out.");
  const std::string out = dir / "out";
  const std::string cmd = kBin + " prepare --tokenizer byte --out " + Quote(out) + " --prefix " +
                          name + " --text " + Quote(dir / "a.txt") + " " + Quote(dir / "b.txt") +
                          " --val-files " + Quote(dir / "b.txt") + " --split files";
  const auto r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return out;
}

// Overwrites the tokens of `path` in place (same inode, same size, other text): what the issue's
// user did with a shard mid-sweep. Sleeps first so that the file's times must move (the kernel's
// timestamps are coarse, a few milliseconds).
void RewriteInPlace(const std::string& path) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::string bytes = ReadFileBytes(path);
  ASSERT_GT(bytes.size(), 1030u);
  for (size_t i = 1024; i + 1 < bytes.size(); i += 2) {  // other ids, all still < 257
    bytes[i] = static_cast<char>('a' + (i / 2) % 26);
    bytes[i + 1] = 0;
  }
  const int fd = ::open(path.c_str(), O_WRONLY);  // no O_TRUNC, no rename: the same file
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

TEST(ShardDigestTest, PrepareWritesEachShardsDigestAndSize) {
  TempDir dir;
  const std::string out = Prepare(dir);
  const nlohmann::json m = nlohmann::json::parse(ReadFileBytes(out + "/tiny.manifest.json"));
  int checked = 0;
  for (const char* split : {"train", "val"}) {
    for (const auto& s : m["splits"][split]["shards"]) {
      const std::string path = out + "/" + s["file"].get<std::string>();
      const std::string bytes = ReadFileBytes(path);
      EXPECT_EQ(s["digest"], DigestText(Xxh3(bytes))) << path;
      EXPECT_EQ(s["bytes"], bytes.size()) << path;
      EXPECT_EQ(s["digest"].get<std::string>().rfind("xxh3:", 0), 0u);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
}

TEST(ShardDigestTest, VerifyPassesThenFailsNamingShardManifestAndBothDigests) {
  TempDir dir;
  const std::string out = Prepare(dir);
  const std::string path = out + "/tiny_train_000000.bin";
  {
    auto shard = Shard::Open(path, 257);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    auto d = DigestAndVerify(*shard, "train");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->digest, *FileDigest(path));
    EXPECT_EQ(d->role, "train");
    EXPECT_EQ(d->path, path);
  }
  const std::string before = *FileDigest(path);
  RewriteInPlace(path);
  const std::string after = *FileDigest(path);
  ASSERT_NE(before, after);
  auto shard = Shard::Open(path, 257);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  auto d = DigestAndVerify(*shard, "train");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  const std::string msg = d.status().message();
  EXPECT_TRUE(Contains(msg, path)) << msg;
  EXPECT_TRUE(Contains(msg, "content digest " + after)) << msg;
  EXPECT_TRUE(Contains(msg, "differs from " + before)) << msg;
  EXPECT_TRUE(Contains(msg, out + "/tiny.manifest.json")) << msg;

  // The whole list: the error says which config field it came from.
  std::vector<Shard> train;
  train.push_back(std::move(*shard));
  auto all = DigestAndVerifyAll(train, {}, {});
  ASSERT_FALSE(all.ok());
  EXPECT_TRUE(Contains(all.status().message(), "data.train_shards: " + path))
      << all.status().ToString();

  // rdattn-data digest says the same and exits 1.
  const auto r = RunCommand(kBin + " digest " + Quote(path));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "DIFFERS from " + before)) << r.output;
}

TEST(ShardDigestTest, OldManifestWithoutDigestsAndNoManifestAreUnknownNotErrors) {
  TempDir dir;
  const std::string out = Prepare(dir);
  // A manifest written before digests existed: the same file without "digest"/"bytes".
  nlohmann::json m = nlohmann::json::parse(ReadFileBytes(out + "/tiny.manifest.json"));
  for (auto& [split, e] : m["splits"].items())
    for (auto& s : e["shards"]) {
      s.erase("digest");
      s.erase("bytes");
    }
  WriteFileBytes(out + "/tiny.manifest.json", m.dump(2));
  const std::string path = out + "/tiny_train_000000.bin";
  RewriteInPlace(path);
  auto entry = FindManifestEntry(path);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  ASSERT_TRUE(entry->has_value());
  EXPECT_EQ((*entry)->digest, "");
  auto shard = Shard::Open(path, 257);
  ASSERT_TRUE(shard.ok());
  auto d = DigestAndVerify(*shard, "train");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->digest, *FileDigest(path));
  const auto r = RunCommand(kBin + " digest " + Quote(path));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "has no digest")) << r.output;

  // No manifest in the folder at all.
  ASSERT_EQ(::unlink((out + "/tiny.manifest.json").c_str()), 0);
  auto none = FindManifestEntry(path);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  EXPECT_TRUE(DigestAndVerify(*shard, "train").ok());
}

TEST(ShardDigestTest, BrokenOrDuplicateManifestsAreErrorsNamingThem) {
  TempDir dir;
  const std::string out = Prepare(dir);
  const std::string path = out + "/tiny_train_000000.bin";
  const std::string text = ReadFileBytes(out + "/tiny.manifest.json");
  WriteFileBytes(out + "/copy.manifest.json", text);
  auto dup = FindManifestEntry(path);
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(Contains(dup.status().message(), "listed by two manifests"))
      << dup.status().ToString();
  EXPECT_TRUE(Contains(dup.status().message(), out + "/copy.manifest.json"))
      << dup.status().ToString();
  WriteFileBytes(out + "/copy.manifest.json", "{not json");
  auto bad = FindManifestEntry(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), out + "/copy.manifest.json"))
      << bad.status().ToString();
  WriteFileBytes(out + "/copy.manifest.json",
                 R"({"splits":{"train":{"shards":[{"file":"x.bin","digest":"md5:00"}]}}})");
  auto prefix = FindManifestEntry(path);
  ASSERT_FALSE(prefix.ok());
  EXPECT_TRUE(Contains(prefix.status().message(), "\"digest\" must be \"xxh3:"))
      << prefix.status().ToString();
}

TEST(ShardDigestTest, AnOpenShardRewrittenInPlaceIsNoticedBeforeResults) {
  TempDir dir;
  const std::string out = Prepare(dir);
  const std::string path = out + "/tiny_train_000000.bin";
  auto shard = Shard::Open(path, 257);
  ASSERT_TRUE(shard.ok());
  auto at_open = DigestAndVerify(*shard, "train");
  ASSERT_TRUE(at_open.ok()) << at_open.status().ToString();
  const std::vector<ShardDigest> digests = {*at_open};
  const uint16_t first = shard->tokens()[1];
  EXPECT_TRUE(CheckShardsUnchanged({&*shard}).ok());
  // Times that move without a change of content (touch): no change when the digests are known.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), nullptr, 0), 0);
  EXPECT_TRUE(CheckShardsUnchanged({&*shard}, digests).ok());
  EXPECT_FALSE(CheckShardsUnchanged({&*shard}).ok());  // without them: conservative
  RewriteInPlace(path);
  // The map follows the file (this is why the check exists).
  EXPECT_NE(shard->tokens()[1], first);
  const Status st = CheckShardsUnchanged({&*shard}, digests);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), path + ": the shard changed on disk while this run read it"))
      << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "rewritten in place")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "content digest " + at_open->digest + " at open, " +
                                         *FileDigest(path) + " now"))
      << st.ToString();

  // Replaced by rename (the same bytes: no change of content; other bytes: a change), and
  // removed: noticed.
  auto again = Shard::Open(path, 257);
  ASSERT_TRUE(again.ok());
  // (Its manifest no longer matches it since the rewrite: the digest at open, unchecked.)
  const std::vector<ShardDigest> again_digests = {
      {"train", path, DigestOfShard(*again), static_cast<int64_t>(again->file_bytes())}};
  WriteFileBytes(out + "/other.bin", ReadFileBytes(path));
  ASSERT_EQ(::rename((out + "/other.bin").c_str(), path.c_str()), 0);
  EXPECT_TRUE(CheckShardsUnchanged({&*again}, again_digests).ok());
  EXPECT_TRUE(Contains(CheckShardsUnchanged({&*again}).message(), "replaced by another file"));
  std::string other = ReadFileBytes(path);
  other[1024] = static_cast<char>(other[1024] ^ 1);
  WriteFileBytes(out + "/other.bin", other);
  ASSERT_EQ(::rename((out + "/other.bin").c_str(), path.c_str()), 0);
  const Status replaced = CheckShardsUnchanged({&*again}, again_digests);
  EXPECT_TRUE(Contains(replaced.message(), "replaced by another file; content digest"))
      << replaced.ToString();
  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_TRUE(Contains(CheckShardsUnchanged({&*again}, again_digests).message(), "gone from disk"));
}

TEST(ShardDigestTest, DataDigestFollowsContentAndOrderNotPaths) {
  const ShardDigest a{"train", "/x/a.bin", "xxh3:0000000000000001", 1026};
  const ShardDigest b{"val", "/x/b.bin", "xxh3:0000000000000002", 1028};
  ShardDigest a_moved = a;
  a_moved.path = "/elsewhere/a.bin";
  ShardDigest a_changed = a;
  a_changed.digest = "xxh3:0000000000000003";
  ShardDigest b_as_test = b;
  b_as_test.role = "test";
  const std::string base = DataDigest({a, b});
  EXPECT_EQ(base.rfind("xxh3:", 0), 0u);
  EXPECT_EQ(DataDigest({a_moved, b}), base);
  EXPECT_NE(DataDigest({a_changed, b}), base);
  EXPECT_NE(DataDigest({b, a}), base);
  EXPECT_NE(DataDigest({a, b_as_test}), base);
  EXPECT_EQ(DataDigest({}), "");
}

}  // namespace
}  // namespace rdattn::data
