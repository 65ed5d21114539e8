// End-to-end tests of `rdattn-data` (prepare, inspect, encode, decode), run as a subprocess.
#include "worker/data/prepare.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "tests/data/test_util.h"
#include "worker/data/shard.h"
#include "worker/data/split.h"
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

// Concatenated tokens of the named shards (in order), validated with vocab.
Ids ReadShards(const std::string& dir, const std::vector<std::string>& names, uint32_t vocab) {
  Ids out;
  for (const std::string& n : names) {
    auto s = Shard::Open(dir + "/" + n, vocab);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) continue;
    out.insert(out.end(), s->tokens(), s->tokens() + s->size());
  }
  return out;
}

Ids ByteDoc(const std::string& text) {
  Ids ids = {256};
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

void Append(Ids* a, const Ids& b) { a->insert(a->end(), b.begin(), b.end()); }

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadFileBytes(path));
}

// Shard and manifest names in a folder (no temporaries may ever be left).
std::vector<std::string> Outputs(const std::string& dir) {
  std::vector<std::string> names = ListDir(dir);
  for (const std::string& n : names)
    EXPECT_FALSE(Contains(n, ".tmp.")) << "temporary file left: " << n;
  return names;
}

TEST(PrepareCliTest, FilesSplitWithRolloverAndGzip) {
  TempDir dir;
  const std::string a = "First document.\r\nWith CRLF kept.\n", b = "Second: held out for val.",
                    c = "Third, the test document \xC3\xA9.", d = "Fourth, gzipped \x00 bytes.";
  WriteFileBytes(dir / "a.txt", a);
  WriteFileBytes(dir / "b.txt", b);
  WriteFileBytes(dir / "c.txt", c);
  WriteGzip(dir / "d.txt.gz", std::string(d.data(), d.size()));
  const std::string out = dir / "out";
  const std::string cmd = kBin + " prepare --tokenizer byte --out " + Quote(out) +
                          " --prefix tiny --shard-tokens 7" + " --text " + Quote(dir / "a.txt") +
                          " " + Quote(dir / "b.txt") + " " + Quote(dir / "c.txt") + " " +
                          Quote(dir / "d.txt.gz") + " --val-files " + Quote(dir / "b.txt") +
                          " --test-files " + Quote(dir / "c.txt") + " --split files";
  const auto r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;

  Ids train = ByteDoc(a);
  Append(&train, ByteDoc(d));
  const nlohmann::json m = ReadJson(out + "/tiny.manifest.json");
  EXPECT_EQ(m["tokenizer"], "byte");
  EXPECT_EQ(m["vocab_size"], 257);
  EXPECT_EQ(m["split"], "files");
  EXPECT_EQ(m["splits"]["train"]["documents"], 2);
  EXPECT_EQ(m["splits"]["train"]["tokens"], train.size());
  EXPECT_EQ(m["splits"]["val"]["documents"], 1);
  EXPECT_EQ(m["splits"]["val"]["tokens"], b.size() + 1);
  EXPECT_EQ(m["splits"]["test"]["tokens"], c.size() + 1);
  ASSERT_EQ(m["inputs"].size(), 4u);
  EXPECT_EQ(m["inputs"][1]["split"], "val");
  EXPECT_EQ(m["inputs"][0]["sha256"], Sha256Hex(a));
  EXPECT_EQ(m["inputs"][3]["sha256"], Sha256Hex(ReadFileBytes(dir / "d.txt.gz")));
  EXPECT_EQ(m["inputs"][3]["text_bytes"], d.size());

  std::vector<std::string> train_names;
  for (const auto& s : m["splits"]["train"]["shards"]) train_names.push_back(s["file"]);
  ASSERT_EQ(train_names.size(), (train.size() + 6) / 7);  // rolled over every 7 tokens
  EXPECT_EQ(train_names[0], "tiny_train_000000.bin");
  EXPECT_EQ(ReadShards(out, train_names, 257), train);
  EXPECT_EQ(ReadShardInfo(out + "/tiny_train_000000.bin")->num_tokens, 7);
  std::vector<std::string> val_names, test_names;
  for (const auto& s : m["splits"]["val"]["shards"]) val_names.push_back(s["file"]);
  for (const auto& s : m["splits"]["test"]["shards"]) test_names.push_back(s["file"]);
  EXPECT_EQ(ReadShards(out, val_names, 257), ByteDoc(b));
  EXPECT_EQ(ReadShards(out, test_names, 257), ByteDoc(c));
  Outputs(out);

  // inspect: validates and counts.
  const auto ins =
      RunCommand(kBin + " inspect " + Quote(out + "/tiny_val_000000.bin") + " --vocab 257");
  ASSERT_EQ(ins.exit_code, 0) << ins.output;
  EXPECT_TRUE(Contains(ins.output, "7 tokens")) << ins.output;
  EXPECT_TRUE(Contains(ins.output, "1 eot (id 256)")) << ins.output;
  const auto all = RunCommand(kBin + " inspect " + Quote(out + "/tiny_*.bin") + " --vocab 257");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_TRUE(Contains(all.output, "total:")) << all.output;
  EXPECT_TRUE(Contains(all.output, "4 eot")) << all.output;
}

TEST(PrepareCliTest, JsonlHashSplitMatchesSplitOfDocumentAndIsIdempotent) {
  TempDir dir;
  std::string jsonl;
  Ids want[3];
  for (int i = 0; i < 3000; ++i) {
    const std::string id = "doc-" + std::to_string(i),
                      text = "text number " + std::to_string(i) + "\n";
    jsonl += nlohmann::json{{"id", id}, {"text", text}}.dump() + "\n";
    if (i % 500 == 0) jsonl += "\n";  // blank lines are skipped
    Append(&want[static_cast<int>(SplitOfDocument(id))], ByteDoc(text));
  }
  WriteFileBytes(dir / "docs.jsonl", jsonl);
  const std::string out = dir / "out";
  const std::string cmd = kBin + " prepare --tokenizer byte --out " + Quote(out) +
                          " --prefix j --shard-tokens 5000" + " --jsonl " +
                          Quote(dir / "docs.jsonl");
  const auto r1 = RunCommand(cmd);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const nlohmann::json m = ReadJson(out + "/j.manifest.json");
  EXPECT_EQ(m["split"], "hash");
  int docs = 0;
  for (Split s : {Split::kTrain, Split::kVal, Split::kTest}) {
    const auto& js = m["splits"][std::string(SplitName(s))];
    std::vector<std::string> names;
    for (const auto& e : js["shards"]) names.push_back(e["file"]);
    EXPECT_EQ(ReadShards(out, names, 257), want[static_cast<int>(s)]) << SplitName(s);
    docs += js["documents"].get<int>();
  }
  EXPECT_EQ(docs, 3000);
  EXPECT_EQ(m["splits"]["val"]["documents"], 12);  // counted with SplitOfDocument in Python
  EXPECT_EQ(m["splits"]["test"]["documents"], 11);

  // A second run rewrites identical bytes.
  std::map<std::string, std::string> first;
  for (const std::string& n : Outputs(out)) first[n] = ReadFileBytes(out + "/" + n);
  const auto r2 = RunCommand(cmd);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  std::map<std::string, std::string> second;
  for (const std::string& n : Outputs(out)) second[n] = ReadFileBytes(out + "/" + n);
  EXPECT_EQ(first, second);

  // Fewer, larger shards: the old higher-numbered shards are removed.
  const auto r3 = RunCommand(kBin + " prepare --tokenizer byte --out " + Quote(out) +
                             " --prefix j --jsonl " + Quote(dir / "docs.jsonl"));
  ASSERT_EQ(r3.exit_code, 0) << r3.output;
  EXPECT_TRUE(Contains(r3.output, "removed stale shard j_train_000001.bin")) << r3.output;
  EXPECT_EQ(Outputs(out), (std::vector<std::string>{"j.manifest.json", "j_test_000000.bin",
                                                    "j_train_000000.bin", "j_val_000000.bin"}));
}

TEST(PrepareCliTest, JsonlErrorsNameFileAndLineAndPublishNothing) {
  TempDir dir;
  WriteFileBytes(dir / "ok.jsonl", "{\"id\": \"a\", \"text\": \"x\"}\n");
  WriteFileBytes(
      dir / "bad.jsonl",
      "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": 7, \"text\": \"y\"}\n{\"text\": \"no id\"}\n");
  WriteFileBytes(dir / "badjson.jsonl", "{\"id\": \"a\", \"text\": \"x\"}\n{nope\n");
  WriteFileBytes(dir / "notext.jsonl", "{\"id\": \"a\"}\n");
  const std::string out = dir / "out";
  struct Case {
    std::string file;
    std::string message;
  };
  for (const Case& c : {Case{"bad.jsonl", "bad.jsonl:3: missing \"id\""},
                        Case{"badjson.jsonl", "badjson.jsonl:2: not valid JSON"},
                        Case{"notext.jsonl", "notext.jsonl:1: missing \"text\""}}) {
    const auto r =
        RunCommand(kBin + " prepare --tokenizer byte --out " + Quote(out) + " --prefix p --jsonl " +
                   Quote(dir / "ok.jsonl") + " " + Quote(dir / c.file));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(Contains(r.output, c.message)) << r.output;
    EXPECT_TRUE(Outputs(out).empty()) << "something was published after an error";
  }
  // An earlier good run is left untouched by a failing one.
  const auto good = RunCommand(kBin + " prepare --tokenizer byte --out " + Quote(out) +
                               " --prefix p --jsonl " + Quote(dir / "ok.jsonl"));
  ASSERT_EQ(good.exit_code, 0) << good.output;
  const auto before = Outputs(out);
  const std::string manifest = ReadFileBytes(out + "/p.manifest.json");
  const auto bad =
      RunCommand(kBin + " prepare --tokenizer byte --out " + Quote(out) + " --prefix p --jsonl " +
                 Quote(dir / "ok.jsonl") + " " + Quote(dir / "bad.jsonl"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(Outputs(out), before);
  EXPECT_EQ(ReadFileBytes(out + "/p.manifest.json"), manifest);
}

TEST(PrepareCliTest, UsageAndInputErrorsNameTheFlagOrFile) {
  TempDir dir;
  WriteFileBytes(dir / "a.txt", "a");
  WriteFileBytes(dir / "trunc.txt.gz", "");
  {
    // A gzip stream cut in the middle.
    WriteGzip(dir / "full.gz", std::string(100000, 'x') + "tail");
    const std::string gz = ReadFileBytes(dir / "full.gz");
    WriteFileBytes(dir / "trunc.txt.gz", gz.substr(0, gz.size() / 2));
  }
  const std::string out = dir / "out";
  const std::string base = kBin + " prepare --tokenizer byte --out " + Quote(out) + " --prefix p ";
  struct Case {
    std::string args;
    int code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--text " + Quote(dir / "missing.txt"), 1, "missing.txt: cannot open"},
      {"--text " + Quote(dir / "trunc.txt.gz"), 1, "trunc.txt.gz: "},
      {"--text " + Quote(dir / "a.txt") + " --bogus", 2, "not expected: --bogus"},
      {"--text " + Quote(dir / "a.txt") + " --shard-tokens 0", 2, "--shard-tokens '0'"},
      {"--text " + Quote(dir / "a.txt") + " --split hash --val-files " + Quote(dir / "a.txt"), 1,
       "--split files"},
      {"--text " + Quote(dir / "a.txt") + " --split weird", 2, "--split 'weird'"},
      {"--text " + Quote(dir / "a.txt") + " " + Quote(dir / "a.txt"), 1, "listed twice"},
      {"--text", 2, "--text: 1 required TEXT missing"},
      {"--out " + Quote(out) + " --text " + Quote(dir / "a.txt"), 2, "--out: At Most 1"},
      {"", 2, "no inputs"},
      {"--text " + Quote(dir / "a.txt") + " --val-files " + Quote(dir / "a.txt") +
           " --test-files " + Quote(dir / "a.txt"),
       1, "in both --val-files and --test-files"},
  };
  for (const Case& c : cases) {
    const auto r = RunCommand(base + c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.message)) << c.args << "\n" << r.output;
    EXPECT_TRUE(ListDir(dir.path()) ==
                    (std::vector<std::string>{"a.txt", "full.gz", "out", "trunc.txt.gz"}) ||
                ListDir(dir.path()) ==
                    (std::vector<std::string>{"a.txt", "full.gz", "trunc.txt.gz"}));
    EXPECT_TRUE(Outputs(out).empty()) << c.args;
  }
  const auto missing_out =
      RunCommand(kBin + " prepare --tokenizer byte --prefix p --text " + Quote(dir / "a.txt"));
  EXPECT_EQ(missing_out.exit_code, 2);
  EXPECT_TRUE(Contains(missing_out.output, "--out is required")) << missing_out.output;
  const auto bad_vocab =
      RunCommand(kBin + " prepare --tokenizer gpt2 --vocab-bpe " + Quote(dir / "nope.bpe") +
                 " --out " + Quote(out) + " --prefix p --text " + Quote(dir / "a.txt"));
  EXPECT_EQ(bad_vocab.exit_code, 1);
  EXPECT_TRUE(Contains(bad_vocab.output, "--vocab-bpe: " + dir / "nope.bpe")) << bad_vocab.output;
  const auto no_cmd = RunCommand(kBin + " frobnicate");
  EXPECT_EQ(no_cmd.exit_code, 2);
  EXPECT_TRUE(Contains(no_cmd.output, "unknown command 'frobnicate'")) << no_cmd.output;
}

// The command line is CLI11's (common/cli.h): --help on the binary and on each command lists
// the flags with their help and defaults and exits 0; a usage error is one line naming the flag,
// "rdattn-data: MESSAGE (see --help)", with exit 2; --flag_name is also accepted.
TEST(PrepareCliTest, HelpAndOneLineUsageErrors) {
  for (const char* help : {" --help", " help", " -h"}) {
    const auto top = RunCommand(kBin + help);
    EXPECT_EQ(top.exit_code, 0) << help << "\n" << top.output;
    for (const char* cmd : {"prepare", "inspect", "encode", "decode"})
      EXPECT_TRUE(Contains(top.output, std::string("  ") + cmd + " ")) << cmd << "\n" << top.output;
  }
  const auto prepare = RunCommand(kBin + " prepare --help");
  EXPECT_EQ(prepare.exit_code, 0) << prepare.output;
  for (const char* flag : {"--tokenizer", "--vocab-bpe", "--out", "--prefix", "--shard-tokens",
                           "--text", "--jsonl", "--split", "--val-files", "--test-files"})
    EXPECT_TRUE(Contains(prepare.output, flag)) << flag << "\n" << prepare.output;
  EXPECT_TRUE(Contains(prepare.output, "=100000000")) << prepare.output;
  EXPECT_TRUE(Contains(prepare.output, "=" + std::string("data/third_party/gpt2/vocab.bpe")))
      << prepare.output;
  const auto inspect = RunCommand(kBin + " inspect --help");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_TRUE(Contains(inspect.output, "--vocab") && Contains(inspect.output, "--eot") &&
              Contains(inspect.output, "SHARD"))
      << inspect.output;
  const auto encode = RunCommand(kBin + " encode --help");
  EXPECT_EQ(encode.exit_code, 0) << encode.output;
  EXPECT_TRUE(Contains(encode.output, "--stats")) << encode.output;

  struct Case {
    std::string args;
    std::string line;  // the whole output
  };
  const std::vector<Case> cases = {
      {" encode --tokenizer byte --bogus",
       "rdattn-data: The following argument was not expected: --bogus (see --help)\n"},
      {" inspect a.bin --vocab 0",
       "rdattn-data: --vocab '0' is not an integer in 1..65536 (see --help)\n"},
      {" encode --tokenizer bpe",
       "rdattn-data: --tokenizer 'bpe': expected gpt2 or byte (see --help)\n"},
      {" decode", "rdattn-data: --tokenizer is required (see --help)\n"},
      {"", "rdattn-data: A subcommand is required (see --help)\n"},
  };
  for (const Case& c : cases) {
    const auto r = RunCommand(kBin + c.args + " </dev/null");
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output, c.line) << c.args;
  }
  // The old spelling of a flag still parses.
  const auto underscore =
      RunCommand("printf 'ab' | " + kBin + " encode --tokenizer byte --vocab_bpe x");
  EXPECT_EQ(underscore.exit_code, 2) << underscore.output;
  EXPECT_TRUE(Contains(underscore.output, "--vocab-bpe is only for --tokenizer gpt2"))
      << underscore.output;
}

TEST(PrepareCliTest, Gpt2TextFilesHashSplit) {
  const std::string vocab = testing::VocabBpePath();
  auto tok = MakeTokenizer("gpt2", vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  TempDir dir;
  // Two file names whose hash split is train (doc-0 -> 634) and val (doc-385 -> 991).
  WriteFileBytes(dir / "doc-0", "Hello world");
  WriteFileBytes(dir / "doc-385", "Fellow-Citizens of the Senate");
  const std::string out = dir / "out";
  const auto r = RunCommand(kBin + " prepare --tokenizer gpt2 --vocab-bpe " + Quote(vocab) +
                            " --out " + Quote(out) + " --prefix g --text " + Quote(dir / "doc-0") +
                            " " + Quote(dir / "doc-385"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "split test has no documents")) << r.output;
  EXPECT_EQ(ReadShards(out, {"g_train_000000.bin"}, 50257), (Ids{50256, 15496, 995}));
  Ids val = {50256};
  Append(&val, (*tok)->Encode("Fellow-Citizens of the Senate"));
  EXPECT_EQ(ReadShards(out, {"g_val_000000.bin"}, 50257), val);
  const nlohmann::json m = ReadJson(out + "/g.manifest.json");
  EXPECT_EQ(m["tokenizer"], "gpt2");
  EXPECT_EQ(m["vocab_size"], 50257);
  EXPECT_EQ(m["eot"], 50256);
  EXPECT_EQ(m["tokenizer_file"]["sha256"], kGpt2VocabBpeSha256);
  EXPECT_EQ(m["splits"]["test"]["shards"].size(), 0u);
  EXPECT_EQ(Outputs(out), (std::vector<std::string>{"g.manifest.json", "g_train_000000.bin",
                                                    "g_val_000000.bin"}));
}

TEST(PrepareCliTest, EncodeDecodeAndInspectErrors) {
  const std::string vocab = testing::VocabBpePath();
  TempDir dir;
  WriteFileBytes(dir / "in.txt", "Hello world");
  const auto enc = RunCommand(kBin + " encode --tokenizer gpt2 --vocab-bpe " + Quote(vocab) +
                              " < " + Quote(dir / "in.txt"));
  ASSERT_EQ(enc.exit_code, 0) << enc.output;
  EXPECT_EQ(enc.output, "15496 995\n");
  WriteFileBytes(dir / "ids.txt", "15496 995 50256\n");
  const auto dec = RunCommand(kBin + " decode --tokenizer gpt2 --vocab-bpe " + Quote(vocab) +
                              " < " + Quote(dir / "ids.txt"));
  ASSERT_EQ(dec.exit_code, 0) << dec.output;
  EXPECT_EQ(dec.output, "Hello world<|endoftext|>");
  const auto byte_enc = RunCommand("printf 'ab' | " + kBin + " encode --tokenizer byte");
  EXPECT_EQ(byte_enc.output, "97 98\n");

  std::vector<uint32_t> ids = {1, 2, 300};
  ASSERT_TRUE(WriteShard(dir / "s.bin", ids).ok());
  const auto bad = RunCommand(kBin + " inspect " + Quote(dir / "s.bin") + " --vocab 257");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(Contains(bad.output, dir / "s.bin" + ": token 300 at index 2 is >= vocab_size 257"))
      << bad.output;
  const auto none = RunCommand(kBin + " inspect " + Quote(dir / "zzz_*.bin"));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(Contains(none.output, "matches no files")) << none.output;
  const auto ok = RunCommand(kBin + " inspect " + Quote(dir / "s.bin"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(Contains(ok.output, "3 tokens, min id 1, max id 300, 0 eot (id 50256)")) << ok.output;
}

// The library entry point, called directly.
TEST(PrepareApiTest, PrepareReturnsASummary) {
  TempDir dir;
  WriteFileBytes(dir / "x.txt", "abc");
  auto tok = MakeTokenizer("byte", "");
  ASSERT_TRUE(tok.ok());
  PrepareOptions o;
  o.tokenizer = "byte";
  o.out_dir = dir / "o";
  o.prefix = "api";
  o.inputs = {dir / "x.txt"};
  o.split_mode = SplitMode::kFiles;
  o.test_files = {dir / "x.txt"};
  auto s = Prepare(o, **tok);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->splits[static_cast<int>(Split::kTest)].tokens, 4);
  EXPECT_EQ(s->splits[static_cast<int>(Split::kTest)].shards,
            std::vector<std::string>{"api_test_000000.bin"});
  EXPECT_EQ(s->warnings.size(), 2u);  // empty train and val
  EXPECT_EQ(ShardFileName("n", Split::kVal, 12), "n_val_000012.bin");
}

}  // namespace
}  // namespace rdattn::data
