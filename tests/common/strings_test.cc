// common/strings: the shared helpers, with their edge cases.
#include "common/strings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace rdattn::strings {
namespace {

TEST(StringsTest, Trim) {
  EXPECT_EQ(Trim(""), "");
  EXPECT_EQ(Trim(" \t\r\n"), "");
  EXPECT_EQ(Trim("abc"), "abc");
  EXPECT_EQ(Trim("  a b\t\n"), "a b");
  EXPECT_EQ(Trim("\ttoken\r\n"), "token");
  EXPECT_EQ(Trim("x "), "x");
  EXPECT_EQ(Trim(" x"), "x");
}

TEST(StringsTest, Quote) {
  EXPECT_EQ(Quote("pocok"), "'pocok'");
  EXPECT_EQ(Quote(""), "''");
}

TEST(StringsTest, Fixed) {
  EXPECT_EQ(Fixed(0.0304, 3), "0.030");
  EXPECT_EQ(Fixed(-0.0255, 2), "-0.03");
  EXPECT_EQ(Fixed(2.5, 0), "2");  // round half to even, as printf
  EXPECT_EQ(Fixed(1234567.891, 1), "1234567.9");
  EXPECT_EQ(Fixed(1e300, 0).size(), 301u);  // no truncation at a fixed buffer size
  EXPECT_EQ(Fixed(std::nan(""), 3), "nan");
  EXPECT_EQ(Fixed(std::numeric_limits<double>::infinity(), 3), "inf");
  EXPECT_EQ(Fixed(-std::numeric_limits<double>::infinity(), 3), "-inf");
}

TEST(StringsTest, Fnv1a64KnownValues) {
  // Reference values of 64-bit FNV-1a (the published test vectors).
  EXPECT_EQ(Fnv1a64().value(), 0xcbf29ce484222325ULL);
  Fnv1a64 a;
  a.Mix("a");
  EXPECT_EQ(a.value(), 0xaf63dc4c8601ec8cULL);
  Fnv1a64 foobar;
  foobar.Mix("foobar");
  EXPECT_EQ(foobar.value(), 0x85944171f73967e8ULL);
  // Mixing in pieces equals mixing at once.
  Fnv1a64 pieces;
  pieces.Mix("foo");
  pieces.Mix("bar");
  EXPECT_EQ(pieces.value(), foobar.value());
  // MixLittleEndian is the 8 bytes low first.
  Fnv1a64 le, bytes;
  le.MixLittleEndian(0x0102030405060708ULL);
  const unsigned char b[8] = {8, 7, 6, 5, 4, 3, 2, 1};
  bytes.Mix(b, 8);
  EXPECT_EQ(le.value(), bytes.value());
}

}  // namespace
}  // namespace rdattn::strings
