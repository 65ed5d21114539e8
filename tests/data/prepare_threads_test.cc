// `rdattn-data prepare --threads N` (issue 26): the ordered pipeline, the tokenizer's cut points
// that let a long document stream in pieces, and byte-identical output for N = 1, 2, 4.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/data/test_util.h"
#include "worker/data/gpt2_tokenizer.h"
#include "worker/data/ordered_pipeline.h"
#include "worker/data/prepare.h"
#include "worker/data/shard.h"
#include "worker/data/tokenizer.h"

namespace rdattn::data {
namespace {

using testing::ListDir;
using testing::Quote;
using testing::ReadFileBytes;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteFileBytes;
using Ids = std::vector<uint32_t>;

const std::string kBin = RDATTN_DATA_BIN;

bool Contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

const Gpt2Tokenizer* Gpt2() {
  static const Gpt2Tokenizer* tok = []() -> const Gpt2Tokenizer* {
    auto t = Gpt2Tokenizer::Load(testing::VocabBpePath());
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString() << " (run scripts/fetch_data.sh)";
      return nullptr;
    }
    return std::move(t).value().release();
  }();
  return tok;
}

std::vector<std::string> SotuFiles() {
  std::vector<std::string> files;
  const std::string dir = testing::SotuDir();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".txt") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Every file of a folder, name -> bytes.
std::map<std::string, std::string> FolderBytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const std::string& n : ListDir(dir)) out[n] = ReadFileBytes(dir + "/" + n);
  return out;
}

Ids ShardIds(const std::string& path) {
  auto s = Shard::Open(path, 50257);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  return Ids(s->tokens(), s->tokens() + s->size());
}

// --- RunOrderedPipeline -----------------------------------------------------------------------

struct Task {
  int64_t seq = 0;
};
struct Result {
  int64_t seq = 0;
  int64_t value = 0;
};

TEST(OrderedPipelineTest, ConsumesInOrderWithinTheWindowForAnyWorkerCount) {
  for (const int workers : {1, 2, 3, 8}) {
    for (const int window : {1, 2, 5, 17}) {
      const int64_t n = 300;
      int64_t next = 0;
      std::atomic<int64_t> in_flight{0}, max_in_flight{0};
      std::vector<int64_t> seen;
      const std::function<StatusOr<bool>(Task*)> read = [&](Task* t) -> StatusOr<bool> {
        if (next == n) return false;
        t->seq = next++;
        const int64_t now = ++in_flight;
        int64_t m = max_in_flight.load();
        while (now > m && !max_in_flight.compare_exchange_weak(m, now)) {
        }
        return true;
      };
      const std::function<Result(Task &&)> work = [&](Task&& t) {
        // Uneven work, so that later tasks often finish first.
        std::this_thread::sleep_for(std::chrono::microseconds((t.seq * 7919) % 13 * 20));
        return Result{t.seq, t.seq * t.seq};
      };
      const std::function<Status(Result &&)> consume = [&](Result&& r) {
        EXPECT_EQ(r.value, r.seq * r.seq);
        seen.push_back(r.seq);
        --in_flight;
        return Status::Ok();
      };
      ASSERT_TRUE((RunOrderedPipeline<Task, Result>(workers, window, read, work, consume)).ok());
      ASSERT_EQ(static_cast<int64_t>(seen.size()), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], i) << workers << " workers";
      EXPECT_LE(max_in_flight.load(), window) << workers << " workers, window " << window;
    }
  }
}

TEST(OrderedPipelineTest, AReadErrorComesAfterEveryEarlierTask) {
  for (const int workers : {1, 4}) {
    int64_t next = 0;
    std::vector<int64_t> seen;
    const std::function<StatusOr<bool>(Task*)> read = [&](Task* t) -> StatusOr<bool> {
      if (next == 50) return DataLossError("input.gz: truncated");
      t->seq = next++;
      return true;
    };
    const std::function<Result(Task &&)> work = [](Task&& t) { return Result{t.seq, 0}; };
    const std::function<Status(Result &&)> consume = [&](Result&& r) {
      seen.push_back(r.seq);
      return Status::Ok();
    };
    const Status st = RunOrderedPipeline<Task, Result>(workers, 3, read, work, consume);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss);
    EXPECT_TRUE(Contains(st.message(), "input.gz: truncated")) << st.message();
    EXPECT_EQ(seen.size(), 50u);
  }
}

TEST(OrderedPipelineTest, AConsumeErrorStopsEverything) {
  int64_t next = 0;
  int64_t consumed = 0;
  const std::function<StatusOr<bool>(Task*)> read = [&](Task* t) -> StatusOr<bool> {
    t->seq = next++;  // endless: only the consumer's error can stop it
    return true;
  };
  const std::function<Result(Task &&)> work = [](Task&& t) { return Result{t.seq, 0}; };
  const std::function<Status(Result &&)> consume = [&](Result&& r) -> Status {
    ++consumed;
    if (r.seq == 20) return InvalidArgumentError("doc 20 is bad");
    return Status::Ok();
  };
  const Status st = RunOrderedPipeline<Task, Result>(4, 6, read, work, consume);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(consumed, 21);
  EXPECT_LE(next, 21 + 6);  // the window bounds what was read past the error
}

// --- cut points -------------------------------------------------------------------------------

// Random text from pieces that exercise every alternative of the GPT-2 pattern near a cut.
std::string RandomText(std::mt19937* rng, size_t pieces) {
  static const std::vector<std::string> kAlphabet = {
      "a",    "Z",    "q",  " ",   "  ",  "\n",       "\n\n",         "\t",
      "'",    "'s",   "'S", "'ll", "'re", "0",        "42",           ".",
      ",",    "-",    "!?", "é",   "東",  "\xC2\xA0", "\xE3\x80\x80", "\xF0\x9F\x98\x80",
      "\xFF", "\r\n", " x", "½",   "ß",   "\x85",     "\xE2\x80\xA8"};
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string s;
  for (size_t i = 0; i < pieces; ++i) s += kAlphabet[pick(*rng)];
  return s;
}

TEST(CutPointTest, Gpt2CutsNeverChangeIds) {
  const Gpt2Tokenizer* t = Gpt2();
  ASSERT_NE(t, nullptr);
  std::mt19937 rng(26);
  int cuts = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    const std::string text = RandomText(&rng, 1 + iter % 60);
    const Ids whole = t->Encode(text);
    // Every cut point LastCutPoint can return, from the end down.
    for (size_t hi = text.size(); hi > 0;) {
      const size_t p = t->LastCutPoint(std::string_view(text).substr(0, hi), 1);
      if (p == 0) break;
      ASSERT_LT(p, hi);
      Ids joined = t->Encode(std::string_view(text).substr(0, p));
      const Ids rest = t->Encode(std::string_view(text).substr(p));
      joined.insert(joined.end(), rest.begin(), rest.end());
      ASSERT_EQ(joined, whole) << "cut at " << p << " of '" << text << "'";
      ++cuts;
      hi = p;
    }
  }
  EXPECT_GT(cuts, 1000);  // the test really cut
}

TEST(CutPointTest, Gpt2CutPointRuleAndBounds) {
  const Gpt2Tokenizer* t = Gpt2();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->LastCutPoint("Hello world", 1), 5u);   // "Hello" | " world"
  EXPECT_EQ(t->LastCutPoint("a b c d", 1), 5u);       // the last one
  EXPECT_EQ(t->LastCutPoint("a b c d", 6), 0u);       // none at or above lo
  EXPECT_EQ(t->LastCutPoint("Hello  world", 1), 0u);  // a space before the space
  EXPECT_EQ(t->LastCutPoint("Hello 42", 1), 0u);      // a digit after it
  EXPECT_EQ(t->LastCutPoint("\xC3\xA9 b", 1), 0u);    // non-ASCII before it
  EXPECT_EQ(t->LastCutPoint("x y", 1), 1u);
  EXPECT_EQ(t->LastCutPoint("", 1), 0u);
  EXPECT_EQ(t->LastCutPoint(" y", 0), 0u);
  auto byte = MakeTokenizer("byte", "");
  ASSERT_TRUE(byte.ok());
  EXPECT_EQ((*byte)->LastCutPoint("abc", 1), 3u);
  EXPECT_EQ((*byte)->LastCutPoint("", 1), 0u);
}

// The whole SOTU corpus as one document cut into pieces gives the ids of the whole.
TEST(CutPointTest, SotuAsOneDocumentCutEvery4KiBEqualsTheWhole) {
  const Gpt2Tokenizer* t = Gpt2();
  ASSERT_NE(t, nullptr);
  std::string all;
  for (const std::string& f : SotuFiles()) all += ReadFileBytes(f) + "\n";
  ASSERT_GT(all.size(), 10000000u) << "run scripts/fetch_data.sh";
  const Ids whole = t->Encode(all);
  Ids cut;
  size_t start = 0, pieces = 0;
  while (all.size() - start > 4096) {
    const size_t p = t->LastCutPoint(std::string_view(all).substr(start, 4096), 1);
    ASSERT_GT(p, 0u) << "no cut point in 4 KiB of SOTU at " << start;
    t->EncodeAppend(std::string_view(all).substr(start, p), &cut);
    start += p;
    ++pieces;
  }
  t->EncodeAppend(std::string_view(all).substr(start), &cut);
  EXPECT_GT(pieces, 2000u);
  EXPECT_EQ(cut.size(), whole.size());
  EXPECT_TRUE(cut == whole);
}

// --- prepare --threads ------------------------------------------------------------------------

std::string PrepareCmd(const std::string& out, const std::string& inputs, int threads) {
  return kBin + " prepare --tokenizer gpt2 --vocab-bpe " + Quote(testing::VocabBpePath()) +
         " --out " + Quote(out) + " --prefix p --shard-tokens 300000 --threads " +
         std::to_string(threads) + " " + inputs;
}

// The check: N = 1, 2, 4 write the same bytes (every shard and the manifest), for text
// files, JSONL (plain and gzip) and one document bigger than many batches.
TEST(PrepareThreadsTest, OutputIsByteIdenticalForThreads1And2And4) {
  TempDir dir;
  const std::vector<std::string> files = SotuFiles();
  ASSERT_EQ(files.size(), 233u) << "run scripts/fetch_data.sh";
  std::string text_args = "--text";
  std::string jsonl, big;
  for (const std::string& f : files) {
    text_args += " " + Quote(f);
    const std::string body = ReadFileBytes(f);
    jsonl += nlohmann::json{{"text", body}, {"id", std::filesystem::path(f).filename().string()}}
                 .dump() +
             "\n";
    big += body + "\n";
  }
  WriteFileBytes(dir / "a.jsonl", jsonl.substr(0, jsonl.size() / 2 + 1000));  // cut mid-way
  {
    const std::string first = ReadFileBytes(dir / "a.jsonl");
    const size_t nl = first.rfind('\n');
    WriteFileBytes(dir / "a.jsonl", first.substr(0, nl + 1));
    WriteGzip(dir / "b.jsonl.gz", jsonl.substr(nl + 1));
  }
  WriteGzip(dir / "big.txt.gz", big);
  WriteFileBytes(dir / "big.txt", big);
  struct Case {
    std::string name, inputs;
  };
  for (const Case& c :
       {Case{"text", text_args},
        Case{"jsonl", "--jsonl " + Quote(dir / "a.jsonl") + " " + Quote(dir / "b.jsonl.gz")},
        Case{"big", "--text " + Quote(dir / "big.txt") + " " + Quote(dir / "big.txt.gz")}}) {
    std::map<std::string, std::string> first;
    for (const int threads : {1, 2, 4}) {
      const std::string out = dir / (c.name + std::to_string(threads));
      const auto r = RunCommand(PrepareCmd(out, c.inputs, threads));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_TRUE(Contains(r.output, std::to_string(threads) + " thread(s)")) << r.output;
      EXPECT_FALSE(Contains(r.output, "\r")) << "a progress line where stderr is no terminal";
      const auto bytes = FolderBytes(out);
      EXPECT_GT(bytes.size(), 5u) << c.name;  // several shards and the manifest
      if (threads == 1) {
        first = bytes;
      } else {
        EXPECT_TRUE(bytes == first)
            << c.name << ": --threads " << threads << " wrote other bytes than --threads 1";
      }
    }
  }
  // The big document streamed in pieces has the ids of the whole (and the .gz copy the same).
  const Gpt2Tokenizer* t = Gpt2();
  ASSERT_NE(t, nullptr);
  Ids want = {50256};
  t->EncodeAppend(big, &want);
  Ids got;
  const auto manifest = nlohmann::json::parse(ReadFileBytes(dir / "big4/p.manifest.json"));
  for (const char* split : {"train", "val", "test"}) {
    for (const auto& s : manifest["splits"][split]["shards"]) {
      const Ids ids = ShardIds(dir / ("big4/" + s["file"].get<std::string>()));
      got.insert(got.end(), ids.begin(), ids.end());
    }
  }
  ASSERT_EQ(got.size(), 2 * want.size());
  // Both documents have the same text; which split comes first depends on the ids' hashes.
  EXPECT_TRUE(Ids(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(want.size())) == want);
  EXPECT_TRUE(Ids(got.begin() + static_cast<std::ptrdiff_t>(want.size()), got.end()) == want);
  EXPECT_EQ(manifest["inputs"][0]["documents"], 1);
  EXPECT_EQ(manifest["inputs"][0]["text_bytes"], static_cast<int64_t>(big.size()));
}

TEST(PrepareThreadsTest, TheFirstBadLineIsReportedWhateverTheThreads) {
  TempDir dir;
  std::string good, bad;
  for (int i = 0; i < 20000; ++i) {
    good += "{\"id\": " + std::to_string(i) + ", \"text\": \"document number " + std::to_string(i) +
            " with some words in it\"}\n";
  }
  bad = good + "{\"id\": 1}\n" + good + "{broken\n";
  WriteFileBytes(dir / "bad.jsonl", bad);
  for (const int threads : {1, 2, 4}) {
    const std::string out = dir / ("o" + std::to_string(threads));
    const auto r =
        RunCommand(kBin + " prepare --tokenizer byte --out " + Quote(out) + " --prefix p " +
                   "--threads " + std::to_string(threads) + " --jsonl " + Quote(dir / "bad.jsonl"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(Contains(r.output, "bad.jsonl:20001: missing \"text\"")) << r.output;
    EXPECT_TRUE(ListDir(out).empty()) << "something was published after an error";
  }
}

TEST(PrepareThreadsTest, ThreadsFlagIsValidated) {
  TempDir dir;
  WriteFileBytes(dir / "a.txt", "a");
  for (const std::string v : {"0", "-1", "x", "1025", ""}) {
    const auto r =
        RunCommand(kBin + " prepare --tokenizer byte --out " + Quote(dir / "o") +
                   " --prefix p --text " + Quote(dir / "a.txt") + " --threads " + Quote(v));
    EXPECT_EQ(r.exit_code, 2) << v << ": " << r.output;
    EXPECT_TRUE(Contains(r.output, "--threads")) << r.output;
  }
  // The library says the same.
  auto tok = MakeTokenizer("byte", "");
  ASSERT_TRUE(tok.ok());
  PrepareOptions o;
  o.tokenizer = "byte";
  o.out_dir = dir / "o";
  o.prefix = "p";
  o.inputs = {dir / "a.txt"};
  o.threads = 0;
  const auto s = Prepare(o, **tok);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.status().message(), "--threads 0")) << s.status().message();
  // The help states the memory bound.
  const auto help = RunCommand(kBin + " prepare --help");
  EXPECT_TRUE(Contains(help.output, "--threads")) << help.output;
  EXPECT_TRUE(Contains(help.output, "MiB")) << help.output;
}

TEST(PrepareThreadsTest, ProgressReportsGrowToTheTotal) {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 30000; ++i) {
    jsonl += "{\"id\": " + std::to_string(i) + ", \"text\": \"" +
             std::string(100, static_cast<char>('a' + i % 26)) + "\"}\n";
  }
  WriteFileBytes(dir / "a.jsonl", jsonl);
  WriteGzip(dir / "b.jsonl.gz", jsonl);
  auto tok = MakeTokenizer("byte", "");
  ASSERT_TRUE(tok.ok());
  PrepareOptions o;
  o.tokenizer = "byte";
  o.kind = InputKind::kJsonl;
  o.out_dir = dir / "o";
  o.prefix = "p";
  o.inputs = {dir / "a.jsonl", dir / "b.jsonl.gz"};
  o.threads = 3;
  std::vector<PrepareProgress> seen;
  o.on_progress = [&](const PrepareProgress& p) { seen.push_back(p); };
  const auto s = Prepare(o, **tok);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_GT(seen.size(), 3u);
  const int64_t total =
      static_cast<int64_t>(jsonl.size() + ReadFileBytes(dir / "b.jsonl.gz").size());
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].file_bytes_done, seen[i - 1].file_bytes_done);
    EXPECT_GE(seen[i].text_bytes, seen[i - 1].text_bytes);
    EXPECT_EQ(seen[i].file_bytes_total, total);
  }
  EXPECT_EQ(seen.back().file_bytes_done, total);
  EXPECT_EQ(seen.back().text_bytes, s->input_bytes);
  EXPECT_EQ(seen.back().documents, 60000);
  EXPECT_EQ(seen.back().tokens, 60000 * 101);
}

}  // namespace
}  // namespace rdattn::data
