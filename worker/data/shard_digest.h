// Data identity (docs/operations.md "Data identity"): a shard is named by its path but
// identified by its content. The trainer digests every shard it opens (XXH3-64 of the whole
// file, common/digest.h), checks the digest against the manifest that `rdattn-data prepare`
// wrote into the shard's folder (when there is one and it lists the shard), records every digest
// in its INIT event (MetricEvent.shard_digests, data_digest), and before it reports a result
// checks that no shard it opened has been changed on disk since (a rewrite in place shows through
// the memory map, so the tokens trained on would no longer be the ones digested).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/shard.h"

namespace rdattn::data {

// One shard a run read: MetricEvent.ShardDigest.
struct ShardDigest {
  std::string role;    // "train", "val" or "test"
  std::string path;    // as the run names it after glob expansion
  std::string digest;  // "xxh3:<16 hex>" (DigestText) of the whole file
  int64_t bytes = 0;   // file size
};

// The digest of an open shard's bytes as mapped (header and tokens): equal to
// FileDigest(shard.path()) while the file is unchanged.
std::string DigestOfShard(const Shard& shard);

// What a manifest says about one shard file.
struct ManifestShard {
  std::string manifest_path;  // the *.manifest.json that lists it
  std::string digest;         // empty: the manifest predates digests (unknown)
  int64_t bytes = -1;         // -1: not recorded
};

// Looks in the folder of `shard_path` for *.manifest.json files (rdattn-data prepare's
// "<prefix>.manifest.json") and returns the entry of the one whose splits list the shard's file
// name. None: no manifest in the folder lists it. A manifest that cannot be read or parsed, or
// two manifests that list the same file, are errors naming the manifest(s).
StatusOr<std::optional<ManifestShard>> FindManifestEntry(const std::string& shard_path);

// Digests `shard` and checks it against its manifest entry (when found and it has a digest). The
// error (DATA_LOSS) names the shard, the manifest, the manifest's digest and the computed one.
StatusOr<ShardDigest> DigestAndVerify(const Shard& shard, const std::string& role);

// The digests of a run's shards in the order given (train, then val, then test).
StatusOr<std::vector<ShardDigest>> DigestAndVerifyAll(const std::vector<Shard>& train,
                                                      const std::vector<Shard>& val,
                                                      const std::vector<Shard>& test);

// One digest over the ordered list: XXH3-64 of every entry's role, digest and size (not its
// path: the same bytes under another folder are the same data). "xxh3:<16 hex>"; "" for none.
std::string DataDigest(const std::vector<ShardDigest>& shards);

// OK while every shard's file still has the identity and times it had when it was opened. When
// they moved and `at_open` holds the shards' digests at open (same order), the file on disk is
// digested again: the same content (a touch, a chmod, a copy of the same bytes renamed over it)
// is no change. Otherwise FAILED_PRECONDITION naming the first changed shard: "<path>: the shard
// changed on disk while this run read it (...)", with both digests when known. A missing file is
// an error too.
Status CheckShardsUnchanged(const std::vector<const Shard*>& shards,
                            const std::vector<ShardDigest>& at_open = {});

}  // namespace rdattn::data
