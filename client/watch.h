// Following a sweep: WatchSweep until the sweep ends, reconnecting with after_seq when the
// stream breaks (UNAVAILABLE, or a stream that ends before the sweep does), so that nothing is
// printed twice or lost. Three outputs: lines through WatchPrinter (text), one JSON line per
// event (json), or the live table of watch_table.h redrawn in place (table, for a terminal).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "client/coordinator_client.h"
#include "client/watch_printer.h"
#include "common/status.h"

namespace rdattn::client {

enum class WatchFormat {
  kText,   // event lines (WatchPrinter)
  kJson,   // one WatchEvent JSON line per event, unthrottled
  kTable,  // the live table, redrawn with ANSI cursor movements
};

struct WatchOptions {
  WatchFormat format = WatchFormat::kText;
  WatchPrinterOptions printer;  // text only
  // Table only: the terminal whose size the table fits (-1: $COLUMNS x $LINES, else 80 x 24).
  int terminal_fd = -1;
  // Table only: every job (GetSweep's pages) at least this often while the sweep runs, and at
  // most once a second when the events name a job the table does not know (one added to the
  // sweep).
  double refresh_seconds = 5.0;
};

// Streams the sweep's events after `after_seq` to `out` until its terminal state, which is
// stored in *final_state. Reconnects back off from 0.5 s to 10 s and are reported on `err` (in
// the table: on its note line); after 5 minutes without a message it gives up with
// UNAVAILABLE. Other stream errors (e.g. NOT_FOUND, UNAUTHENTICATED) are returned as they are.
Status FollowSweep(CoordinatorClient& client, const std::string& sweep_id, uint64_t after_seq,
                   const WatchOptions& options, std::ostream& out, std::ostream& err,
                   pb::SweepState* final_state);

}  // namespace rdattn::client
