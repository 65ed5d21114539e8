// Validation and test NLL over a fixed list of windows (docs/trainer.md "Same evaluation"), with
// the depth-route diagnostics of depth-read arms: rank r evaluates entries r, r+W, …, and the
// sums are all-reduced, so every rank gets the same result. No events and no checkpoints here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/status.h"
#include "model/depth.h"
#include "model/gpt.h"
#include "worker/comm/communicator.h"
#include "worker/trainer/runtime.h"
#include "worker/trainer/sampler.h"

namespace rdattn::trainer {

struct EvalOutput {
  double nll = 0;                 // mean next-token NLL, nats/token
  int64_t tokens = 0;             // over all ranks
  model::DepthDiagnostics depth;  // with Diagnostics::kOn only
};

enum class Diagnostics { kOff, kOn };

// The windows to evaluate: `windows` of `index`, micro_batch sequences per forward pass.
struct EvalSet {
  const WindowIndex& index;
  const std::vector<int64_t>& windows;
  int64_t micro_batch = 1;
};

// Mean NLL of `model` over the set, in eval mode and without gradients (the model is put back
// in train mode). A collective: every rank calls it. FAILED_PRECONDITION when no rank saw a
// token; a communicator error as it comes.
StatusOr<EvalOutput> Evaluate(model::Gpt& model, const EvalSet& set, comm::Communicator& comm,
                              const Runtime& rt, Diagnostics diagnostics);

// The depth diagnostics as KIND_EVAL fields (docs/events.md): route entropies, and for arms
// with a second route the JS divergences per layer and their means.
nlohmann::json DepthJson(const model::DepthDiagnostics& d);

}  // namespace rdattn::trainer
