// rdattn_comm_bench: all-reduce time of float32 buffers (1, 4 and 25 MiB) and of bucketed
// gradient averaging, through the Communicator. A benchmark target, not a test:
//   mpirun -np 2 build/tests/comm/rdattn_comm_bench [--iters N] [--backend mpi|auto|nccl]
// Each iteration is Barrier, then the timed call; an iteration's time is the slowest rank's.
// Rank 0 prints the median and minimum over N iterations (after 3 warm-ups).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "worker/comm/buckets.h"
#include "worker/comm/communicator.h"

namespace {

using rdattn::Status;
using rdattn::comm::Communicator;

// The slowest rank's seconds for each of `iters` calls of `op`.
std::vector<double> Time(Communicator& comm, int iters, const std::function<Status()>& op) {
  for (int i = 0; i < 3; ++i) {
    if (!op().ok()) return {};
  }
  std::vector<double> out;
  for (int i = 0; i < iters; ++i) {
    if (!comm.Barrier().ok()) return {};
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = op();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", comm.rank(), s.ToString().c_str());
      return {};
    }
    // Max over ranks via a gather of one slot per rank.
    at::Tensor slots = at::zeros({comm.world_size()}, at::kDouble);
    slots[comm.rank()] = dt;
    if (!comm.AllReduceSum(slots).ok()) return {};
    out.push_back(slots.max().item<double>());
  }
  return out;
}

void Report(Communicator& comm, const std::string& what, double bytes, std::vector<double> t) {
  if (comm.rank() != 0) return;
  if (t.empty()) {
    std::printf("%-44s failed\n", what.c_str());
    return;
  }
  std::sort(t.begin(), t.end());
  const double median =
      t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
  const int w = comm.world_size();
  // Bus bandwidth as nccl-tests defines it for all-reduce: algbw * 2 (w - 1) / w.
  const double algbw = bytes / median / 1e9;
  std::printf("%-44s median %8.3f ms  min %8.3f ms  algbw %6.2f GB/s  busbw %6.2f GB/s\n",
              what.c_str(), median * 1e3, t.front() * 1e3, algbw, algbw * 2.0 * (w - 1) / w);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::string backend = "mpi";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      backend = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--iters N] [--backend mpi|auto|nccl]\n", argv[0]);
      return 2;
    }
  }
  if (backend != "mpi" && backend != "auto" && backend != "nccl") {
    std::fprintf(stderr, "--backend: expected mpi, auto or nccl, got '%s'\n", backend.c_str());
    return 2;
  }
  at::set_num_threads(1);
  rdattn::StatusOr<std::unique_ptr<Communicator>> made = rdattn::comm::MakeCommunicator(
      backend == "nccl" ? rdattn::Backend::kNccl
                        : (backend == "auto" ? rdattn::Backend::kAuto : rdattn::Backend::kMpi),
      backend == "nccl" ? rdattn::Device::kCuda : rdattn::Device::kCpu);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 1;
  }
  Communicator& comm = **made;
  const at::TensorOptions opts = at::TensorOptions().dtype(at::kFloat).device(comm.device());
  if (comm.rank() == 0) {
    std::printf("rdattn_comm_bench: backend %s, world %d, %d iterations (median of slowest rank)\n",
                comm.backend().c_str(), comm.world_size(), iters);
  }
  for (int mib : {1, 4, 25}) {
    at::Tensor buf = at::ones({int64_t{mib} << 18}, opts);  // mib MiB of float32
    Report(comm, "AllReduceSum float32 " + std::to_string(mib) + " MiB", double(mib) * (1 << 20),
           Time(comm, iters, [&] { return comm.AllReduceSum(buf); }));
  }
  // 25 MiB of gradients in ~120 tensors of uneven sizes, averaged in buckets (pack, reduce,
  // divide, unpack), as the trainer calls it.
  std::vector<at::Tensor> grads;
  int64_t left = int64_t{25} << 18;
  for (int k = 0; left > 0; ++k) {
    const int64_t n = std::min(left, int64_t{1} << (10 + k % 9));  // 1K .. 256K elements
    grads.push_back(at::ones({n}, opts));
    left -= n;
  }
  for (int64_t bucket_mib : {int64_t{4}, int64_t{25}}) {
    Report(comm,
           "AllReduceMeanGradients 25 MiB/" + std::to_string(grads.size()) + " t, bucket " +
               std::to_string(bucket_mib) + " MiB",
           25.0 * (1 << 20), Time(comm, iters, [&] {
             return rdattn::comm::AllReduceMeanGradients(comm, grads, bucket_mib << 20);
           }));
  }
  return 0;
}
