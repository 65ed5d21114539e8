// The sweep the coordinator tests submit: one scale of the tiny byte-level model, |seeds| x
// {block, rd}, valid as it stands (tests break one field of it to check an error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator::testing {

inline ::rdattn::v1::SweepSpec TinySweep(const std::vector<uint64_t>& seeds = {1, 2},
                                         int max_attempts = 2,
                                         const std::vector<int64_t>& milestones_tokens = {6144,
                                                                                          12288},
                                         const std::string& name = "tiny-test") {
  ::rdattn::v1::SweepSpec s;
  s.set_name(name);
  ::rdattn::v1::ScaleSpec* scale = s.add_scales();
  scale->set_name("tiny");
  scale->set_preset("tiny");
  s.add_arms("block");
  s.add_arms("rd");
  for (uint64_t seed : seeds) s.add_seeds(seed);
  s.mutable_data()->add_train_shards("/data/train_*.bin");
  s.mutable_data()->add_val_shards("/data/val.bin");
  s.mutable_data()->set_tokenizer("byte");
  s.mutable_data()->set_val_windows(16);
  s.mutable_optim()->set_peak_lr(0.003);
  s.mutable_optim()->set_warmup_steps(2);
  s.mutable_schedule()->set_total_tokens(12288);
  s.mutable_schedule()->set_global_batch_tokens(512);
  s.mutable_schedule()->set_micro_batch_sequences(8);
  for (int64_t m : milestones_tokens) s.mutable_schedule()->add_milestones_tokens(m);
  s.mutable_parallel()->set_world_size(1);
  s.set_max_attempts(max_attempts);
  return s;
}

}  // namespace rdattn::coordinator::testing
