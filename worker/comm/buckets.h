// Data-parallel helpers on top of Communicator: gradient averaging in flat buckets, the start-of-
// run parameter broadcast, and the cross-rank equality check. Backend-agnostic; no MPI/NCCL here.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/comm/communicator.h"

namespace rdattn::comm {

inline constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;  // PyTorch DDP's 25 MiB

// The bucket rule, shared by the functions below (exposed for tests and docs). Tensors are taken
// in the given order; a bucket holds tensors of one dtype and device; a tensor joins the open
// bucket of its (dtype, device) if the bucket stays within `bucket_bytes`, else that bucket is
// closed and a new one started. A tensor larger than `bucket_bytes` is a bucket on its own.
// Buckets are listed by their first tensor. The plan depends only on the tensors' dtypes, devices
// and sizes, so it is identical on every rank. Empty and undefined tensors are left out. Each
// bucket lists indices into `tensors`, ascending.
std::vector<std::vector<size_t>> PlanBuckets(const std::vector<at::Tensor>& tensors,
                                             int64_t bucket_bytes);

// Replaces every gradient by its mean over ranks: packs them (in order) into flat buckets
// (PlanBuckets), all-reduces each bucket, divides by the world size and unpacks. A bucket of one
// contiguous tensor is reduced in place, with no copy. Gradients may be non-contiguous. Packed
// buckets use a reused flat buffer per (dtype, device) (see ReleaseBucketBuffers).
//
// Undefined gradients are an error, not zeros (FAILED_PRECONDITION, naming the index): with only
// the gradients at hand their size is unknown, so ranks could not agree on the layout. Pass the
// gradients of trainable parameters and zero-fill any that a step did not produce
// (`p.mutable_grad() = at::zeros_like(p)`). Gradients must be floating point (INVALID_ARGUMENT).
// These checks are local and come before any communication, so ranks with the same model fail
// alike. With world size 1 the function only validates. `bucket_bytes` must be positive.
// Precondition: every rank passes the same dtypes and shapes in the same order (BroadcastAndVerify
// checks this at start).
Status AllReduceMeanGradients(Communicator& comm, const std::vector<at::Tensor>& grads,
                              int64_t bucket_bytes = kDefaultBucketBytes);

// Persistent flat gradient buckets (what PyTorch DDP calls gradient_as_bucket_view): every
// parameter's gradient becomes a slot of one flat tensor per bucket (PlanBuckets of the
// parameters, so the same buckets as AllReduceMeanGradients), and the all-reduce runs in place on
// the flat tensors: no packing, no unpacking, no allocation per step. Backward accumulates into
// the slots (LibTorch adds into a defined gradient in place), and Zero() clears them all in one
// fill per bucket.
//
// The slots are aliases made without autograd view tracking, so optimizer.zero_grad()'s
// detach_() still works on them. A parameter whose gradient was replaced by another tensor (or
// reset to undefined) is re-attached by the next Attach()/AllReduceMean, its value kept; the check
// is one pointer compare per parameter. Parameters must be floating point and keep their shapes.
// Not thread-safe.
class GradientBuckets {
 public:
  GradientBuckets(std::vector<at::Tensor> params, int64_t bucket_bytes = kDefaultBucketBytes);

  // Points every parameter's gradient at its slot, keeping its current value (zeros where it is
  // undefined). The flat tensors are allocated on the first call and kept.
  void Attach();
  // Every parameter's gradient is its slot.
  bool Attached() const;
  // Every gradient to zero (Attach() first if needed).
  void Zero();
  // Replaces every gradient by its mean over ranks: Attach() if needed, then per bucket one
  // in-place AllReduceSum and one division by the world size (bitwise what
  // AllReduceMeanGradients computes). World size 1: only Attach(). A collective.
  Status AllReduceMean(Communicator& comm);

  const std::vector<at::Tensor>& flats() const { return flats_; }
  size_t num_buckets() const { return plan_.size(); }
  int64_t bytes() const;  // of the flat tensors (0 before the first Attach)

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::vector<size_t>> plan_;
  std::vector<at::Tensor> flats_;                  // one per bucket, allocated by Attach
  std::vector<at::Tensor> slots_;                  // per parameter: its gradient's storage
  std::vector<std::pair<size_t, int64_t>> where_;  // per parameter: (bucket, element offset)
};

// In place: every rank's tensors become `root`'s, moved in flat buckets (PlanBuckets).
// Precondition: the same dtypes and shapes on every rank. Tensors may require grad (written
// through a detached alias) and may be non-contiguous.
Status BroadcastTensors(Communicator& comm, const std::vector<at::Tensor>& tensors, int root,
                        int64_t bucket_bytes = kDefaultBucketBytes);

// Start of run: checks that all ranks hold the same layout (else FAILED_PRECONDITION "tensor
// layouts (count, dtypes, shapes) differ across ranks: rank R layout X vs rank 0 Y", on every
// rank, before anything is broadcast), broadcasts rank 0's tensors, then verifies them with
// VerifyEqual. A mismatch after the broadcast is INTERNAL "parameters differ across ranks after
// broadcast: rank R checksum X vs rank 0 Y" — returned by every rank, R the lowest differing.
Status BroadcastAndVerify(Communicator& comm, const std::vector<at::Tensor>& tensors);

// Every rank computes TensorsChecksum, the checksums are gathered (one all-reduce of an int64
// vector of world_size slots) and compared with rank 0's on every rank, so all ranks return the
// same result: OK, or INTERNAL "parameters differ across ranks: rank R checksum X vs rank 0 Y".
// Cheap enough to run every N steps to catch drift.
Status VerifyEqual(Communicator& comm, const std::vector<at::Tensor>& tensors);

// Packed buckets reuse one flat buffer per (dtype, device), as large as the largest packed bucket
// so far (at most bucket_bytes), for the life of the process: fresh pages each step cost more
// than the all-reduce on some machines. This frees them (e.g. after training); BucketBufferBytes
// reports what is held. Thread-safe.
void ReleaseBucketBuffers();
int64_t BucketBufferBytes();

// A 64-bit checksum of the tensors' dtypes, shapes and bytes, in order (not of devices or
// strides): equal iff bitwise equal values, up to hash collisions. Not cryptographic. Stable
// across runs, processes and LibTorch versions on little-endian machines, so it can be logged
// (e.g. the checksum of the initial parameters of an arm).
uint64_t TensorsChecksum(const std::vector<at::Tensor>& tensors);

}  // namespace rdattn::comm
