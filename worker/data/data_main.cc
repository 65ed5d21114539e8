// rdattn-data: corpus preparation and shard tools (see usage below and DATA.md).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/data/prepare.h"
#include "worker/data/shard.h"
#include "worker/data/tokenizer.h"

namespace {

using namespace rdattn;
using namespace rdattn::data;

constexpr char kDefaultVocabBpe[] = "data/third_party/gpt2/vocab.bpe";

constexpr char kUsage[] = R"(usage:
  rdattn-data prepare --tokenizer gpt2|byte [--vocab-bpe PATH] --out DIR --prefix NAME
                      [--shard-tokens N] (--text FILE... | --jsonl FILE...)
                      [--split hash|files] [--val-files FILE...] [--test-files FILE...]
      Tokenizes documents as [EOT] + tokens and writes llm.c shards
      DIR/NAME_{train,val,test}_NNNNNN.bin (rolling over every N tokens, default 100000000)
      and DIR/NAME.manifest.json. --text: each file is one document, id = file basename.
      --jsonl: each line is {"text": ..., "id": ...}. Files ending in .gz are gunzipped.
      --split hash (default unless --val-files/--test-files are given): SHA-256(id) mod 1000,
      0-989 train, 990-994 val, 995-999 test. --split files: the --val-files/--test-files are
      the held-out splits, every other input is train. Nothing is published unless every
      input was read without error; re-running with the same inputs rewrites the same bytes.
  rdattn-data inspect SHARD... [--vocab N] [--eot ID]
      Validates shards (paths or glob patterns) and prints token count, min/max id and EOT
      count. --vocab defaults to 65536 (any uint16); --eot to N-1 with --vocab, else 50256.
  rdattn-data encode --tokenizer gpt2|byte [--vocab-bpe PATH] [--stats] < text
      Prints the ids of stdin (read as raw bytes, encoded as ordinary text), space-separated.
  rdattn-data decode --tokenizer gpt2|byte [--vocab-bpe PATH] < ids
      Writes the bytes of whitespace-separated ids read from stdin.
--vocab-bpe defaults to )"
                          "data/third_party/gpt2/vocab.bpe"
                          R"( (relative to the current folder).
Exit status: 0 ok, 1 error (message names the file or flag), 2 bad usage.
)";

struct UsageError {
  std::string message;
};

// argv parsing: "--flag value", "--flag=value", and list flags "--flag v1 v2 ..." that take
// values up to the next argument starting with "--".
class Args {
 public:
  Args(int argc, char** argv, int first, const std::vector<std::string>& list_flags,
       const std::vector<std::string>& value_flags, const std::vector<std::string>& bool_flags,
       bool positional_allowed) {
    auto is = [](const std::vector<std::string>& v, const std::string& s) {
      return std::find(v.begin(), v.end(), s) != v.end();
    };
    std::string current_list;
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) == 0) {
        current_list.clear();
        std::string name = a, value;
        bool has_value = false;
        const size_t eq = a.find('=');
        if (eq != std::string::npos) {
          name = a.substr(0, eq);
          value = a.substr(eq + 1);
          has_value = true;
        }
        if (is(bool_flags, name)) {
          if (has_value) throw UsageError{name + " takes no value"};
          bools_[name] = true;
        } else if (is(value_flags, name)) {
          if (!has_value) {
            if (i + 1 >= argc) throw UsageError{name + " needs a value"};
            value = argv[++i];
          }
          if (values_.count(name) != 0) throw UsageError{name + " given twice"};
          values_[name] = value;
        } else if (is(list_flags, name)) {
          lists_[name];  // present, maybe empty
          if (has_value) lists_[name].push_back(value);
          current_list = name;
        } else {
          throw UsageError{"unknown flag " + name};
        }
        continue;
      }
      if (!current_list.empty()) {
        lists_[current_list].push_back(a);
      } else if (positional_allowed) {
        positional_.push_back(a);
      } else {
        throw UsageError{"unexpected argument '" + a + "'"};
      }
    }
    for (const auto& [name, vals] : lists_) {
      if (vals.empty()) throw UsageError{name + " needs at least one file"};
    }
  }
  std::optional<std::string> value(const std::string& n) const {
    const auto it = values_.find(n);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  std::string required(const std::string& n) const {
    auto v = value(n);
    if (!v.has_value()) throw UsageError{"missing " + n};
    return *v;
  }
  bool has_list(const std::string& n) const { return lists_.count(n) != 0; }
  std::vector<std::string> list(const std::string& n) const {
    const auto it = lists_.find(n);
    return it == lists_.end() ? std::vector<std::string>{} : it->second;
  }
  bool flag(const std::string& n) const { return bools_.count(n) != 0; }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::map<std::string, bool> bools_;
  std::vector<std::string> positional_;
};

int64_t ParseInt(const std::string& flag, const std::string& s, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    throw UsageError{flag + " '" + s + "' is not an integer in " + std::to_string(lo) + ".." +
                     std::to_string(hi)};
  }
  return v;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "rdattn-data: error: %s\n", s.message().c_str());
  return 1;
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromArgs(const Args& args, std::string* vocab_path) {
  const std::string name = args.required("--tokenizer");
  if (name != "gpt2" && name != "byte")
    throw UsageError{"--tokenizer '" + name + "': expected gpt2 or byte"};
  *vocab_path = args.value("--vocab-bpe").value_or(kDefaultVocabBpe);
  if (name == "byte") {
    if (args.value("--vocab-bpe").has_value())
      throw UsageError{"--vocab-bpe is only for --tokenizer gpt2"};
    vocab_path->clear();
  }
  auto t = MakeTokenizer(name, *vocab_path);
  if (!t.ok()) return t.status().WithPrefix("--vocab-bpe");
  return t;
}

std::string ReadStdin() {
  std::string s;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), stdin)) > 0) s.append(buf.data(), n);
  return s;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int CmdPrepare(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--text", "--jsonl", "--val-files", "--test-files"},
                  {"--tokenizer", "--vocab-bpe", "--out", "--prefix", "--shard-tokens", "--split"},
                  {}, false);
  PrepareOptions opts;
  opts.tokenizer = args.required("--tokenizer");
  opts.out_dir = args.required("--out");
  opts.prefix = args.required("--prefix");
  if (auto v = args.value("--shard-tokens"))
    opts.shard_tokens = ParseInt("--shard-tokens", *v, 1, kShardMaxTokens);
  const bool text = args.has_list("--text"), jsonl = args.has_list("--jsonl");
  if (text && jsonl) throw UsageError{"give either --text or --jsonl, not both"};
  opts.kind = jsonl ? InputKind::kJsonl : InputKind::kText;
  opts.inputs = args.list(jsonl ? "--jsonl" : "--text");
  opts.val_files = args.list("--val-files");
  opts.test_files = args.list("--test-files");
  const bool held_out = !opts.val_files.empty() || !opts.test_files.empty();
  if (!text && !jsonl && !held_out)
    throw UsageError{"no inputs: give --text FILE... or --jsonl FILE..."};
  const std::string split = args.value("--split").value_or(held_out ? "files" : "hash");
  if (split == "hash") {
    opts.split_mode = SplitMode::kHash;
  } else if (split == "files") {
    opts.split_mode = SplitMode::kFiles;
  } else {
    throw UsageError{"--split '" + split + "': expected hash or files"};
  }
  std::string vocab_path;
  auto tok = TokenizerFromArgs(args, &vocab_path);
  if (!tok.ok()) return Fail(tok.status());
  opts.vocab_bpe = vocab_path;

  const auto t0 = std::chrono::steady_clock::now();
  auto summary = Prepare(opts, **tok);
  if (!summary.ok()) return Fail(summary.status().WithPrefix("prepare"));
  const double secs = Seconds(t0, std::chrono::steady_clock::now());
  for (Split s : {Split::kTrain, Split::kVal, Split::kTest}) {
    const SplitSummary& ss = summary->splits[static_cast<int>(s)];
    std::printf("%-5s %8lld documents %12lld tokens %4zu shard(s)\n",
                std::string(SplitName(s)).c_str(), static_cast<long long>(ss.documents),
                static_cast<long long>(ss.tokens), ss.shards.size());
  }
  for (const std::string& r : summary->removed_stale)
    std::printf("removed stale shard %s\n", r.c_str());
  for (const std::string& w : summary->warnings)
    std::fprintf(stderr, "rdattn-data: warning: %s\n", w.c_str());
  std::printf("manifest %s (%.2f s, %.1f MB/s of text)\n", summary->manifest_path.c_str(), secs,
              secs > 0 ? static_cast<double>(summary->input_bytes) / 1e6 / secs : 0.0);
  return 0;
}

int CmdInspect(int argc, char** argv) {
  const Args args(argc, argv, 2, {}, {"--vocab", "--eot"}, {}, true);
  if (args.positional().empty()) throw UsageError{"inspect needs at least one shard"};
  const int64_t vocab =
      args.value("--vocab") ? ParseInt("--vocab", *args.value("--vocab"), 1, 65536) : 65536;
  int64_t eot = args.value("--vocab") ? vocab - 1 : 50256;
  if (auto v = args.value("--eot")) eot = ParseInt("--eot", *v, 0, 65535);
  auto paths = ExpandShardPaths(args.positional());
  if (!paths.ok()) return Fail(paths.status());
  int bad = 0;
  int64_t total = 0, total_eot = 0;
  int mn_all = 65536, mx_all = -1;
  for (const std::string& p : *paths) {
    auto shard = Shard::Open(p, static_cast<uint32_t>(vocab));
    if (!shard.ok()) {
      std::fprintf(stderr, "rdattn-data: error: %s\n", shard.status().message().c_str());
      ++bad;
      continue;
    }
    const uint16_t* t = shard->tokens();
    int mn = 65536;
    int64_t eots = 0;
    for (int64_t i = 0; i < shard->size(); ++i) {
      mn = std::min<int>(mn, t[i]);
      eots += t[i] == eot;
    }
    const int mx = shard->size() > 0 ? shard->max_token() : -1;
    if (shard->size() == 0) mn = -1;
    std::printf("%s: %lld tokens, min id %d, max id %d, %lld eot (id %lld)\n", p.c_str(),
                static_cast<long long>(shard->size()), mn, mx, static_cast<long long>(eots),
                static_cast<long long>(eot));
    total += shard->size();
    total_eot += eots;
    if (shard->size() > 0) {
      mn_all = std::min(mn_all, mn);
      mx_all = std::max(mx_all, mx);
    }
  }
  if (paths->size() > 1) {
    std::printf("total: %zu shards (%d invalid), %lld tokens, min id %d, max id %d, %lld eot\n",
                paths->size(), bad, static_cast<long long>(total), mx_all < 0 ? -1 : mn_all, mx_all,
                static_cast<long long>(total_eot));
  }
  return bad == 0 ? 0 : 1;
}

int CmdEncode(int argc, char** argv) {
  const Args args(argc, argv, 2, {}, {"--tokenizer", "--vocab-bpe"}, {"--stats"}, false);
  std::string vocab_path;
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = TokenizerFromArgs(args, &vocab_path);
  if (!tok.ok()) return Fail(tok.status());
  const auto t1 = std::chrono::steady_clock::now();
  const std::string text = ReadStdin();
  const auto t2 = std::chrono::steady_clock::now();
  const std::vector<uint32_t> ids = (*tok)->Encode(text);
  const auto t3 = std::chrono::steady_clock::now();
  std::string out;
  out.reserve(ids.size() * 6 + 1);
  char num[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    const int k = std::snprintf(num, sizeof(num), i == 0 ? "%u" : " %u", ids[i]);
    out.append(num, static_cast<size_t>(k));
  }
  out.push_back('\n');
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (args.flag("--stats")) {
    const double enc = Seconds(t2, t3);
    std::fprintf(
        stderr,
        "encode: %zu bytes -> %zu tokens (%.3f bytes/token) in %.3f s = %.2f MB/s; "
        "tokenizer load %.3f s\n",
        text.size(), ids.size(),
        ids.empty() ? 0.0 : static_cast<double>(text.size()) / static_cast<double>(ids.size()), enc,
        enc > 0 ? static_cast<double>(text.size()) / 1e6 / enc : 0.0, Seconds(t0, t1));
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int CmdDecode(int argc, char** argv) {
  const Args args(argc, argv, 2, {}, {"--tokenizer", "--vocab-bpe"}, {}, false);
  std::string vocab_path;
  auto tok = TokenizerFromArgs(args, &vocab_path);
  if (!tok.ok()) return Fail(tok.status());
  const std::string in = ReadStdin();
  std::vector<uint32_t> ids;
  size_t i = 0;
  while (i < in.size()) {
    while (i < in.size() && std::isspace(static_cast<unsigned char>(in[i]))) ++i;
    if (i >= in.size()) break;
    size_t j = i;
    while (j < in.size() && !std::isspace(static_cast<unsigned char>(in[j]))) ++j;
    const std::string word = in.substr(i, j - i);
    char* end = nullptr;
    const unsigned long v = std::strtoul(word.c_str(), &end, 10);
    if (*end != '\0' || v >= (*tok)->vocab_size()) {
      return Fail(InvalidArgumentError("stdin: '" + word + "' is not a token id below " +
                                       std::to_string((*tok)->vocab_size())));
    }
    ids.push_back(static_cast<uint32_t>(v));
    i = j;
  }
  const std::string s = (*tok)->Decode(ids);
  std::fwrite(s.data(), 1, s.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "prepare") return CmdPrepare(argc, argv);
    if (cmd == "inspect") return CmdInspect(argc, argv);
    if (cmd == "encode") return CmdEncode(argc, argv);
    if (cmd == "decode") return CmdDecode(argc, argv);
    throw UsageError{"unknown command '" + cmd + "'"};
  } catch (const UsageError& e) {
    std::fprintf(stderr, "rdattn-data: %s\n\n%s", e.message.c_str(), kUsage);
    return 2;
  }
}
