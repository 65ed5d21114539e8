// --mpi-step: the data-parallel training step of rdattn-train, split into its parts, under
// `mpirun -np 2` (bench_common.h). Per step and rank, as in worker/trainer/trainer.cc:
//   data      the rank's windows of the global batch from trainer::Sampler::RankSlice, copied
//             out of a memory-mapped llm.c shard (trainer::WindowIndex) into a tensor;
//   compute   zero_grad, forward, loss, backward;
//   allreduce comm::GradientBuckets::AllReduceMean (25 MiB buckets, in place, as rdattn-train)
//             over the MPI communicator;
//   optimizer the trainer's ClipGradients(1.0) and AdamW::Step.
// Rank 0 prints one line "RDATTN_BENCH_MPI {json}" with the medians over the timed steps.
#include <torch/types.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runspec/run_config.h"
#include "tests/bench/bench_common.h"
#include "worker/comm/buckets.h"
#include "worker/comm/communicator.h"
#include "worker/data/shard.h"
#include "worker/trainer/optimizer.h"
#include "worker/trainer/runtime.h"
#include "worker/trainer/sampler.h"
#include "worker/trainer/train_step.h"

namespace rdattn::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The trainer's MakeBatch (an anonymous-namespace function of worker/trainer/trainer.cc).
at::Tensor MakeBatch(const trainer::WindowIndex& index, const std::vector<int64_t>& windows) {
  const int64_t n = static_cast<int64_t>(windows.size()), w = index.context() + 1;
  at::Tensor batch = at::empty({n, w}, at::TensorOptions().dtype(at::kLong));
  int64_t* out = batch.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) index.Copy(windows[static_cast<size_t>(i)], out + i * w);
  return batch;
}

int Fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rdattn_model_bench --mpi-step (rank %d): %s\n", rank, what.c_str());
  return 1;
}

}  // namespace

int MpiStepMain(const MpiOptions& o) {
  auto made = comm::MakeCommunicator(Backend::kMpi, Device::kCpu);
  if (!made.ok()) return Fail(-1, made.status().ToString());
  comm::Communicator& comm = **made;
  const int rank = comm.rank(), world = comm.world_size();
  at::set_num_threads(static_cast<int>(o.threads));
  trainer::RetainFreedHostMemory();  // as rdattn-train does
  if (o.global_batch % world != 0)
    return Fail(rank, "--mpi-batch " + std::to_string(o.global_batch) +
                          " is not divisible by the world size " + std::to_string(world));
  const auto base = *model::Preset(o.preset, model::Arm::kBlock);
  const int64_t T = base.context;

  // A synthetic shard (uniform random tokens), one per rank so that no rank waits for another's
  // file; the same seed, so the ranks see identical data as with a shared shard.
  const int64_t windows_needed = (o.warmup + o.steps) * o.global_batch + 8;
  std::vector<uint32_t> ids(static_cast<size_t>(windows_needed * T + 1));
  std::mt19937_64 rng(12345);
  for (auto& id : ids) id = static_cast<uint32_t>(rng() % static_cast<uint64_t>(base.vocab_size));
  const std::string path = "/tmp/rdattn-bench-mpi-" + std::to_string(getpid()) + ".bin";
  if (Status s = data::WriteShard(path, ids); !s.ok()) return Fail(rank, s.ToString());
  auto shard = data::Shard::Open(path, static_cast<uint32_t>(base.vocab_size));
  unlink(path.c_str());  // the mapping stays valid
  if (!shard.ok()) return Fail(rank, shard.status().ToString());
  const trainer::WindowIndex index({&*shard}, T);
  const trainer::Sampler sampler(index.size(), 1, o.global_batch);

  nlohmann::json arms = nlohmann::json::object();
  const DeviceSpec cpu;
  for (model::Arm arm : o.arms) {
    const auto cfg = *model::Preset(o.preset, arm);
    model::Gpt m(cfg, 0);
    std::vector<at::Tensor> params = m->parameters();
    if (Status s = comm::BroadcastAndVerify(comm, params); !s.ok()) return Fail(rank, s.ToString());
    auto opt = MakeAdamW(m);
    comm::GradientBuckets buckets(params, comm::kDefaultBucketBytes);  // as rdattn-train's
    std::vector<double> data_s, compute_s, allreduce_s, optimizer_s, step_s;
    for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
      const auto t0 = Clock::now();
      const at::Tensor batch = MakeBatch(index, sampler.RankSlice(step, rank, world));
      const auto t1 = Clock::now();
      trainer::ZeroGradients(*opt, buckets);  // as rdattn-train
      ForwardBackward(m, batch, cpu);
      const auto t2 = Clock::now();
      if (Status s = buckets.AllReduceMean(comm); !s.ok()) return Fail(rank, s.ToString());
      const auto t3 = Clock::now();
      trainer::ClipGradients(params, 1.0);  // as rdattn-train clips and steps
      opt->Step();
      const auto t4 = Clock::now();
      if (step < o.warmup) continue;
      data_s.push_back(Seconds(t0, t1));
      compute_s.push_back(Seconds(t1, t2));
      allreduce_s.push_back(Seconds(t2, t3));
      optimizer_s.push_back(Seconds(t3, t4));
      step_s.push_back(Seconds(t0, t4));
    }
    const double step_med = Median(step_s);
    arms[std::string(model::ArmName(arm))] = {
        {"step_seconds", step_med},
        {"data_seconds", Median(data_s)},
        {"compute_seconds", Median(compute_s)},
        {"allreduce_seconds", Median(allreduce_s)},
        {"optimizer_seconds", Median(optimizer_s)},
        {"tokens_per_second", static_cast<double>(o.global_batch * T) / step_med},
        {"gradient_bytes", [&] {
           int64_t b = 0;
           for (const auto& p : params) b += p.numel() * static_cast<int64_t>(p.element_size());
           return b;
         }()}};
  }
  if (Status s = comm.Barrier(); !s.ok()) return Fail(rank, s.ToString());
  if (rank == 0) {
    const nlohmann::json out = {{"world_size", world},
                                {"backend", comm.backend()},
                                {"preset", o.preset},
                                {"global_batch_sequences", o.global_batch},
                                {"threads_per_rank", o.threads},
                                {"timed_steps", o.steps},
                                {"warmup_steps", o.warmup},
                                {"measured_on", "rank 0"},
                                {"arms", arms}};
    std::printf("RDATTN_BENCH_MPI %s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace rdattn::bench
