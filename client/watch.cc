#include "client/watch.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "client/format.h"

namespace rdattn::client {
namespace {

// True for failures a reconnect may fix.
bool Retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Status FollowSweep(CoordinatorClient& client, const std::string& sweep_id, uint64_t after_seq,
                   const WatchOptions& options, std::ostream& out, std::ostream& err,
                   pb::SweepState* final_state_out) {
  pb::GetSweepRequest get;
  get.set_sweep_id(sweep_id);
  get.set_view(pb::SWEEP_VIEW_FULL);
  RDATTN_ASSIGN_OR_RETURN(pb::GetSweepResponse initial, client.GetSweep(get));
  WatchPrinter printer(initial.sweep(), options.printer);
  const bool json = options.json;
  if (!json) {
    out << "watching sweep " << sweep_id << " (" << SweepStateName(initial.sweep().state()) << ", "
        << initial.sweep().job_counts().total() << " jobs)" << std::endl;
  }

  uint64_t seq = after_seq;
  pb::SweepState final_state = pb::SWEEP_STATE_UNSPECIFIED;
  auto backoff = std::chrono::milliseconds(500);
  auto last_message = std::chrono::steady_clock::now();
  constexpr auto kGiveUpAfter = std::chrono::minutes(5);
  while (true) {
    bool received = false;
    pb::WatchSweepRequest request;
    request.set_sweep_id(sweep_id);
    request.set_after_seq(seq);
    const Status status = client.WatchSweep(request, [&](const pb::WatchSweepResponse& m) {
      received = true;
      const pb::WatchEvent& e = m.event();
      if (json) {
        if (e.seq() == 0 || e.seq() > seq) out << MessageJson(e, false) << std::endl;
        if (e.has_sweep_state_change() && IsTerminal(e.sweep_state_change().to_state())) {
          final_state = e.sweep_state_change().to_state();
        }
      } else {
        for (const std::string& line : printer.OnEvent(e, SteadySeconds())) {
          out << line << std::endl;
        }
        if (printer.ended()) final_state = printer.final_state();
      }
      seq = std::max(seq, e.seq());
      return final_state == pb::SWEEP_STATE_UNSPECIFIED;
    });
    if (final_state != pb::SWEEP_STATE_UNSPECIFIED) break;
    if (!status.ok() && !Retryable(status)) return status;
    if (received) {
      backoff = std::chrono::milliseconds(500);
      last_message = std::chrono::steady_clock::now();
    }
    if (status.ok()) {
      // The stream ended without a terminal event: the sweep may have ended before `seq`.
      RDATTN_ASSIGN_OR_RETURN(pb::GetSweepResponse now, client.GetSweep(get));
      if (IsTerminal(now.sweep().state())) {
        final_state = now.sweep().state();
        if (!json) {
          out << "sweep " << sweep_id << ": " << SweepStateName(final_state) << std::endl;
        }
        break;
      }
    }
    if (std::chrono::steady_clock::now() - last_message > kGiveUpAfter) {
      return UnavailableError("lost the watch of sweep " + sweep_id +
                              " for 5 minutes: " + status.message());
    }
    if (!json) {
      err << "rdattn: watch interrupted (" << (status.ok() ? "stream ended" : status.ToString())
          << "); reconnecting after seq " << seq << std::endl;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(10));
  }
  *final_state_out = final_state;
  return Status::Ok();
}

}  // namespace rdattn::client
