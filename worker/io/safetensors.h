// Reading and writing safetensors files (8-byte little-endian header length, a JSON header
// of {name: {dtype, shape, data_offsets}} plus optional "__metadata__", then raw data).
// Used for the parity fixtures, `rdattn-train export`, and `eval` of exported weights.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace rdattn::io {

struct SafetensorsFile {
  std::map<std::string, at::Tensor> tensors;    // CPU tensors, by name
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Reads `path`. On failure returns false and sets `error` to a message naming the file and
// what is wrong (missing, truncated, bad header, unknown dtype, offsets out of range).
bool ReadSafetensors(const std::string& path, SafetensorsFile* out, std::string* error);

// Writes the tensors (in name order) atomically: a temporary file beside `path`, fsync, then
// rename. Supported dtypes: F64, F32, BF16, F16, I64, I32, U8.
bool WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, std::string* error);

}  // namespace rdattn::io
