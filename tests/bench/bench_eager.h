// The eager PyTorch peer of rdattn_model_bench (docs/benchmarks.md, "rdattn against eager
// PyTorch"): tests/bench/eager_peer.py, the same model in plain PyTorch, run by Debian's
// python3-torch (the same LibTorch and OpenBLAS as this binary) as a child process that the bench
// drives over a pipe, one arm's steps at a time, so that its timings interleave with rdattn's
// round by round. The child's OpenMP threads and models stay idle while rdattn's steps run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace rdattn::bench {

// The command line of the peer: the interpreter (a python3 that imports Debian's torch) and the
// script.
struct EagerPeerCommand {
  std::string python;
  std::string script;
};

class EagerPeer {
 public:
  EagerPeer() = default;
  EagerPeer(const EagerPeer&) = delete;
  EagerPeer& operator=(const EagerPeer&) = delete;
  ~EagerPeer();  // Stop()

  // Starts the peer with every arm of `arms` built from `cfg` (init seed 0, the batch of
  // RandomBatch(cfg, batch, seed 1)) and `threads` threads, and waits for its READY line.
  // Returns "" or the reason it could not start.
  std::string Start(const EagerPeerCommand& cmd, const std::string& preset,
                    const model::ModelConfig& cfg, const std::vector<model::Arm>& arms,
                    int64_t batch, int64_t threads);

  // What the READY line said: {"torch", "blas_core", "threads", "retain_freed_memory",
  // "arms": {arm: {"params", "init_loss"}}}.
  const nlohmann::json& info() const { return info_; }

  // The longest wait for one answer of the peer (its start builds every arm; a step of the S
  // preset on one core takes seconds).
  static constexpr int kReplySeconds = 900;

  // Runs `steps` full training steps of `arm` in the peer. *seconds: their wall time as the peer
  // measured it (without the pipe's round trip); *losses: each step's loss. Returns "" or the
  // reason.
  std::string Step(model::Arm arm, int64_t steps, double* seconds, std::vector<double>* losses);

  // Sends "quit", closes the pipes and waits for the child. Idempotent.
  void Stop();

 private:
  // The next line of the peer that starts with "EAGER_PEER_": its tag and the rest. Other lines
  // are skipped. kEof: the peer closed its stdout; kTimeout: nothing for kReplySeconds (the peer
  // is then killed), so that a stuck peer cannot hang the bench.
  enum class Read { kOk, kEof, kTimeout };
  Read ReadTagged(std::string* tag, std::string* rest);
  // Waits for the child and describes how it ended.
  std::string Reap();

  pid_t pid_ = -1;
  FILE* to_ = nullptr;   // the peer's stdin
  int from_ = -1;        // the peer's stdout
  std::string pending_;  // read from it, not yet a whole line
  nlohmann::json info_;
};

}  // namespace rdattn::bench
