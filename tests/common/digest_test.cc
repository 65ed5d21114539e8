#include "common/digest.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace rdattn {
namespace {

TEST(DigestTest, KnownValues) {
  // XXH3-64 reference values (seed 0) from xxHash's own sanity tests.
  EXPECT_EQ(Xxh3("", 0), 0x2D06800538D394C2ULL);
  EXPECT_EQ(DigestText(Xxh3("", 0)), "xxh3:2d06800538d394c2");
  EXPECT_EQ(DigestText(1), "xxh3:0000000000000001");
}

TEST(DigestTest, StreamEqualsOneShot) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += static_cast<char>('a' + i % 26);
  Xxh3Stream s;
  s.Update(text.substr(0, 7));
  s.Update(text.substr(7, 40000));
  s.Update(text.substr(40007));
  EXPECT_EQ(s.Digest(), Xxh3(text));
  std::string other = text;
  other[50000] ^= 1;  // one flipped bit changes the digest
  EXPECT_NE(Xxh3(other), Xxh3(text));
}

TEST(DigestTest, FileDigest) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("rdattn-digest-" + std::to_string(::getpid())))
          .string();
  std::string text(9 << 20, 'x');  // over two 4 MiB blocks
  text[5 << 20] = 'y';
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  int64_t bytes = 0;
  StatusOr<std::string> d = FileDigest(path, &bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, DigestText(Xxh3(text)));
  EXPECT_EQ(bytes, static_cast<int64_t>(text.size()));
  std::remove(path.c_str());
  StatusOr<std::string> gone = FileDigest(path);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace rdattn
