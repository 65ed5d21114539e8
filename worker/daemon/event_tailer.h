// Follows a growing JSON-lines file (the trainer's events.jsonl) and hands out each complete
// line exactly once. No parsing, no threads, no gRPC: the relay polls it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace rdattn::worker {

class EventTailer {
 public:
  explicit EventTailer(std::string path);
  ~EventTailer();
  EventTailer(const EventTailer&) = delete;
  EventTailer& operator=(const EventTailer&) = delete;

  // Appends to *lines every line completed ('\n'-terminated) since the last call, without the
  // newline (and without a trailing '\r'); blank lines are skipped. A partial last line is kept
  // until its newline arrives. A file that does not exist yet yields no lines and OK.
  // Returns INTERNAL when the file cannot be read. Not thread-safe.
  Status Poll(std::vector<std::string>* lines);

  // Poll(), then also returns a non-empty partial last line. For when the writer has exited.
  Status Flush(std::vector<std::string>* lines);

  // Bytes consumed so far (complete lines only).
  int64_t offset() const { return offset_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t read_offset_ = 0;  // bytes read from the file
  int64_t offset_ = 0;       // bytes handed out as complete lines
  std::string partial_;      // read but not yet '\n'-terminated
};

}  // namespace rdattn::worker
