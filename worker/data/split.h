// Deterministic train/val/test assignment of documents by a stable hash of their id.
#pragma once

#include <string_view>

namespace rdattn::data {

enum class Split { kTrain, kVal, kTest };

// "train", "val", "test".
std::string_view SplitName(Split split);

// The bucket of a document id, 0..999: the SHA-256 digest of the id's bytes (exactly as given,
// no normalisation) read as one 256-bit big-endian unsigned integer, reduced mod 1000 exactly
// (Horner's rule over the 32 bytes: r = (r * 256 + byte) mod 1000). Python equivalent:
//   int.from_bytes(hashlib.sha256(id.encode()).digest(), "big") % 1000
int SplitBucket(std::string_view id);

// Bucket < 990 -> train (99%), 990..994 -> val (0.5%), 995..999 -> test (0.5%).
// A pure function of the id: the same on every machine, run and world size.
Split SplitOfDocument(std::string_view id);

}  // namespace rdattn::data
