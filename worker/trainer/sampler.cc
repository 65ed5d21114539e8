#include "worker/trainer/sampler.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "common/splitmix64.h"
#include "common/strings.h"

namespace rdattn::trainer {
namespace {

// Unbiased integer in [0, n) (Lemire's rejection on 64-bit products would need 128-bit
// arithmetic; plain rejection sampling is simple and exact).
uint64_t Below(uint64_t n, SplitMix64& rng) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = rng.Next();
  } while (x >= limit);
  return x % n;
}

}  // namespace

WindowIndex::WindowIndex(std::vector<const data::Shard*> shards, int64_t context)
    : shards_(std::move(shards)), context_(context) {
  for (const data::Shard* s : shards_) {
    first_.push_back(total_);
    const int64_t n = s->size();
    total_ += n > context_ ? (n - 1) / context_ : 0;
  }
}

void WindowIndex::Copy(int64_t w, int64_t* out) const {
  if (w < 0 || w >= total_) throw std::out_of_range("window index out of range");
  const size_t s =
      static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), w) - first_.begin() - 1);
  const uint16_t* tokens = shards_[s]->tokens() + (w - first_[s]) * context_;
  for (int64_t i = 0; i <= context_; ++i) out[i] = tokens[i];
}

Sampler::Sampler(int64_t num_windows, uint64_t data_seed, int64_t global_batch_sequences)
    : num_windows_(num_windows), seed_(data_seed), batch_(global_batch_sequences) {
  if (num_windows_ <= 0) throw std::invalid_argument("sampler needs at least one window");
}

const std::vector<int64_t>& Sampler::Epoch(int64_t e) const {
  if (e == cached_epoch_) return cached_perm_;
  if (e == cached_epoch2_) return cached_perm2_;
  // Keep the most recent two epochs (a batch may straddle an epoch boundary).
  cached_perm2_.swap(cached_perm_);
  cached_epoch2_ = cached_epoch_;
  cached_perm_.resize(static_cast<size_t>(num_windows_));
  for (int64_t i = 0; i < num_windows_; ++i) cached_perm_[static_cast<size_t>(i)] = i;
  SplitMix64 rng(seed_ ^ (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(e + 1)));
  for (int64_t i = num_windows_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(Below(static_cast<uint64_t>(i + 1), rng));
    std::swap(cached_perm_[static_cast<size_t>(i)], cached_perm_[static_cast<size_t>(j)]);
  }
  cached_epoch_ = e;
  return cached_perm_;
}

std::vector<int64_t> Sampler::GlobalBatch(int64_t step) const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(batch_));
  for (int64_t i = 0; i < batch_; ++i) {
    const int64_t g = step * batch_ + i;
    out.push_back(Epoch(g / num_windows_)[static_cast<size_t>(g % num_windows_)]);
  }
  return out;
}

std::vector<int64_t> Sampler::RankSlice(int64_t step, int rank, int world_size) const {
  const std::vector<int64_t> all = GlobalBatch(step);
  const int64_t per = batch_ / world_size;
  return std::vector<int64_t>(all.begin() + rank * per, all.begin() + (rank + 1) * per);
}

std::vector<int64_t> EvalWindows(int64_t num_windows, int64_t count) {
  const int64_t n = (count <= 0 || count > num_windows) ? num_windows : count;
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
  return out;
}

StatusOr<std::vector<data::Shard>> OpenShards(const std::vector<std::string>& patterns,
                                              uint32_t vocab, const std::string& field) {
  std::vector<data::Shard> shards;
  if (patterns.empty()) return shards;
  auto paths = data::ExpandShardPaths(patterns);
  if (!paths.ok()) return paths.status().WithPrefix(field);
  for (const auto& path : *paths) {
    auto shard = data::Shard::Open(path, vocab);
    if (!shard.ok()) return shard.status().WithPrefix(field);
    shards.push_back(std::move(shard).value());
  }
  return shards;
}

std::vector<const data::Shard*> Pointers(const std::vector<data::Shard>& shards) {
  std::vector<const data::Shard*> out;
  out.reserve(shards.size());
  for (const auto& s : shards) out.push_back(&s);
  return out;
}

uint64_t DataOrderChecksum(const Sampler& sampler, uint64_t seed, int64_t steps) {
  strings::Fnv1a64 h(strings::Fnv1a64::kRdattnChecksumBasis);
  h.MixLittleEndian(static_cast<uint64_t>(sampler.num_windows()));
  h.MixLittleEndian(seed);
  for (int64_t k = 0; k < std::min<int64_t>(steps, 64); ++k)
    for (int64_t w : sampler.GlobalBatch(k)) h.MixLittleEndian(static_cast<uint64_t>(w));
  return h.value();
}

}  // namespace rdattn::trainer
