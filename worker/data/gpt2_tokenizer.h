// GPT-2 byte-level BPE (tiktoken "gpt2" / "r50k_base", encode_ordinary), built from vocab.bpe.
//
// Encode(text):
//  1. The text is split into maximal runs of well-formed UTF-8 (Unicode Table 3-7: no
//     overlongs, surrogates or code points above U+10FFFF) and maximal runs of bytes that are not.
//     Well-formed input is a single run, so the usual case is exactly tiktoken's.
//  2. Each well-formed run is pre-tokenized with PCRE2 (UTF | UCP, JIT) using GPT-2's pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     PCRE2_NO_UTF_CHECK is passed on every call after the first one of a run: without it every
//     call re-validates the whole buffer and the loop is O(n^2) (DATA.md).
//     Each run of invalid bytes is one piece of its own. So invalid UTF-8 never fails and
//     never crashes, and no byte is lost or replaced: Decode(Encode(x)) == x for all x. (An
//     invalid run acts like an end of text for the pattern on both sides; tiktoken itself only
//     accepts valid strings, so there is no reference to match there.)
//  3. Each piece that is itself a token becomes that token (tiktoken's shortcut); otherwise
//     byte-level BPE merges the adjacent pair of lowest rank, leftmost first, until none has a
//     rank. Results for short pieces are cached, one cache per thread (no lock between the
//     threads of `prepare --threads`; each holds at most kMaxCacheEntries pieces).
//
// LastCutPoint: a cut between an ASCII graphic character and " x" (an ASCII space, then an
// ASCII letter) changes no piece: the piece before it ends there (no alternative crosses an
// ASCII space except ` ?\p{L}+`, which starts at it, and \s+(?!\S) is not involved), and the
// piece after it is ` ?\p{L}+` in both cases. All three bytes are ASCII, so the UTF-8 runs of
// step 1 are cut at the same place too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "worker/data/tokenizer.h"

namespace rdattn::data {

namespace internal {
// Length of the well-formed UTF-8 sequence starting at p[0] (1..4), or 0 when p[0..n) does not
// start with one.
size_t Utf8SequenceLength(const unsigned char* p, size_t n);
// Splits text into alternating maximal runs: {bytes, well_formed}. Concatenation == text.
struct Utf8Run {
  std::string_view bytes;
  bool well_formed;
};
std::vector<Utf8Run> SplitUtf8Runs(std::string_view text);
}  // namespace internal

class Gpt2Tokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kVocabSize = 50257;
  static constexpr uint32_t kEot = 50256;
  static constexpr int kNumMerges = 50000;

  // Reads vocab.bpe (binary), checks its sha256 against kGpt2VocabBpeSha256 and builds the
  // tables. Errors name the file.
  static StatusOr<std::unique_ptr<Gpt2Tokenizer>> Load(const std::string& vocab_bpe_path);
  // Builds from vocab.bpe contents without the sha256 check (tests; `source` names it in errors).
  static StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromContents(std::string_view contents,
                                                               const std::string& source);
  ~Gpt2Tokenizer() override;

  std::vector<uint32_t> Encode(std::string_view text) const override;
  void EncodeAppend(std::string_view text, std::vector<uint32_t>* out) const override;
  std::string Decode(const std::vector<uint32_t>& ids) const override;
  size_t LastCutPoint(std::string_view text, size_t lo) const override;
  uint32_t eot() const override { return kEot; }
  uint32_t vocab_size() const override { return kVocabSize; }
  std::string name() const override { return "gpt2"; }

  // --- exposed for tests and tools ---
  // The pre-tokenizer pieces of text (step 1 and 2 above); concatenation == text.
  std::vector<std::string_view> PreTokenize(std::string_view text) const;
  // BPE of one piece, without the cache or the whole-token shortcut. Simple: O(n^2) loop,
  // like tiktoken. Heap: O(n log n) with a priority queue, used for long pieces. They agree.
  void BpeSimple(std::string_view piece, std::vector<uint32_t>* out) const;
  void BpeHeap(std::string_view piece, std::vector<uint32_t>* out) const;
  // The bytes of a token id (id < kVocabSize).
  const std::string& TokenBytes(uint32_t id) const { return id_to_bytes_[id]; }
  // The id of a byte string that is exactly one token, or -1.
  int64_t TokenOf(std::string_view bytes) const;

 private:
  Gpt2Tokenizer();
  Status Build(std::string_view contents, const std::string& source);
  Status CompilePattern();
  void EncodePiece(std::string_view piece, std::vector<uint32_t>* out) const;
  // Merged id of the pair (a, b), or -1 when the pair is not a merge.
  int64_t MergeOf(uint32_t a, uint32_t b) const;

  uint32_t byte_to_id_[256];
  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string_view, uint32_t> bytes_to_id_;  // views into id_to_bytes_
  // Open-addressing table: key (a << 32 | b) + 1 (0 = empty) -> merged id.
  std::vector<uint64_t> merge_keys_;
  std::vector<uint32_t> merge_vals_;
  uint64_t merge_mask_ = 0;

  struct Pcre;  // pcre2 code (shared; matching allocates per-call match data)
  std::unique_ptr<Pcre> pcre_;

  // Identifies this tokenizer to the per-thread caches (a new tokenizer at a reused address
  // must not see another's cache).
  const uint64_t instance_id_;
};

}  // namespace rdattn::data
