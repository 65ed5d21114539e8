#include "worker/data/shard_digest.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/file_util.h"

namespace rdattn::data {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kManifestSuffix = ".manifest.json";

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

std::string Ns(int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%lld.%09lld", static_cast<long long>(ns / 1000000000),
                static_cast<long long>(ns % 1000000000));
  return buf;
}

// The entries of one manifest, by shard file name.
StatusOr<std::vector<std::pair<std::string, ManifestShard>>> ReadManifest(const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return FailedPreconditionError("cannot read the manifest: " + text.status().message());
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgumentError(path + ": not a valid manifest (not a JSON object)");
  std::vector<std::pair<std::string, ManifestShard>> out;
  const auto splits = j.find("splits");
  if (splits == j.end()) return out;
  if (!splits->is_object()) return InvalidArgumentError(path + ": \"splits\" must be an object");
  for (const auto& [name, split] : splits->items()) {
    if (!split.is_object()) continue;
    const auto shards = split.find("shards");
    if (shards == split.end()) continue;
    if (!shards->is_array())
      return InvalidArgumentError(path + ": splits." + name + ".shards must be an array");
    for (const auto& e : *shards) {
      const auto file = e.find("file");
      if (!e.is_object() || file == e.end() || !file->is_string())
        return InvalidArgumentError(path + ": splits." + name +
                                    ".shards: an entry without a \"file\" string");
      ManifestShard m;
      m.manifest_path = path;
      const auto d = e.find("digest");
      if (d != e.end()) {
        if (!d->is_string() || d->get<std::string>().rfind(kDigestPrefix, 0) != 0)
          return InvalidArgumentError(path + ": splits." + name + ".shards \"" +
                                      file->get<std::string>() + "\": \"digest\" must be \"" +
                                      std::string(kDigestPrefix) + "<hex>\"");
        m.digest = d->get<std::string>();
      }
      const auto b = e.find("bytes");
      if (b != e.end() && b->is_number_integer()) m.bytes = b->get<int64_t>();
      out.emplace_back(file->get<std::string>(), std::move(m));
    }
  }
  return out;
}

}  // namespace

std::string DigestOfShard(const Shard& shard) {
  return DigestText(Xxh3(shard.file_data(), shard.file_bytes()));
}

StatusOr<std::optional<ManifestShard>> FindManifestEntry(const std::string& shard_path) {
  const fs::path p(shard_path);
  const std::string name = p.filename().string();
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  std::vector<std::string> manifests;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (EndsWith(f, kManifestSuffix)) manifests.push_back(it->path().string());
  }
  if (ec) return std::optional<ManifestShard>();  // an unlistable folder: no manifest known
  std::sort(manifests.begin(), manifests.end());
  std::optional<ManifestShard> found;
  for (const std::string& m : manifests) {
    RDATTN_ASSIGN_OR_RETURN(auto entries, ReadManifest(m));
    for (auto& [file, entry] : entries) {
      if (file != name) continue;
      if (found.has_value() && found->manifest_path != m)
        return InvalidArgumentError(shard_path + ": listed by two manifests, " +
                                    found->manifest_path + " and " + m + "; remove the stale one");
      found = std::move(entry);
    }
  }
  return found;
}

StatusOr<ShardDigest> DigestAndVerify(const Shard& shard, const std::string& role) {
  ShardDigest d;
  d.role = role;
  d.path = shard.path();
  d.bytes = static_cast<int64_t>(shard.file_bytes());
  d.digest = DigestOfShard(shard);
  RDATTN_ASSIGN_OR_RETURN(const std::optional<ManifestShard> m, FindManifestEntry(shard.path()));
  if (m.has_value() && !m->digest.empty() && m->digest != d.digest) {
    return DataLossError(shard.path() + ": content digest " + d.digest + " (" +
                         std::to_string(d.bytes) + " bytes) differs from " + m->digest +
                         (m->bytes >= 0 ? " (" + std::to_string(m->bytes) + " bytes)" : "") +
                         " recorded in its manifest " + m->manifest_path +
                         ": the shard changed after `rdattn-data prepare` wrote it; prepare the "
                         "data again (or restore the shard)");
  }
  return d;
}

StatusOr<std::vector<ShardDigest>> DigestAndVerifyAll(const std::vector<Shard>& train,
                                                      const std::vector<Shard>& val,
                                                      const std::vector<Shard>& test) {
  std::vector<ShardDigest> out;
  const std::pair<const char*, const std::vector<Shard>*> roles[] = {
      {"train", &train}, {"val", &val}, {"test", &test}};
  for (const auto& [role, shards] : roles) {
    for (const Shard& s : *shards) {
      auto d = DigestAndVerify(s, role);
      if (!d.ok()) return d.status().WithPrefix(std::string("data.") + role + "_shards");
      out.push_back(std::move(d).value());
    }
  }
  return out;
}

std::string DataDigest(const std::vector<ShardDigest>& shards) {
  if (shards.empty()) return "";
  Xxh3Stream h;
  for (const ShardDigest& s : shards) {
    h.Update(s.role);
    h.Update(std::string_view("\0", 1));
    h.Update(s.digest);
    h.Update(std::string_view("\0", 1));
    const std::string bytes = std::to_string(s.bytes);
    h.Update(bytes);
    h.Update(std::string_view("\n", 1));
  }
  return DigestText(h.Digest());
}

Status CheckShardsUnchanged(const std::vector<const Shard*>& shards,
                            const std::vector<ShardDigest>& at_open) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const Shard* s = shards[i];
    auto now = StampOf(s->path());
    if (!now.ok())
      return FailedPreconditionError(s->path() +
                                     ": the shard is gone from disk while this run read it (" +
                                     now.status().message() + ")");
    const Shard::Stamp& was = s->stamp();
    if (*now == was) continue;
    std::string what;
    if (now->dev != was.dev || now->ino != was.ino) {
      what = "replaced by another file";
    } else if (now->size != was.size) {
      what = "size " + std::to_string(was.size) + " -> " + std::to_string(now->size) + " bytes";
    } else {
      what = "rewritten in place: modified " + Ns(was.mtime_ns) + " -> " + Ns(now->mtime_ns) +
             ", changed " + Ns(was.ctime_ns) + " -> " + Ns(now->ctime_ns);
    }
    if (i < at_open.size() && at_open[i].path == s->path()) {
      // The times moved: is the content still what was digested at open?
      auto digest = FileDigest(s->path());
      if (digest.ok() && *digest == at_open[i].digest) continue;
      what += digest.ok()
                  ? "; content digest " + at_open[i].digest + " at open, " + *digest + " now"
                  : "; " + digest.status().message();
    }
    return FailedPreconditionError(
        s->path() + ": the shard changed on disk while this run read it (" + what +
        "); its results would mix two versions of the data, so none is reported");
  }
  return Status::Ok();
}

}  // namespace rdattn::data
