#include "common/sha256.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tests/data/test_util.h"

namespace rdattn::data {
namespace {

// FIPS 180-4 / NIST CSRC example vectors.
TEST(Sha256Test, StandardVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklm"
                      "nopqklmnopqrl"
                      "mnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, MillionAStreamedInOddChunks) {
  for (size_t chunk : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 1000u, 4096u}) {
    Sha256 h;
    size_t left = 1000000;
    const std::string piece(chunk, 'a');
    while (left > 0) {
      const size_t n = std::min(left, chunk);
      h.Update(piece.data(), n);
      left -= n;
    }
    EXPECT_EQ(h.FinishHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        << "chunk " << chunk;
  }
}

// Streaming over random splits equals one shot, for every length around the padding edges.
TEST(Sha256Test, StreamingEqualsOneShot) {
  std::mt19937 rng(7);
  for (size_t len = 0; len <= 300; ++len) {
    std::string msg(len, '\0');
    for (char& c : msg) c = static_cast<char>(rng());
    const std::string want = Sha256Hex(msg);
    Sha256 h;
    size_t pos = 0;
    while (pos < len) {
      const size_t n = std::min<size_t>(len - pos, rng() % 80);
      h.Update(msg.data() + pos, n);
      pos += n;
    }
    ASSERT_EQ(h.FinishHex(), want) << "length " << len;
    // Finish() resets: the object hashes a new message correctly.
    h.Update("abc");
    ASSERT_EQ(h.FinishHex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
}

TEST(Sha256Test, DigestBytesAndHexAgree) {
  const Sha256Digest d = Sha256Of("abc");
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[31], 0xad);
  EXPECT_EQ(DigestHex(d), Sha256Hex("abc"));
}

TEST(Sha256Test, FileDigestAndMissingFile) {
  testing::TempDir dir;
  testing::WriteFileBytes(dir / "f.bin", std::string(3000000, 'a') + std::string("\0\r\n", 3));
  auto got = Sha256HexOfFile(dir / "f.bin");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, Sha256Hex(std::string(3000000, 'a') + std::string("\0\r\n", 3)));
  auto missing = Sha256HexOfFile(dir / "nope.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos)
      << missing.status().message();
}

TEST(Sha256Test, FetchedVocabBpeHasThePinnedDigest) {
  auto got = Sha256HexOfFile(testing::VocabBpePath());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5");
}

}  // namespace
}  // namespace rdattn::data
