// Deterministic data order (ARCHITECTURE.md "Matched seeds"): the global batch at step k is a
// pure function of (data seed, k), independent of world size; rank r takes its slice. The
// validation set is one fixed list of windows, the same for every run of a sweep.
//
// A window is context+1 consecutive tokens of one shard (inputs and next-token targets), at
// stride `context`, so windows never overlap and never straddle two shards. Window w of the
// whole list is shard s's window w − (windows before s).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

#include "worker/data/shard.h"

namespace rdattn::trainer {

class WindowIndex {
 public:
  WindowIndex() = default;
  // `shards` must outlive the index.
  WindowIndex(std::vector<const data::Shard*> shards, int64_t context);
  int64_t size() const { return total_; }
  int64_t context() const { return context_; }
  // Copies window `w` (context+1 token ids) into `out`.
  void Copy(int64_t w, int64_t* out) const;

 private:
  std::vector<const data::Shard*> shards_;
  std::vector<int64_t> first_;  // first window index of each shard (prefix sums)
  int64_t context_ = 0;
  int64_t total_ = 0;
};

// The training order: epoch e visits every window once in the order of a Fisher–Yates
// permutation seeded by SplitMix64(data_seed, e). Sample g (global, 0-based) is position
// g mod M of epoch g / M. The global batch at step k is samples [k·B, (k+1)·B).
class Sampler {
 public:
  Sampler(int64_t num_windows, uint64_t data_seed, int64_t global_batch_sequences);
  // The window indices of the global batch at `step`.
  std::vector<int64_t> GlobalBatch(int64_t step) const;
  // Rank `rank`'s contiguous slice of the global batch (B / world windows).
  std::vector<int64_t> RankSlice(int64_t step, int rank, int world_size) const;
  int64_t num_windows() const { return num_windows_; }

 private:
  const std::vector<int64_t>& Epoch(int64_t e) const;
  int64_t num_windows_;
  uint64_t seed_;
  int64_t batch_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_perm_;
  mutable int64_t cached_epoch2_ = -1;  // a batch can straddle two epochs
  mutable std::vector<int64_t> cached_perm2_;
};

// The fixed evaluation list: the first `count` windows in shard order (all when count is 0 or
// exceeds the number available). Rank r evaluates entries r, r+W, r+2W, ….
std::vector<int64_t> EvalWindows(int64_t num_windows, int64_t count);

// The shards of a config field (glob patterns, in order), each token id checked against
// `vocab`. Errors are prefixed with `field` ("data.val_shards: ..."). None for no patterns.
StatusOr<std::vector<data::Shard>> OpenShards(const std::vector<std::string>& patterns,
                                              uint32_t vocab, const std::string& field);
// The shards as WindowIndex takes them; `shards` must outlive the result's users.
std::vector<const data::Shard*> Pointers(const std::vector<data::Shard>& shards);

// FNV-1a over the window count, the data seed and the first min(64, steps) global batches: the
// INIT event's data_order_checksum, equal for runs that see the same data in the same order.
uint64_t DataOrderChecksum(const Sampler& sampler, uint64_t seed, int64_t steps);

}  // namespace rdattn::trainer
