// Sweep files -> rdattn.v1.SweepSpec. YAML (yaml-cpp) and JSON are read into one JSON document,
// checked and normalised against SweepSpec's descriptor (proto_json.h: every unknown field,
// wrong value and duplicate key at once, each naming its field), then built by protobuf's own
// JSON parser with default options (unknown fields rejected), whose rare remaining errors are
// rewritten as "field: reason". The text format goes straight to protobuf's text parser.
// Validation of values (arms, seeds, the runs) is ExpandSweep's, not this file's.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include <exception>
#include <set>
#include <string>
#include <vector>

#include "proto/contract/contract.h"
#include "proto/contract/field_errors.h"
#include "proto/contract/proto_json.h"

namespace rdattn::contract {
namespace {

namespace gp = ::google::protobuf;
using OJson = nlohmann::ordered_json;
using internal::FieldErrors;
using internal::IndexPath;
using internal::JoinPath;
using internal::NoSemicolons;

// ---------------------------------------------------------------------------------------------
// YAML -> JSON. Mappings become objects, sequences arrays, plain null-likes (`~`, `null`, an
// empty value) null, and every other scalar a string: the descriptor walk below decides what a
// scalar means from the field it is given to.

OJson YamlToJson(const YAML::Node& node, const std::string& path, FieldErrors& errors) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      return node.Scalar();
    case YAML::NodeType::Sequence: {
      OJson out = OJson::array();
      size_t i = 0;
      for (const auto& item : node) out.push_back(YamlToJson(item, IndexPath(path, i++), errors));
      return out;
    }
    case YAML::NodeType::Map: {
      OJson out = OJson::object();
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (!it->first.IsScalar()) {
          errors.Add(path, "a key must be a plain name (line " +
                               std::to_string(it->first.Mark().line + 1) + ")");
          continue;
        }
        const std::string key = it->first.Scalar();
        const std::string key_path = JoinPath(path, key);
        if (out.contains(key)) {
          errors.Add(key_path,
                     "given twice (line " + std::to_string(it->first.Mark().line + 1) + ")");
          continue;
        }
        out[key] = YamlToJson(it->second, key_path, errors);
      }
      return out;
    }
  }
  return nullptr;
}

// Protobuf's JSON errors look like "(scales[0].shape) widht: Cannot find field." or
// "(seeds[0]): invalid value ..."; rewrite them as "field: reason".
std::string RewriteProtobufError(std::string message) {
  std::string path;
  std::string reason = message;
  if (!message.empty() && message[0] == '(') {
    const size_t close = message.find(')');
    if (close != std::string::npos) {
      path = message.substr(1, close - 1);
      std::string rest = message.substr(close + 1);
      if (rest.rfind(": ", 0) == 0) {
        reason = rest.substr(2);
      } else if (rest.rfind(" ", 0) == 0) {
        const size_t colon = rest.find(": ");
        if (colon != std::string::npos) {
          path = JoinPath(path, rest.substr(1, colon - 1));
          reason = rest.substr(colon + 2);
        } else {
          reason = rest.substr(1);
        }
      }
    }
  }
  if (reason == "Cannot find field.") reason = "unknown field";
  return (path.empty() ? std::string("SweepSpec") : path) + ": " + NoSemicolons(reason);
}

StatusOr<pb::SweepSpec> FromDocument(const OJson& document, FieldErrors& errors) {
  // An empty file is an empty sweep (ExpandSweep then says what is missing).
  const OJson normalized =
      document.is_null() ? OJson::object()
                         : internal::NormalizeJson(document, pb::SweepSpec::descriptor(), errors);
  if (!errors.empty()) return errors.ToStatus();

  pb::SweepSpec spec;
  const std::string text = normalized.dump(-1, ' ', false, OJson::error_handler_t::replace);
  const auto status = gp::util::JsonStringToMessage(text, &spec);  // unknown fields rejected
  if (!status.ok()) {
    return InvalidArgumentError(RewriteProtobufError(std::string(status.message())));
  }
  return spec;
}

// nlohmann's parser keeps the last of two equal keys; this parse callback reports them instead
// (yaml-cpp's tree keeps both, and YamlToJson reports them there).
class DuplicateKeyFinder {
 public:
  explicit DuplicateKeyFinder(FieldErrors& errors) : errors_(errors) {}

  OJson::parser_callback_t Callback() {
    return [this](int /*depth*/, nlohmann::json::parse_event_t event, OJson& parsed) {
      using E = nlohmann::json::parse_event_t;
      switch (event) {
        case E::object_start:
          frames_.push_back(Frame{});
          break;
        case E::array_start:
          frames_.push_back(Frame{true, 0, {}, {}});
          break;
        case E::key:
          if (!frames_.empty() && parsed.is_string()) {
            Frame& top = frames_.back();
            top.key = parsed.get<std::string>();
            if (!top.keys.insert(top.key).second) errors_.Add(Path(), "given twice");
          }
          break;
        case E::object_end:
        case E::array_end:
          if (!frames_.empty()) frames_.pop_back();
          NextElement();
          break;
        case E::value:
          NextElement();
          break;
      }
      return true;
    };
  }

 private:
  struct Frame {
    bool array = false;
    size_t index = 0;
    std::string key;
    std::set<std::string> keys;
  };

  void NextElement() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  std::string Path() const {
    std::string path;
    for (const Frame& f : frames_)
      path = f.array ? IndexPath(path, f.index) : JoinPath(path, f.key);
    return path;
  }

  FieldErrors& errors_;
  std::vector<Frame> frames_;
};

// Collects every text-format error as "line N, column M: reason".
class TextErrorCollector : public gp::io::ErrorCollector {
 public:
  explicit TextErrorCollector(FieldErrors& errors) : errors_(errors) {}
  void AddError(int line, gp::io::ColumnNumber column, const std::string& message) override {
    errors_.AddText("line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) +
                    ": " + NoSemicolons(message));
  }
  void AddWarning(int, gp::io::ColumnNumber, const std::string&) override {}

 private:
  FieldErrors& errors_;
};

}  // namespace

StatusOr<pb::SweepSpec> ParseSweepTextProto(std::string_view text) {
  FieldErrors errors;
  TextErrorCollector collector(errors);
  gp::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  pb::SweepSpec spec;
  const bool ok = parser.ParseFromString(std::string(text), &spec);
  if (!errors.empty()) return errors.ToStatus();
  if (!ok) return InvalidArgumentError("SweepSpec: not a valid text proto");
  return spec;
}

StatusOr<pb::SweepSpec> ParseSweepYaml(std::string_view yaml_text) {
  FieldErrors errors;
  OJson document;
  try {
    std::vector<YAML::Node> docs = YAML::LoadAll(std::string(yaml_text));
    if (docs.size() > 1) {
      return InvalidArgumentError("SweepSpec: a sweep file holds one YAML document, found " +
                                  std::to_string(docs.size()));
    }
    if (!docs.empty()) document = YamlToJson(docs[0], "", errors);
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on syntax errors; this is its one boundary.
    return InvalidArgumentError("line " + std::to_string(e.mark.line + 1) + ", column " +
                                std::to_string(e.mark.column + 1) + ": " + NoSemicolons(e.msg));
  } catch (const std::exception& e) {
    return InvalidArgumentError("SweepSpec: cannot read the YAML: " + NoSemicolons(e.what()));
  }
  return FromDocument(document, errors);  // adds the field errors to the duplicate keys
}

StatusOr<pb::SweepSpec> ParseSweepJson(std::string_view json_text) {
  OJson document;
  FieldErrors errors;
  DuplicateKeyFinder duplicates(errors);
  try {
    document = OJson::parse(json_text, duplicates.Callback());
  } catch (const nlohmann::json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..."
    std::string what = e.what();
    const size_t at = what.find(" at line ");
    what = at == std::string::npos ? "SweepSpec: " + what : what.substr(at + 4);
    return InvalidArgumentError(NoSemicolons(what));
  }
  return FromDocument(document, errors);
}

}  // namespace rdattn::contract
