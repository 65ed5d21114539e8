#include "worker/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace rdattn::io {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"BF16", at::kBFloat16}, {"F16", at::kHalf},
    {"I64", at::kLong},   {"I32", at::kInt},   {"U8", at::kByte},
};

bool Fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

}  // namespace

bool ReadSafetensors(const std::string& path, SafetensorsFile* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(error, path + ": cannot open (" + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8)
    return Fail(error, path + ": truncated: shorter than the 8-byte header length");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > file_size - 8)
    return Fail(error, path + ": truncated: header length " + std::to_string(header_len) +
                           " exceeds the file size " + std::to_string(file_size));
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    return Fail(error, path + ": header is not valid JSON: " + e.what());
  }
  if (!j.is_object()) return Fail(error, path + ": header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_len = file_size - data_start;
  std::vector<char> data(data_len);
  in.read(data.data(), static_cast<std::streamsize>(data_len));
  if (!in) return Fail(error, path + ": truncated while reading tensor data");

  SafetensorsFile result;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it.value().begin(); m != it.value().end(); ++m)
        if (m.value().is_string()) result.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const auto& v = it.value();
    const std::string where = path + ": tensor '" + it.key() + "'";
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      return Fail(error, where + ": needs dtype, shape and data_offsets");
    const std::string dtype = v["dtype"].get<std::string>();
    const DtypeName* dt = nullptr;
    for (const auto& d : kDtypes)
      if (dtype == d.name) dt = &d;
    if (dt == nullptr) return Fail(error, where + ": unsupported dtype " + dtype);
    std::vector<int64_t> shape = v["shape"].get<std::vector<int64_t>>();
    const auto offs = v["data_offsets"].get<std::vector<uint64_t>>();
    if (offs.size() != 2 || offs[0] > offs[1] || offs[1] > data_len)
      return Fail(error, where + ": data_offsets out of range");
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dt->type));
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (nbytes != offs[1] - offs[0])
      return Fail(error, where + ": shape needs " + std::to_string(nbytes) +
                             " bytes, offsets give " + std::to_string(offs[1] - offs[0]));
    if (nbytes > 0) std::memcpy(t.data_ptr(), data.data() + offs[0], nbytes);
    result.tensors[it.key()] = t;
  }
  *out = std::move(result);
  return true;
}

bool WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, std::string* error) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const char* dtype = nullptr;
    for (const auto& d : kDtypes)
      if (t.scalar_type() == d.type) dtype = d.name;
    if (dtype == nullptr)
      return Fail(error, path + ": tensor '" + name + "' has an unsupported dtype");
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {
        {"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    contiguous.push_back(t);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // align the data start to 8 bytes
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Fail(error, tmp + ": cannot create (" + std::strerror(errno) + ")");
  auto write_all = [fd](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  unsigned char len_bytes[8];
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);
  bool ok = write_all(len_bytes, 8) && write_all(h.data(), h.size());
  for (const auto& t : contiguous)
    ok = ok && write_all(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Fail(error, path + ": write failed (" + std::strerror(errno) + ")");
  }
  return true;
}

}  // namespace rdattn::io
