// Gradient buckets, the parameter broadcast and the cross-rank checksum check (buckets.h).
// Every function here is a sequence of Communicator collectives whose number and sizes depend
// only on the tensors' layout, so ranks with the same layout always issue the same calls.
#include "worker/comm/buckets.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>

namespace rdattn::comm {
namespace {

// --- hashing (xxHash64's round and splitmix64's finaliser; a checksum, not a MAC) ---

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;

uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t Round(uint64_t h, uint64_t v) { return Rotl(h + v * kP2, 31) * kP1; }
uint64_t Finish(uint64_t h) {
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

uint64_t HashBytes(uint64_t h, const unsigned char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);  // little-endian word
    h = Round(h, w);
  }
  uint64_t tail = 0;
  if (n > i) std::memcpy(&tail, p + i, n - i);
  return Round(Round(h, tail), n);
}

uint64_t HashString(uint64_t h, const char* s) {
  return HashBytes(h, reinterpret_cast<const unsigned char*>(s), std::strlen(s));
}

// Count, and per tensor: defined, dtype name, device type, shape.
uint64_t LayoutFingerprint(const std::vector<at::Tensor>& tensors) {
  uint64_t h = Round(0x726461747461796FULL, tensors.size());
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) {
      h = Round(h, 0xDEADull);
      continue;
    }
    h = HashString(h, c10::toString(t.scalar_type()));
    h = HashString(h, c10::DeviceTypeName(t.device().type(), /*lower_case=*/true).c_str());
    h = Round(h, static_cast<uint64_t>(t.dim()));
    for (int64_t s : t.sizes()) h = Round(h, static_cast<uint64_t>(s));
  }
  return Finish(h);
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// --- collectives built from AllReduceSum ---

// All ranks' `value`s, indexed by rank: each rank writes its slot of a zero vector and the
// vector is summed (one slot non-zero per rank, so the int64 sum is exact).
StatusOr<std::vector<uint64_t>> GatherU64(Communicator& comm, uint64_t value) {
  const int world = comm.world_size();
  at::Tensor host = at::zeros({world}, at::TensorOptions().dtype(at::kLong));
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  host.data_ptr<int64_t>()[comm.rank()] = bits;
  at::Tensor slots = host.to(comm.device());
  RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(slots));
  host = slots.to(at::kCPU).contiguous();
  std::vector<uint64_t> out(static_cast<size_t>(world));
  std::memcpy(out.data(), host.data_ptr<int64_t>(), out.size() * sizeof(uint64_t));
  return out;
}

// OK iff every rank's `mine` equals rank 0's; else `code` with "what: rank R label X vs rank 0 Y"
// on every rank, R the lowest differing rank.
Status Agree(Communicator& comm, uint64_t mine, StatusCode code, const std::string& what,
             const char* label) {
  StatusOr<std::vector<uint64_t>> all = GatherU64(comm, mine);
  if (!all.ok()) return all.status();
  const std::vector<uint64_t>& v = *all;
  int first = -1;
  int differing = 0;
  for (size_t r = 1; r < v.size(); ++r) {
    if (v[r] != v[0]) {
      if (first < 0) first = static_cast<int>(r);
      ++differing;
    }
  }
  if (differing == 0) return Status::Ok();
  std::string msg = what + ": rank " + std::to_string(first) + " " + label + " " +
                    Hex(v[static_cast<size_t>(first)]) + " vs rank 0 " + Hex(v[0]);
  if (differing > 1) msg += " (" + std::to_string(differing) + " ranks differ)";
  return Status(code, msg);
}

// --- scratch buffers for packed buckets ---
//
// Packed buckets reuse flat buffers across calls instead of allocating each time: the pages of
// a fresh allocation are first-touched on every step, and that can cost more than the
// all-reduce (measured on the 2-core CI VM: first touch of 25 MiB 72 ms, re-touch 0.5 ms; see
// docs/communicator.md). One buffer per (dtype, device) is kept, as large as the largest packed
// bucket seen (at most bucket_bytes), until ReleaseBucketBuffers(). A buffer is checked out
// while in use, so concurrent callers never share one.
struct ScratchPool {
  std::mutex mu;
  std::vector<at::Tensor> idle;  // guarded by mu
};

ScratchPool& Pool() {
  static ScratchPool* pool = new ScratchPool;  // never destroyed: no exit-order hazards (CUDA)
  return *pool;
}

// A flat buffer of at least `numel` elements, checked out of the pool; returned on destruction.
class Scratch {
 public:
  Scratch(at::ScalarType dtype, at::Device device, int64_t numel) {
    {
      std::lock_guard<std::mutex> lock(Pool().mu);
      std::vector<at::Tensor>& idle = Pool().idle;
      for (auto it = idle.begin(); it != idle.end(); ++it) {
        if (it->scalar_type() == dtype && it->device() == device) {
          if (it->numel() >= numel) buffer_ = std::move(*it);
          idle.erase(it);  // taken, or too small and dropped (replaced below)
          break;
        }
      }
    }
    if (!buffer_.defined()) {
      buffer_ = at::empty({numel}, at::TensorOptions().dtype(dtype).device(device));
    }
  }
  ~Scratch() {
    std::lock_guard<std::mutex> lock(Pool().mu);
    Pool().idle.push_back(std::move(buffer_));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  at::Tensor Take(int64_t numel) const { return buffer_.narrow(0, 0, numel); }

 private:
  at::Tensor buffer_;
};

// Runs `op` on each bucket of PlanBuckets(tensors, bucket_bytes) as one flat tensor, then writes
// the bucket back. `pack` false skips filling the flat buffer (a broadcast's receivers).
template <typename Op>
Status RunBuckets(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes, bool pack, Op op) {
  for (const std::vector<size_t>& bucket : PlanBuckets(tensors, bucket_bytes)) {
    const at::Tensor& first = tensors[bucket.front()];
    if (bucket.size() == 1 && first.is_contiguous()) {
      at::Tensor alias = first.detach();  // in place, no copy
      RDATTN_RETURN_IF_ERROR(op(alias));
      continue;
    }
    int64_t total = 0;
    for (size_t i : bucket) total += tensors[i].numel();
    const Scratch scratch(first.scalar_type(), first.device(), total);
    at::Tensor flat = scratch.Take(total);
    if (pack) {
      int64_t off = 0;
      for (size_t i : bucket) {
        const at::Tensor& t = tensors[i];
        flat.narrow(0, off, t.numel()).view(t.sizes()).copy_(t.detach());
        off += t.numel();
      }
    }
    RDATTN_RETURN_IF_ERROR(op(flat));
    int64_t off = 0;
    for (size_t i : bucket) {
      const at::Tensor& t = tensors[i];
      t.detach().copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
  return Status::Ok();
}

// LibTorch reports failures by throwing; this library returns Status (CONVENTIONS B4).
template <typename F>
Status Guarded(const char* what, F f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    return InternalError(std::string(what) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InternalError(std::string(what) + ": " + e.what());
  }
}

Status RequireDefined(const std::vector<at::Tensor>& tensors, const char* what) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      return InvalidArgumentError(std::string(what) + ": tensor " + std::to_string(i) +
                                  " is undefined");
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::vector<size_t>> PlanBuckets(const std::vector<at::Tensor>& tensors,
                                             int64_t bucket_bytes) {
  struct Open {
    at::ScalarType dtype;
    at::Device device;
    std::vector<size_t> members;
    int64_t bytes;
  };
  std::vector<Open> open;
  std::vector<std::vector<size_t>> plan;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined() || t.numel() == 0) continue;
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    auto it = open.begin();
    while (it != open.end() && !(it->dtype == t.scalar_type() && it->device == t.device())) ++it;
    if (it != open.end() && it->bytes + bytes > bucket_bytes) {
      plan.push_back(std::move(it->members));
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      open.push_back(Open{t.scalar_type(), t.device(), {}, 0});
      it = std::prev(open.end());
    }
    it->members.push_back(i);
    it->bytes += bytes;
  }
  for (Open& o : open) plan.push_back(std::move(o.members));
  std::sort(plan.begin(), plan.end(),
            [](const std::vector<size_t>& a, const std::vector<size_t>& b) { return a[0] < b[0]; });
  return plan;
}

Status AllReduceMeanGradients(Communicator& comm, const std::vector<at::Tensor>& grads,
                              int64_t bucket_bytes) {
  if (bucket_bytes <= 0) {
    return InvalidArgumentError("AllReduceMeanGradients: bucket_bytes must be positive, got " +
                                std::to_string(bucket_bytes));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) {
      return FailedPreconditionError(
          "AllReduceMeanGradients: gradient " + std::to_string(i) +
          " is undefined (parameter unused in this step?); zero-fill it so that all ranks "
          "reduce the same layout");
    }
    if (!grads[i].is_floating_point()) {
      return InvalidArgumentError("AllReduceMeanGradients: gradient " + std::to_string(i) +
                                  " has dtype " + c10::toString(grads[i].scalar_type()) +
                                  ", expected a floating-point dtype");
    }
  }
  const int world = comm.world_size();
  if (world == 1) return Status::Ok();
  return Guarded("AllReduceMeanGradients", [&] {
    return RunBuckets(grads, bucket_bytes, /*pack=*/true, [&](at::Tensor& flat) -> Status {
      RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(flat));
      flat.div_(static_cast<double>(world));  // sum then one division, like DDP's averaging
      return Status::Ok();
    });
  });
}

GradientBuckets::GradientBuckets(std::vector<at::Tensor> params, int64_t bucket_bytes)
    : params_(std::move(params)),
      plan_(PlanBuckets(params_, bucket_bytes > 0 ? bucket_bytes : kDefaultBucketBytes)),
      where_(params_.size(), {SIZE_MAX, 0}) {
  for (size_t b = 0; b < plan_.size(); ++b) {
    int64_t off = 0;
    for (size_t i : plan_[b]) {
      where_[i] = {b, off};
      off += params_[i].numel();
    }
  }
}

void GradientBuckets::Attach() {
  const c10::NoGradGuard no_grad;
  if (flats_.empty()) {
    slots_.resize(params_.size());
    for (const std::vector<size_t>& bucket : plan_) {
      const at::Tensor& first = params_[bucket.front()];
      int64_t total = 0;
      for (size_t i : bucket) total += params_[i].numel();
      at::Tensor flat = at::zeros({total}, first.options().requires_grad(false));
      for (size_t i : bucket) {
        // detach(): an alias without autograd view tracking, so detach_() on the gradient works.
        slots_[i] =
            flat.narrow(0, where_[i].second, params_[i].numel()).view(params_[i].sizes()).detach();
      }
      flats_.push_back(std::move(flat));
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (where_[i].first == SIZE_MAX) continue;  // empty or undefined: no slot
    at::Tensor& grad = params_[i].mutable_grad();
    if (grad.defined() && grad.data_ptr() == slots_[i].data_ptr()) continue;
    if (grad.defined()) {
      slots_[i].copy_(grad);
    } else {
      slots_[i].zero_();
    }
    grad = slots_[i];
  }
}

bool GradientBuckets::Attached() const {
  if (flats_.empty()) return false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (where_[i].first == SIZE_MAX) continue;
    const at::Tensor& grad = params_[i].grad();
    if (!grad.defined() || grad.data_ptr() != slots_[i].data_ptr()) return false;
  }
  return true;
}

void GradientBuckets::Zero() {
  if (!Attached()) Attach();
  for (at::Tensor& flat : flats_) flat.zero_();
}

Status GradientBuckets::AllReduceMean(Communicator& comm) {
  return Guarded("GradientBuckets::AllReduceMean", [&]() -> Status {
    if (!Attached()) Attach();
    const int world = comm.world_size();
    if (world == 1) return Status::Ok();
    for (at::Tensor& flat : flats_) {
      RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(flat));
      flat.div_(static_cast<double>(world));  // as AllReduceMeanGradients
    }
    return Status::Ok();
  });
}

int64_t GradientBuckets::bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& t : flats_) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

Status BroadcastTensors(Communicator& comm, const std::vector<at::Tensor>& tensors, int root,
                        int64_t bucket_bytes) {
  RDATTN_RETURN_IF_ERROR(RequireDefined(tensors, "BroadcastTensors"));
  if (bucket_bytes <= 0) {
    return InvalidArgumentError("BroadcastTensors: bucket_bytes must be positive, got " +
                                std::to_string(bucket_bytes));
  }
  if (root < 0 || root >= comm.world_size()) {
    return InvalidArgumentError("BroadcastTensors: root " + std::to_string(root) + " outside [0, " +
                                std::to_string(comm.world_size()) + ")");
  }
  if (comm.world_size() == 1) return Status::Ok();
  return Guarded("BroadcastTensors", [&] {
    return RunBuckets(tensors, bucket_bytes, /*pack=*/comm.rank() == root,
                      [&](at::Tensor& flat) { return comm.Broadcast(flat, root); });
  });
}

Status BroadcastAndVerify(Communicator& comm, const std::vector<at::Tensor>& tensors) {
  RDATTN_RETURN_IF_ERROR(RequireDefined(tensors, "BroadcastAndVerify"));
  if (comm.world_size() == 1) return Status::Ok();
  return Guarded("BroadcastAndVerify", [&]() -> Status {
    // A broadcast between different layouts would hang or scribble: agree on it first.
    RDATTN_RETURN_IF_ERROR(Agree(comm, LayoutFingerprint(tensors), StatusCode::kFailedPrecondition,
                                 "tensor layouts (count, dtypes, shapes) differ across ranks",
                                 "layout"));
    RDATTN_RETURN_IF_ERROR(BroadcastTensors(comm, tensors, /*root=*/0));
    return Agree(comm, TensorsChecksum(tensors), StatusCode::kInternal,
                 "parameters differ across ranks after broadcast", "checksum");
  });
}

Status VerifyEqual(Communicator& comm, const std::vector<at::Tensor>& tensors) {
  if (comm.world_size() == 1) return Status::Ok();
  return Guarded("VerifyEqual", [&] {
    return Agree(comm, TensorsChecksum(tensors), StatusCode::kInternal,
                 "parameters differ across ranks", "checksum");
  });
}

void ReleaseBucketBuffers() {
  std::lock_guard<std::mutex> lock(Pool().mu);
  Pool().idle.clear();
}

int64_t BucketBufferBytes() {
  std::lock_guard<std::mutex> lock(Pool().mu);
  int64_t bytes = 0;
  for (const at::Tensor& t : Pool().idle)
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

uint64_t TensorsChecksum(const std::vector<at::Tensor>& tensors) {
  uint64_t h = Round(0x636865636B73756DULL, tensors.size());
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) {
      h = Round(h, 0xDEADull);
      continue;
    }
    h = HashString(h, c10::toString(t.scalar_type()));
    h = Round(h, static_cast<uint64_t>(t.dim()));
    for (int64_t s : t.sizes()) h = Round(h, static_cast<uint64_t>(s));
    const at::Tensor host = t.detach().to(at::kCPU).contiguous();  // no copy if already so
    h = HashBytes(h, static_cast<const unsigned char*>(host.data_ptr()),
                  static_cast<size_t>(host.numel()) * host.element_size());
  }
  return Finish(h);
}

}  // namespace rdattn::comm
