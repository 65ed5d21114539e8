#include "worker/data/tokenizer.h"

#include <algorithm>

#include "worker/data/gpt2_tokenizer.h"

namespace rdattn::data {
namespace {

// ids 0..255 are the bytes, 256 is EOT.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<uint32_t> Encode(std::string_view text) const override {
    std::vector<uint32_t> out;
    EncodeAppend(text, &out);
    return out;
  }
  void EncodeAppend(std::string_view text, std::vector<uint32_t>* out) const override {
    out->reserve(out->size() + text.size());
    for (unsigned char c : text) out->push_back(c);
  }
  std::string Decode(const std::vector<uint32_t>& ids) const override {
    std::string s;
    s.reserve(ids.size());
    for (uint32_t id : ids) {
      if (id < 256) {
        s.push_back(static_cast<char>(id));
      } else if (id == 256) {
        s += "<|endoftext|>";
      } else {
        s += "\xEF\xBF\xBD";
      }
    }
    return s;
  }
  // Every byte is its own id: any point cuts.
  size_t LastCutPoint(std::string_view text, size_t lo) const override {
    return text.size() >= std::max<size_t>(lo, 1) ? text.size() : 0;
  }
  uint32_t eot() const override { return 256; }
  uint32_t vocab_size() const override { return 257; }
  std::string name() const override { return "byte"; }
};

}  // namespace

void Tokenizer::EncodeAppend(std::string_view text, std::vector<uint32_t>* out) const {
  const std::vector<uint32_t> ids = Encode(text);
  out->insert(out->end(), ids.begin(), ids.end());
}

size_t Tokenizer::LastCutPoint(std::string_view /*text*/, size_t /*lo*/) const { return 0; }

StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& name,
                                                   const std::string& gpt2_vocab_bpe_path) {
  if (name == "byte") return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  if (name == "gpt2") {
    if (gpt2_vocab_bpe_path.empty()) {
      return InvalidArgumentError("tokenizer gpt2 needs the path of GPT-2's vocab.bpe");
    }
    RDATTN_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Tokenizer> t,
                            Gpt2Tokenizer::Load(gpt2_vocab_bpe_path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  return InvalidArgumentError("unknown tokenizer '" + name + "' (expected gpt2 or byte)");
}

}  // namespace rdattn::data
