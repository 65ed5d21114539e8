#include "worker/data/split.h"

#include "common/sha256.h"

namespace rdattn::data {

std::string_view SplitName(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kVal:
      return "val";
    case Split::kTest:
      return "test";
  }
  return "?";
}

int SplitBucket(std::string_view id) {
  const Sha256Digest d = Sha256Of(id);
  uint32_t r = 0;
  for (uint8_t byte : d) r = (r * 256 + byte) % 1000;
  return static_cast<int>(r);
}

Split SplitOfDocument(std::string_view id) {
  const int b = SplitBucket(id);
  if (b < 990) return Split::kTrain;
  if (b < 995) return Split::kVal;
  return Split::kTest;
}

}  // namespace rdattn::data
