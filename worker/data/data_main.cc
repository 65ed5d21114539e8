// rdattn-data: corpus preparation and shard tools (`rdattn-data --help`, README.md). The
// command line is CLI11's (common/cli.h): prepare, inspect, digest, encode and decode, each with
// --help;
// a usage error is one line "rdattn-data: MESSAGE (see --help)" with exit 2.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cli.h"
#include "common/digest.h"
#include "worker/data/prepare.h"
#include "worker/data/shard.h"
#include "worker/data/shard_digest.h"
#include "worker/data/tokenizer.h"

namespace {

using namespace rdattn;
using namespace rdattn::data;

constexpr char kDefaultVocabBpe[] = "data/third_party/gpt2/vocab.bpe";

constexpr int kExitUsage = 2;

constexpr int64_t kMaxThreads = 1024;

// The command line, every subcommand's flags in one struct. Integer flags are given as text and
// read by each command's check after parse (common/cli.h CheckAfterParse) into the typed fields
// below, so a bad value is one usage line "--vocab '0' is not an integer in 1..65536" (exit 2).
struct Flags {
  std::string tokenizer, vocab_bpe, out, prefix, shard_tokens, split, vocab, eot, bench_tokens,
      threads;
  std::vector<std::string> text, jsonl, val_files, test_files, shards;
  bool stats = false;
  // Read by the checks: the values the commands use.
  int64_t shard_tokens_n = 0;  // 0: PrepareOptions' default
  int threads_n = 0;           // 0: the usable cores
  SplitMode split_mode = SplitMode::kHash;
  int64_t vocab_n = 65536, eot_n = 50256, bench_tokens_n = 0;
};

// "" when `text` is a whole number in [lo, hi] (then *value gets it), else the usage message
// naming the flag and the range.
std::string IntegerIn(const std::string& flag, const std::string& text, int64_t lo, int64_t hi,
                      int64_t* value) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return flag + " '" + text + "' is not an integer in " + std::to_string(lo) + ".." +
           std::to_string(hi);
  }
  *value = v;
  return "";
}

// --tokenizer and --vocab-bpe of `cmd` (prepare, encode, decode).
std::string CheckTokenizer(const CLI::App& cmd, const Flags& f) {
  if (f.tokenizer != "gpt2" && f.tokenizer != "byte") {
    return "--tokenizer '" + f.tokenizer + "': expected gpt2 or byte";
  }
  if (f.tokenizer == "byte" && cmd.count("--vocab-bpe") > 0) {
    return "--vocab-bpe is only for --tokenizer gpt2";
  }
  return "";
}

std::string CheckPrepare(const CLI::App& cmd, Flags& f) {
  std::string problem;
  if (cmd.count("--shard-tokens") > 0) {
    problem = IntegerIn("--shard-tokens", f.shard_tokens, 1, kShardMaxTokens, &f.shard_tokens_n);
    if (!problem.empty()) return problem;
  }
  if (cmd.count("--threads") > 0) {
    int64_t n = 0;
    problem = IntegerIn("--threads", f.threads, 1, kMaxThreads, &n);
    if (!problem.empty()) return problem;
    f.threads_n = static_cast<int>(n);
  }
  const bool text = cmd.count("--text") > 0, jsonl = cmd.count("--jsonl") > 0;
  if (text && jsonl) return "give either --text or --jsonl, not both";
  const bool held_out = !f.val_files.empty() || !f.test_files.empty();
  if (!text && !jsonl && !held_out) return "no inputs: give --text FILE... or --jsonl FILE...";
  const std::string split = cmd.count("--split") > 0 ? f.split : held_out ? "files" : "hash";
  if (split != "hash" && split != "files") return "--split '" + split + "': expected hash or files";
  f.split_mode = split == "hash" ? SplitMode::kHash : SplitMode::kFiles;
  return CheckTokenizer(cmd, f);
}

std::string CheckInspect(const CLI::App& cmd, Flags& f) {
  if (cmd.count("--vocab") > 0) {
    std::string problem = IntegerIn("--vocab", f.vocab, 1, 65536, &f.vocab_n);
    if (!problem.empty()) return problem;
    f.eot_n = f.vocab_n - 1;
  }
  if (cmd.count("--eot") > 0) return IntegerIn("--eot", f.eot, 0, 65535, &f.eot_n);
  return "";
}

std::string CheckDigest(const CLI::App& cmd, Flags& f) {
  if (cmd.count("--bench-tokens") > 0) {
    return IntegerIn("--bench-tokens", f.bench_tokens, 1, kShardMaxTokens, &f.bench_tokens_n);
  }
  if (f.shards.empty()) return "digest: give SHARD... or --bench-tokens N";
  return "";
}

// A value flag given twice is a usage error here (a second --out is a mistake, not an override);
// a list flag takes the values up to the next flag and may be repeated.
CLI::Option* Value(CLI::App* cmd, const std::string& name, std::string& target,
                   const std::string& help) {
  return cmd->add_option(name, target, help)->multi_option_policy(CLI::MultiOptionPolicy::Throw);
}

CLI::Option* List(CLI::App* cmd, const std::string& name, std::vector<std::string>& target,
                  const std::string& help) {
  return cmd->add_option(name, target, help)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->default_str("");
}

void AddTokenizerFlags(CLI::App* cmd, Flags& f) {
  Value(cmd, "--tokenizer", f.tokenizer, "gpt2 (byte-level BPE) or byte (ids 0-255, EOT 256)")
      ->required();
  Value(cmd, "--vocab-bpe", f.vocab_bpe,
        "GPT-2's vocab.bpe, for --tokenizer gpt2 (relative to the current "
        "folder)")
      ->default_str(kDefaultVocabBpe);
}

void AddCommands(CLI::App& app, Flags& f) {
  app.require_subcommand(1);
  CLI::App* prepare =
      app.add_subcommand("prepare", "tokenize documents into llm.c shards and a manifest");
  prepare->footer(
      "Tokenizes documents as [EOT] + tokens and writes llm.c shards\n"
      "DIR/NAME_{train,val,test}_NNNNNN.bin (rolling over every --shard-tokens tokens) and\n"
      "DIR/NAME.manifest.json. --text: each file is one document, id = file basename. --jsonl:\n"
      "each line is {\"text\": ..., \"id\": ...}. Files ending in .gz are gunzipped. --split hash\n"
      "(default unless --val-files/--test-files are given): SHA-256(id) mod 1000, 0-989 train,\n"
      "990-994 val, 995-999 test. --split files: the --val-files/--test-files are the held-out\n"
      "splits, every other input is train. Nothing is published unless every input was read\n"
      "without error; re-running with the same inputs rewrites the same bytes, for any --threads.\n"
      "Streaming: inputs are read in batches of about 0.5 MiB of text (whole JSONL lines, or\n"
      "pieces of a text file cut where the ids cannot change); at most 2N+2 batches are in flight\n"
      "for --threads N, and each tokenizing thread keeps at most 65536 BPE results: memory is at\n"
      "most about 40 MiB + N x 45 MiB whatever the corpus size (plus any single JSONL line, held\n"
      "whole; about 30 MiB + N x 4 MiB measured on English text; docs/data.md). On a terminal,\n"
      "stderr shows a progress line (MB/s, ETA); never in a log.");
  AddTokenizerFlags(prepare, f);
  Value(prepare, "--out", f.out, "output folder DIR")->required();
  Value(prepare, "--prefix", f.prefix, "file name prefix NAME")->required();
  Value(prepare, "--shard-tokens", f.shard_tokens, "tokens per shard")->default_str("100000000");
  Value(prepare, "--threads", f.threads,
        "tokenizing threads N (1..1024); the output is the same for every N; memory at most "
        "about 40 MiB + N x 45 MiB")
      ->default_str("the cores this process may use");
  List(prepare, "--text", f.text, "text files, one document each");
  List(prepare, "--jsonl", f.jsonl, "JSON-lines files, one document a line");
  Value(prepare, "--split", f.split, "hash or files (the default with --val-files/--test-files)")
      ->default_str("hash");
  List(prepare, "--val-files", f.val_files, "inputs of the val split (--split files)");
  List(prepare, "--test-files", f.test_files, "inputs of the test split (--split files)");
  cli::CheckAfterParse(prepare, [prepare, &f] { return CheckPrepare(*prepare, f); });

  CLI::App* inspect = app.add_subcommand(
      "inspect",
      "validate shards (paths or glob patterns); print token count, min/max id and EOT count");
  inspect->add_option("SHARD", f.shards, "shard paths or glob patterns")
      ->required()
      ->default_str("");
  Value(inspect, "--vocab", f.vocab, "vocabulary size N (1..65536)")
      ->default_str("65536 (any uint16)");
  Value(inspect, "--eot", f.eot, "the EOT id (0..65535)")
      ->default_str("N-1 with --vocab, else 50256");
  cli::CheckAfterParse(inspect, [inspect, &f] { return CheckInspect(*inspect, f); });

  CLI::App* digest = app.add_subcommand(
      "digest", "print each shard's content digest and check it against its folder's manifest");
  digest->footer(
      "Prints PATH DIGEST BYTES and what the manifest of the shard's folder says: ok, DIFFERS\n"
      "(exit 1), no digest (a manifest older than digests) or no manifest. The trainer makes the\n"
      "same check on every shard it opens (docs/operations.md \"Data identity\").\n"
      "--bench-tokens N: write a shard of N pseudo-random tokens under --out (default /tmp),\n"
      "time opening it (map and token scan), its digest from the map (what the trainer adds) and\n"
      "from read(2), print the figures and remove it.");
  digest->add_option("SHARD", f.shards, "shard paths or glob patterns")->default_str("");
  Value(digest, "--bench-tokens", f.bench_tokens, "benchmark: tokens of the synthetic shard");
  Value(digest, "--out", f.out, "benchmark: folder of the synthetic shard")->default_str("/tmp");
  cli::CheckAfterParse(digest, [digest, &f] { return CheckDigest(*digest, f); });

  CLI::App* encode = app.add_subcommand(
      "encode", "print the ids of stdin (raw bytes, encoded as ordinary text), space-separated");
  AddTokenizerFlags(encode, f);
  encode->add_flag("--stats", f.stats, "print bytes, tokens and speed on stderr");
  cli::CheckAfterParse(encode, [encode, &f] { return CheckTokenizer(*encode, f); });

  CLI::App* decode =
      app.add_subcommand("decode", "write the bytes of whitespace-separated ids read from stdin");
  AddTokenizerFlags(decode, f);
  cli::CheckAfterParse(decode, [decode, &f] { return CheckTokenizer(*decode, f); });
}

int Fail(const Status& s) {
  std::fprintf(stderr, "rdattn-data: error: %s\n", s.message().c_str());
  return 1;
}

// `cmd`: the subcommand run, which says which flags were given.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromFlags(const CLI::App& cmd, const Flags& f,
                                                        std::string* vocab_path) {
  const std::string& name = f.tokenizer;  // gpt2 or byte (CheckTokenizer)
  *vocab_path = cmd.count("--vocab-bpe") > 0 ? f.vocab_bpe : kDefaultVocabBpe;
  if (name == "byte") vocab_path->clear();
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

// The CPUs this process may run on (its affinity mask, e.g. under taskset or a container's
// cpuset), else what the standard library says, else 1.
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<int>(std::min<int64_t>(n, kMaxThreads));
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(std::min<int64_t>(hw, kMaxThreads)) : 1;
}

// `prepare`'s progress on a terminal: one line on stderr, redrawn at most twice a second with
// "\r", cleared at the end. Never used when stderr is not a terminal (logs stay clean).
class ProgressLine {
 public:
  explicit ProgressLine(std::chrono::steady_clock::time_point t0) : t0_(t0), last_(t0) {}
  void Update(const PrepareProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (Seconds(last_, now) < 0.5) return;
    last_ = now;
    const double secs = Seconds(t0_, now);
    const double mbps = secs > 0 ? static_cast<double>(p.text_bytes) / 1e6 / secs : 0.0;
    const double frac = p.file_bytes_total > 0 ? static_cast<double>(p.file_bytes_done) /
                                                     static_cast<double>(p.file_bytes_total)
                                               : 0.0;
    char eta[32] = "?";
    if (frac > 0.0 && frac <= 1.0) {
      const long long left = std::llround(secs * (1.0 - frac) / frac);
      std::snprintf(eta, sizeof(eta), "%lld:%02lld:%02lld", left / 3600, left / 60 % 60, left % 60);
    }
    std::fprintf(stderr,
                 "\rprepare: %5.1f%%  %.1f MB of text  %lld docs  %lld tokens  %.1f MB/s"
                 "  ETA %s   ",
                 100.0 * std::min(frac, 1.0), static_cast<double>(p.text_bytes) / 1e6,
                 static_cast<long long>(p.documents), static_cast<long long>(p.tokens), mbps, eta);
    std::fflush(stderr);
    drawn_ = true;
  }
  void Finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  std::chrono::steady_clock::time_point t0_, last_;
  bool drawn_ = false;
};

int CmdPrepare(const CLI::App& cmd, const Flags& f) {
  PrepareOptions opts;
  opts.tokenizer = f.tokenizer;
  opts.out_dir = f.out;
  opts.prefix = f.prefix;
  if (f.shard_tokens_n > 0) opts.shard_tokens = f.shard_tokens_n;
  opts.threads = f.threads_n > 0 ? f.threads_n : UsableCores();
  const bool jsonl = cmd.count("--jsonl") > 0;
  opts.kind = jsonl ? InputKind::kJsonl : InputKind::kText;
  opts.inputs = jsonl ? f.jsonl : f.text;
  opts.val_files = f.val_files;
  opts.test_files = f.test_files;
  opts.split_mode = f.split_mode;
  std::string vocab_path;
  auto tok = TokenizerFromFlags(cmd, f, &vocab_path);
  if (!tok.ok()) return Fail(tok.status());
  opts.vocab_bpe = vocab_path;

  const auto t0 = std::chrono::steady_clock::now();
  ProgressLine progress_line(t0);
  if (::isatty(STDERR_FILENO) == 1) {
    opts.on_progress = [&](const PrepareProgress& p) { progress_line.Update(p); };
  }
  auto summary = Prepare(opts, **tok);
  progress_line.Finish();
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
  std::printf(
      "manifest %s (%.2f s, %.1f MB/s of text, %d thread(s))\n", summary->manifest_path.c_str(),
      secs, secs > 0 ? static_cast<double>(summary->input_bytes) / 1e6 / secs : 0.0, opts.threads);
  return 0;
}

int CmdInspect(const CLI::App& cmd, const Flags& f) {
  const int64_t vocab = f.vocab_n, eot = f.eot_n;
  auto paths = ExpandShardPaths(f.shards);
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

int CmdDigestBench(const Flags& f) {
  const int64_t n = f.bench_tokens_n;
  const std::string dir = f.out.empty() ? "/tmp" : f.out;
  const std::string path = dir + "/rdattn_digest_bench_" + std::to_string(::getpid()) + ".bin";
  {
    auto w = ShardWriter::Create(path);
    if (!w.ok()) return Fail(w.status());
    std::vector<uint32_t> block(1 << 20);
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (int64_t done = 0; done < n;) {
      const size_t k = static_cast<size_t>(std::min<int64_t>(n - done, 1 << 20));
      for (size_t i = 0; i < k; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        block[i] = static_cast<uint32_t>(x % 50257);
      }
      if (Status st = w->Append(block.data(), k); !st.ok()) return Fail(st);
      done += static_cast<int64_t>(k);
    }
    if (Status st = w->Commit(); !st.ok()) return Fail(st);
  }
  auto best = [](auto fn) {  // the fastest of 5 runs, in seconds (page cache warm)
    double b = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      b = std::min(b, Seconds(t0, std::chrono::steady_clock::now()));
    }
    return b;
  };
  int rc = 0;
  std::string d_map, d_read;
  const double open_s = best([&] {
    if (!Shard::Open(path, 50257).ok()) rc = 1;
  });
  auto shard = Shard::Open(path, 50257);
  if (!shard.ok() || rc != 0) {
    ::unlink(path.c_str());
    return Fail(shard.ok() ? InternalError(path + ": open failed") : shard.status());
  }
  const double map_s = best([&] { d_map = DigestOfShard(*shard); });
  const double read_s = best([&] {
    auto d = FileDigest(path);
    d_read = d.ok() ? *d : d.status().message();
  });
  const double gb = static_cast<double>(shard->file_bytes()) / 1e9;
  ::unlink(path.c_str());
  std::printf("digest bench: %lld tokens, %zu bytes, page cache warm, best of 5\n",
              static_cast<long long>(n), shard->file_bytes());
  std::printf("  open (mmap + token scan): %8.2f ms  %6.2f GB/s\n", open_s * 1e3, gb / open_s);
  std::printf("  digest of the map:        %8.2f ms  %6.2f GB/s  %s  (what the trainer adds)\n",
              map_s * 1e3, gb / map_s, d_map.c_str());
  std::printf("  digest by read(2):        %8.2f ms  %6.2f GB/s  %s\n", read_s * 1e3, gb / read_s,
              d_read.c_str());
  if (d_map != d_read) {
    std::fprintf(stderr, "rdattn-data: error: the two digests differ\n");
    return 1;
  }
  return 0;
}

int CmdDigest(const CLI::App& cmd, const Flags& f) {
  if (cmd.count("--bench-tokens") > 0) return CmdDigestBench(f);
  auto paths = ExpandShardPaths(f.shards);
  if (!paths.ok()) return Fail(paths.status());
  int bad = 0;
  for (const std::string& p : *paths) {
    auto shard = Shard::Open(p, 65536);
    if (!shard.ok()) {
      std::fprintf(stderr, "rdattn-data: error: %s\n", shard.status().message().c_str());
      ++bad;
      continue;
    }
    const std::string d = DigestOfShard(*shard);
    auto m = FindManifestEntry(p);
    std::string verdict;
    if (!m.ok()) {
      verdict = "manifest error: " + m.status().message();
      ++bad;
    } else if (!m->has_value()) {
      verdict = "no manifest lists it";
    } else if ((*m)->digest.empty()) {
      verdict = "manifest " + (*m)->manifest_path + " has no digest (older than digests)";
    } else if ((*m)->digest == d) {
      verdict = "ok (manifest " + (*m)->manifest_path + ")";
    } else {
      verdict = "DIFFERS from " + (*m)->digest + " in manifest " + (*m)->manifest_path;
      ++bad;
    }
    std::printf("%s %s %zu %s\n", p.c_str(), d.c_str(), shard->file_bytes(), verdict.c_str());
  }
  return bad == 0 ? 0 : 1;
}

int CmdEncode(const CLI::App& cmd, const Flags& f) {
  std::string vocab_path;
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = TokenizerFromFlags(cmd, f, &vocab_path);
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
  if (f.stats) {
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

int CmdDecode(const CLI::App& cmd, const Flags& f) {
  std::string vocab_path;
  auto tok = TokenizerFromFlags(cmd, f, &vocab_path);
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
  CLI::App app(
      "Corpus preparation and shard tools (README.md, docs/reproduction.md).\n"
      "Exit status: 0 ok, 1 error (message names the file or flag), 2 bad usage.",
      "rdattn-data");
  cli::Setup(app);
  Flags flags;
  AddCommands(app, flags);
  app.footer("`rdattn-data COMMAND --help` lists a command's flags.");
  std::vector<std::string> args = cli::DashSpelling(argc, argv);
  if (args.size() > 1 && args[1] == "help") args[1] = "--help";
  if (const int code = cli::Parse(app, args, kExitUsage); code >= 0) return code;
  const CLI::App& cmd = *app.get_subcommands().front();
  const std::string name = cmd.get_name();
  if (name == "prepare") return CmdPrepare(cmd, flags);
  if (name == "inspect") return CmdInspect(cmd, flags);
  if (name == "digest") return CmdDigest(cmd, flags);
  if (name == "encode") return CmdEncode(cmd, flags);
  return CmdDecode(cmd, flags);
}
