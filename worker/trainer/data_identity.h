// The trainer's side of data identity (docs/operations.md "Data identity"): the shard digests in
// the INIT event, and the list of every shard a run opened (for the check, before each result is
// reported, that none changed on disk). The digests themselves: worker/data/shard_digest.h.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "worker/data/shard.h"
#include "worker/data/shard_digest.h"

namespace rdattn::trainer {

// `init` (an INIT event's fields) with shard_digests (role, path, digest, bytes, in order) and
// data_digest (data::DataDigest) added; unchanged when `digests` is empty.
nlohmann::json WithShardDigests(nlohmann::json init, const std::vector<data::ShardDigest>& digests);

// Every shard of the run: train, then val, then test. The shards must outlive the result.
std::vector<const data::Shard*> AllShards(const std::vector<data::Shard>& train,
                                          const std::vector<data::Shard>& val,
                                          const std::vector<data::Shard>& test);

}  // namespace rdattn::trainer
