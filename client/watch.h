// Following a sweep: WatchSweep until the sweep ends, reconnecting with after_seq when the
// stream breaks (UNAVAILABLE, or a stream that ends before the sweep does), so that nothing is
// printed twice or lost. Text goes through WatchPrinter; JSON prints every event as one line.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "client/coordinator_client.h"
#include "client/watch_printer.h"
#include "common/status.h"

namespace rdattn::client {

struct WatchOptions {
  bool json = false;            // one WatchEvent JSON line per event instead of text
  WatchPrinterOptions printer;  // text only
};

// Streams the sweep's events after `after_seq` to `out` until its terminal state, which is
// stored in *final_state. Reconnects back off from 0.5 s to 10 s and are reported on `err`;
// after 5 minutes without a message it gives up with UNAVAILABLE. Other stream errors (e.g.
// NOT_FOUND, UNAUTHENTICATED) are returned as they are.
Status FollowSweep(CoordinatorClient& client, const std::string& sweep_id, uint64_t after_seq,
                   const WatchOptions& options, std::ostream& out, std::ostream& err,
                   pb::SweepState* final_state);

}  // namespace rdattn::client
