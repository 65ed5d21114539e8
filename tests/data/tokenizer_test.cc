#include "worker/data/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/data/test_util.h"
#include "worker/data/gpt2_tokenizer.h"

namespace rdattn::data {
namespace {

using Ids = std::vector<uint32_t>;

// Loads the GPT-2 tokenizer once per test process; a missing vocab.bpe is a failure.
const Gpt2Tokenizer* Gpt2() {
  static const Gpt2Tokenizer* tok = []() -> const Gpt2Tokenizer* {
    const std::string path = testing::VocabBpePath();
    auto t = Gpt2Tokenizer::Load(path);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString() << " (run scripts/fetch_data.sh)";
      return nullptr;
    }
    return std::move(t).value().release();
  }();
  return tok;
}

#define REQUIRE_GPT2(var)            \
  const Gpt2Tokenizer* var = Gpt2(); \
  ASSERT_NE(var, nullptr) << "GPT-2 tokenizer unavailable: run scripts/fetch_data.sh"

std::vector<std::string> Pieces(const Gpt2Tokenizer& t, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : t.PreTokenize(text)) out.emplace_back(p);
  return out;
}

// --- byte -------------------------------------------------------------------------------------

TEST(ByteTokenizerTest, RoundTripOfEveryByte) {
  auto t = MakeTokenizer("byte", "ignored");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->name(), "byte");
  EXPECT_EQ((*t)->vocab_size(), 257u);
  EXPECT_EQ((*t)->eot(), 256u);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "\xC3\x28 invalid utf-8 \xFF";
  const Ids ids = (*t)->Encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], static_cast<uint32_t>(b));
  EXPECT_EQ((*t)->Decode(ids), all);
  EXPECT_EQ((*t)->Decode({256}), "<|endoftext|>");
  EXPECT_EQ((*t)->Decode({257}), "\xEF\xBF\xBD");
  EXPECT_EQ((*t)->Encode("<|endoftext|>").size(), 13u);
  Ids appended = {256};
  (*t)->EncodeAppend("ab", &appended);
  EXPECT_EQ(appended, (Ids{256, 'a', 'b'}));
}

// --- MakeTokenizer errors -----------------------------------------------------------------------

TEST(MakeTokenizerTest, Errors) {
  auto unknown = MakeTokenizer("gpt4", "");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown tokenizer 'gpt4'"), std::string::npos);

  auto no_path = MakeTokenizer("gpt2", "");
  ASSERT_FALSE(no_path.ok());
  EXPECT_NE(no_path.status().message().find("vocab.bpe"), std::string::npos);

  testing::TempDir dir;
  auto missing = MakeTokenizer("gpt2", dir / "vocab.bpe");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir / "vocab.bpe"), std::string::npos)
      << missing.status().message();

  // One byte changed: the sha256 check names the file.
  std::string contents = testing::ReadFileBytes(testing::VocabBpePath());
  ASSERT_GT(contents.size(), 1000u);
  contents[500] = contents[500] == 'a' ? 'b' : 'a';
  testing::WriteFileBytes(dir / "tampered.bpe", contents);
  auto tampered = MakeTokenizer("gpt2", dir / "tampered.bpe");
  ASSERT_FALSE(tampered.ok());
  EXPECT_NE(tampered.status().message().find(dir / "tampered.bpe"), std::string::npos);
  EXPECT_NE(tampered.status().message().find("sha256"), std::string::npos)
      << tampered.status().message();
  EXPECT_NE(tampered.status().message().find(kGpt2VocabBpeSha256), std::string::npos);
}

TEST(MakeTokenizerTest, MalformedContentsNameTheLine) {
  auto bad = Gpt2Tokenizer::FromContents("#version: 0.2\n\xC4\xA0 t\nno_space_here\n", "test.bpe");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("test.bpe:3:"), std::string::npos)
      << bad.status().message();
  auto unknown = Gpt2Tokenizer::FromContents("#version: 0.2\nab c\n", "test.bpe");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("test.bpe:2:"), std::string::npos)
      << unknown.status().message();
  auto few = Gpt2Tokenizer::FromContents("#version: 0.2\n\xC4\xA0 t\n", "test.bpe");
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("expected 50000"), std::string::npos)
      << few.status().message();
}

// --- gpt2: reference ids (DATA.md; tiktoken and a Python reference agree) ---------------------

TEST(Gpt2TokenizerTest, ReferenceIds) {
  auto made = MakeTokenizer("gpt2", testing::VocabBpePath());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const Tokenizer& t = **made;
  EXPECT_EQ(t.name(), "gpt2");
  EXPECT_EQ(t.vocab_size(), 50257u);
  EXPECT_EQ(t.eot(), 50256u);
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"Hello world", {15496, 995}},
      {"Hello, world! It's 2024 and we're   testing  BPE's\n\nmerges.",
       {15496, 11,   995, 0,   632,   338, 48609, 290, 356, 821,  220,
        220,   4856, 220, 347, 11401, 338, 198,   198, 647, 3212, 13}},
      {" na\xC3\xAFve caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80",
       {41492, 40304, 10545, 251, 109, 12859, 105, 30325, 222}},
      {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
  };
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(t.Encode(text), want) << text;
    EXPECT_EQ(t.Decode(t.Encode(text)), text);
  }
  EXPECT_EQ(t.Decode({50256}), "<|endoftext|>");
  EXPECT_EQ(t.Decode({50257}), "\xEF\xBF\xBD");
  EXPECT_TRUE(t.Encode("").empty());
}

TEST(Gpt2TokenizerTest, VocabularyLayout) {
  REQUIRE_GPT2(t);
  EXPECT_EQ(t->TokenBytes(0), "!");
  EXPECT_EQ(t->TokenBytes(93), "~");
  EXPECT_EQ(t->TokenBytes(188), std::string(1, '\0'));
  EXPECT_EQ(t->TokenBytes(187), "\xFF");
  EXPECT_EQ(t->TokenBytes(220), " ");
  EXPECT_EQ(t->TokenBytes(198), "\n");
  EXPECT_EQ(t->TokenBytes(15496), "Hello");
  EXPECT_EQ(t->TokenBytes(50256), "<|endoftext|>");
  EXPECT_EQ(t->TokenOf(" world"), 995);
  // The special token's text is not an ordinary token.
  EXPECT_EQ(t->TokenOf("<|endoftext|>"), -1);
  size_t longest = 0;
  for (uint32_t id = 0; id < 50256; ++id) longest = std::max(longest, t->TokenBytes(id).size());
  EXPECT_EQ(longest, 128u);
}

TEST(Gpt2TokenizerTest, PreTokenizerRules) {
  REQUIRE_GPT2(t);
  EXPECT_EQ(Pieces(*t, "a   b"), (std::vector<std::string>{"a", "  ", " b"}));
  EXPECT_EQ(Pieces(*t, "x\n\n y"), (std::vector<std::string>{"x", "\n\n", " y"}));
  EXPECT_EQ(Pieces(*t, "don't"), (std::vector<std::string>{"don", "'t"}));
  EXPECT_EQ(Pieces(*t, "DON'T we'll"), (std::vector<std::string>{"DON", "'", "T", " we", "'ll"}));
  EXPECT_EQ(Pieces(*t, "abc123 ..."), (std::vector<std::string>{"abc", "123", " ..."}));
  EXPECT_EQ(Pieces(*t, "end  "), (std::vector<std::string>{"end", "  "}));
  // U+00A0 is \s; U+200B and U+FEFF are not; U+0085 is \s (as in tiktoken's Rust regex).
  EXPECT_EQ(Pieces(*t, "a\xC2\xA0z"), (std::vector<std::string>{"a", "\xC2\xA0", "z"}));
  EXPECT_EQ(Pieces(*t, "a\xE2\x80\x8Bz"), (std::vector<std::string>{"a", "\xE2\x80\x8B", "z"}));
  EXPECT_EQ(Pieces(*t, "a\xC2\x85z"), (std::vector<std::string>{"a", "\xC2\x85", "z"}));
  // \p{N} includes No: '\xC2\xBD' (1/2) is a number.
  EXPECT_EQ(Pieces(*t, "x \xC2\xBD"), (std::vector<std::string>{"x", " \xC2\xBD"}));
}

// --- invalid UTF-8: never crashes, lossless
// -------------------------------------------------------

TEST(Gpt2TokenizerTest, Utf8SequenceLength) {
  auto len = [](const std::string& s) {
    return internal::Utf8SequenceLength(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  };
  EXPECT_EQ(len("a"), 1u);
  EXPECT_EQ(len(std::string(1, '\0')), 1u);
  EXPECT_EQ(len("\xC3\xA9"), 2u);
  EXPECT_EQ(len("\xE6\x9D\xB1"), 3u);
  EXPECT_EQ(len("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(len("\xF4\x8F\xBF\xBF"), 4u);  // U+10FFFF
  EXPECT_EQ(len("\xC0\x80"), 0u);          // overlong
  EXPECT_EQ(len("\xC1\xBF"), 0u);          // overlong
  EXPECT_EQ(len("\xE0\x80\x80"), 0u);      // overlong
  EXPECT_EQ(len("\xED\xA0\x80"), 0u);      // surrogate U+D800
  EXPECT_EQ(len("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(len("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(len("\x80"), 0u);      // lone continuation
  EXPECT_EQ(len("\xE6\x9D"), 0u);  // truncated
  EXPECT_EQ(len(""), 0u);
}

TEST(Gpt2TokenizerTest, InvalidUtf8IsItsOwnPieceAndRoundTrips) {
  REQUIRE_GPT2(t);
  EXPECT_EQ(Pieces(*t,
                   "abc\xFF\xFE"
                   "def"),
            (std::vector<std::string>{"abc", "\xFF\xFE", "def"}));
  EXPECT_EQ(Pieces(*t, "a \xFF b"), (std::vector<std::string>{"a", " ", "\xFF", " b"}));
  for (const std::string& s :
       {std::string("\xFF"), std::string("caf\xE9"), std::string("\xED\xA0\x80x"),
        std::string("\xC0\x80"), std::string("\xE6\x9D"), std::string("a\0b", 3),
        std::string("\xF0\x9F\x98"), std::string("ok \xF0\x9F\x98\x80 \x80\x80")}) {
    const Ids ids = t->Encode(s);
    for (uint32_t id : ids) ASSERT_LT(id, 50256u);
    EXPECT_EQ(t->Decode(ids), s);
  }
  // Valid text around an invalid byte is tokenized as it would be on its own.
  EXPECT_EQ(t->Encode("Hello world\xFF"), (Ids{15496, 995, 187}));
}

TEST(Gpt2TokenizerTest, RandomBytesRoundTrip) {
  REQUIRE_GPT2(t);
  std::mt19937 rng(42);
  const std::string alphabet =
      std::string("ab 'sdll\n\t0123456789.,!?") + "\xC3\xA9\xE6\x9D\xB1\xF0\x9F\x98\x80\xFF\x80";
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s)
      c = (i % 2 == 0) ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    const Ids ids = t->Encode(s);
    ASSERT_EQ(t->Decode(ids), s) << "case " << i;
    std::string joined;
    for (std::string_view p : t->PreTokenize(s)) joined += p;
    ASSERT_EQ(joined, s);
  }
}

// --- BPE
// ------------------------------------------------------------------------------------------

TEST(Gpt2TokenizerTest, HeapBpeEqualsSimpleBpe) {
  REQUIRE_GPT2(t);
  std::mt19937 rng(3);
  const std::vector<std::string> words = {"the",  "tion", "ing", " of", "State",
                                          "ness", "a",    "aa",  "e",   "\xC3\xA9"};
  for (int i = 0; i < 2000; ++i) {
    std::string piece;
    const int kind = i % 4;
    const size_t n = 1 + rng() % 300;
    if (kind == 0) {
      for (size_t k = 0; k < n; ++k) piece.push_back(static_cast<char>(rng()));
    } else if (kind == 1) {
      for (size_t k = 0; k < n; ++k) piece.push_back(static_cast<char>('a' + rng() % 26));
    } else if (kind == 2) {
      piece.assign(n, "ae0 '"[rng() % 5]);
    } else {
      while (piece.size() < n) piece += words[rng() % words.size()];
    }
    Ids a, b;
    t->BpeSimple(piece, &a);
    t->BpeHeap(piece, &b);
    ASSERT_EQ(a, b) << "case " << i << " length " << piece.size();
  }
}

// tiktoken maps a piece that is itself a token straight to that token; GPT-2's original
// encoder.py always runs BPE. The two rules differ only for tokens whose own bytes BPE to
// something else, and GPT-2's vocabulary has none, so the ids equal encoder.py's as well.
TEST(Gpt2TokenizerTest, WholeTokenShortcutChangesNothing) {
  REQUIRE_GPT2(t);
  int differ = 0;
  for (uint32_t id = 0; id < 50256; ++id) {
    Ids ids;
    t->BpeSimple(t->TokenBytes(id), &ids);
    if (ids != Ids{id}) ++differ;
  }
  EXPECT_EQ(differ, 0);
}

TEST(Gpt2TokenizerTest, PathologicalInputsAreFastAndLossless) {
  REQUIRE_GPT2(t);
  for (const std::string& s :
       {std::string(1 << 20, ' '), std::string(1 << 20, 'a'), std::string(1 << 20, '7'),
        std::string(1 << 20, '\''), std::string(1 << 20, '\n'), std::string(1 << 19, '\xFF')}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = t->Encode(s);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(t->Decode(ids), s);
    EXPECT_LT(secs, 20.0) << "1 MiB of '" << s[0] << "' took " << secs << " s";
  }
}

TEST(Gpt2TokenizerTest, ConcurrentEncodeIsConsistent) {
  REQUIRE_GPT2(t);
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += "Fellow-Citizens " + std::to_string(i) + " of the Senate's word" +
            std::to_string(i % 97) + ". ";
  const Ids want = t->Encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back([&, k] { got[k] = t->Encode(text); });
  for (auto& th : threads) th.join();
  for (const Ids& g : got) EXPECT_EQ(g, want);
}

// --- the SOTU corpus (DATA.md: 2,074,288 tokens) -------------------------------------------------

TEST(Gpt2TokenizerTest, SotuCorpusTokenCountAndRoundTrip) {
  REQUIRE_GPT2(t);
  const std::string dir = testing::SotuDir();
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".txt") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 233u) << "run scripts/fetch_data.sh";
  // DATA.md's figure: every file with surrounding whitespace stripped, each followed by "\n"
  // (10,761,391 bytes). Joining the raw files with "\n" gives 10,761,645 bytes and 2,074,487
  // tokens (the same as js-tiktoken; see tiktoken_crosscheck.js).
  std::string stripped, raw;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string f = testing::ReadFileBytes(files[i]);
    const size_t b = f.find_first_not_of(" \t\n\r\f\v");
    const size_t e = f.find_last_not_of(" \t\n\r\f\v");
    stripped += (b == std::string::npos ? std::string() : f.substr(b, e - b + 1)) + "\n";
    if (i > 0) raw += "\n";
    raw += f;
  }
  ASSERT_EQ(stripped.size(), 10761391u);
  ASSERT_EQ(raw.size(), 10761645u);
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = t->Encode(stripped);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ids.size(), 2074288u);
  EXPECT_EQ(t->Decode(ids), stripped);
  const Ids raw_ids = t->Encode(raw);
  EXPECT_EQ(raw_ids.size(), 2074487u);
  std::printf("SOTU: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s, cold piece cache)\n",
              stripped.size(), ids.size(), secs, stripped.size() / 1e6 / secs);
  RecordProperty("sotu_tokens", static_cast<int>(ids.size()));
}

}  // namespace
}  // namespace rdattn::data
