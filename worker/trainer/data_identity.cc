#include "worker/trainer/data_identity.h"

namespace rdattn::trainer {

nlohmann::json WithShardDigests(nlohmann::json init,
                                const std::vector<data::ShardDigest>& digests) {
  if (digests.empty()) return init;
  nlohmann::json list = nlohmann::json::array();
  for (const data::ShardDigest& d : digests) {
    list.push_back({{"role", d.role}, {"path", d.path}, {"digest", d.digest}, {"bytes", d.bytes}});
  }
  init["shard_digests"] = std::move(list);
  init["data_digest"] = data::DataDigest(digests);
  return init;
}

std::vector<const data::Shard*> AllShards(const std::vector<data::Shard>& train,
                                          const std::vector<data::Shard>& val,
                                          const std::vector<data::Shard>& test) {
  std::vector<const data::Shard*> out;
  for (const auto* list : {&train, &val, &test})
    for (const data::Shard& s : *list) out.push_back(&s);
  return out;
}

}  // namespace rdattn::trainer
