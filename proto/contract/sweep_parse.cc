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
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <exception>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "proto/contract/contract.h"
#include "proto/contract/proto_json.h"

namespace rdattn::contract {
namespace {

namespace gp = ::google::protobuf;
using OJson = nlohmann::ordered_json;

// Reasons must not contain "; " (it separates the errors of the joined text): the messages of
// yaml-cpp, nlohmann::json and protobuf are rewritten with this.
std::string NoSemicolons(std::string s) {
  for (size_t p = 0; (p = s.find("; ", p)) != std::string::npos;) s.replace(p, 2, ", ");
  return s;
}

// ---------------------------------------------------------------------------------------------
// YAML -> JSON. Mappings become objects, sequences arrays, plain null-likes (`~`, `null`, an
// empty value) null, and every other scalar a string: the descriptor walk below decides what a
// scalar means from the field it is given to.

// Aliases share one node in yaml-cpp's tree, but YamlToJson copies them: a few lines of nested
// aliases ("billion laughs") would expand to billions of values, and an alias inside the node
// it names (`a: &a {b: *a}`) to an endless one. So the walk stops after kMaxYamlValues values
// (a real sweep has a few thousand) or kMaxYamlDepth levels (a real sweep has five), and
// reports an alias that names a node it is inside of.
constexpr size_t kMaxYamlValues = 100000;
constexpr size_t kMaxYamlDepth = 64;

class YamlToJson {
 public:
  explicit YamlToJson(FieldErrors& errors) : errors_(errors) {}

  // The document as JSON; LimitError() says whether the walk stopped at a limit.
  OJson Document(const YAML::Node& root) { return Value(root, ""); }
  std::optional<FieldError> LimitError() const {
    if (too_many_) {
      return FieldError{"SweepSpec", "the YAML expands to more than " +
                                         std::to_string(kMaxYamlValues) +
                                         " values (aliases that repeat each other?)"};
    }
    if (too_deep_) {
      return FieldError{"SweepSpec",
                        "the YAML nests deeper than " + std::to_string(kMaxYamlDepth) + " levels"};
    }
    return std::nullopt;
  }

 private:
  bool Stopped() const { return too_many_ || too_deep_; }

  OJson Value(const YAML::Node& node, const std::string& path) {
    if (Stopped()) return nullptr;
    if (values_left_ == 0) {
      too_many_ = true;
      return nullptr;
    }
    --values_left_;
    if (node.IsMap() || node.IsSequence()) {
      for (const YAML::Node& open : open_) {
        if (open.is(node)) {
          errors_.Add(path, "an alias names a mapping or list that it is inside of (line " +
                                std::to_string(node.Mark().line + 1) + ")");
          return nullptr;
        }
      }
      if (open_.size() >= kMaxYamlDepth) {
        too_deep_ = true;
        return nullptr;
      }
      open_.push_back(node);
      OJson out = node.IsMap() ? Map(node, path) : Sequence(node, path);
      open_.pop_back();
      return out;
    }
    if (node.IsScalar()) return node.Scalar();
    return nullptr;  // Null, Undefined
  }

  OJson Sequence(const YAML::Node& node, const std::string& path) {
    OJson out = OJson::array();
    size_t i = 0;
    for (const auto& item : node) {
      out.push_back(Value(item, FieldIndex(path, i++)));
      if (Stopped()) break;
    }
    return out;
  }

  OJson Map(const YAML::Node& node, const std::string& path) {
    OJson out = OJson::object();
    for (auto it = node.begin(); it != node.end() && !Stopped(); ++it) {
      if (!it->first.IsScalar()) {
        errors_.Add(path, "a key must be a plain name (line " +
                              std::to_string(it->first.Mark().line + 1) + ")");
        continue;
      }
      const std::string key = it->first.Scalar();
      const std::string key_path = FieldPath(path, key);
      if (out.contains(key)) {
        errors_.Add(key_path,
                    "given twice (line " + std::to_string(it->first.Mark().line + 1) + ")");
        continue;
      }
      out[key] = Value(it->second, key_path);
    }
    return out;
  }

  FieldErrors& errors_;
  size_t values_left_ = kMaxYamlValues;
  bool too_many_ = false;
  bool too_deep_ = false;
  std::vector<YAML::Node> open_;  // the mappings and lists the walk is inside of, outermost first
};

// Counts the documents of a YAML text with yaml-cpp's event parser, without building them.
// YAML::LoadAll cannot be used: after a token that no node can start with, such as the ',' of
// `{a: 1},` at the top level, yaml-cpp 0.7 returns an empty document without consuming the
// token, so LoadAll appends empty documents until memory runs out. Here a document that starts
// where the previous one did is that token, reported as a syntax error at its place. Throws
// YAML::Exception on syntax errors.
int CountYamlDocuments(const std::string& text) {
  class Ignore : public YAML::EventHandler {
   public:
    void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
    YAML::Mark start = YAML::Mark::null_mark();
  };
  std::istringstream in(text);
  YAML::Parser parser(in);
  Ignore handler;
  int docs = 0;
  int previous_start = -1;
  while (parser.HandleNextDocument(handler)) {
    if (handler.start.pos == previous_start) {
      const char c = handler.start.pos >= 0 && handler.start.pos < static_cast<int>(text.size())
                         ? text[static_cast<size_t>(handler.start.pos)]
                         : '?';
      throw YAML::ParserException(
          handler.start, std::string("unexpected '") + c + "' (a value cannot start with it here)");
    }
    previous_start = handler.start.pos;
    ++docs;
  }
  return docs;
}

// Protobuf's JSON errors look like "(scales[0].shape) widht: Cannot find field." or
// "(seeds[0]): invalid value ..."; rewrite them as a field and a reason.
FieldError RewriteProtobufError(const std::string& message) {
  std::string path;
  std::string reason = message;
  if (!message.empty() && message[0] == '(') {
    const size_t close = message.find(')');
    if (close != std::string::npos) {
      path = message.substr(1, close - 1);
      std::string rest = message.substr(close + 1);
      if (rest.rfind(": ", 0) == 0) {
        reason = rest.substr(2);
      } else if (rest.rfind(' ', 0) == 0) {
        const size_t colon = rest.find(": ");
        if (colon != std::string::npos) {
          path = FieldPath(path, rest.substr(1, colon - 1));
          reason = rest.substr(colon + 2);
        } else {
          reason = rest.substr(1);
        }
      }
    }
  }
  if (reason == "Cannot find field.") reason = "unknown field";
  return FieldError{path.empty() ? std::string("SweepSpec") : path, NoSemicolons(reason)};
}

// One error as the whole result of a parse.
std::vector<FieldError> Only(std::string path, std::string reason) {
  return {FieldError{std::move(path), std::move(reason)}};
}

FieldErrorsOr<pb::SweepSpec> FromDocument(const OJson& document, FieldErrors& errors) {
  // `seeds: {initial: [...], max: ...}` is the seed policy (SweepSpec.seed_policy).
  OJson doc = document;
  if (doc.is_object() && doc.contains("seeds") && doc["seeds"].is_object()) {
    if (doc.contains("seed_policy")) {
      errors.Add("seeds", "a seed policy is given twice (as seeds: {...} and as seed_policy)");
      return std::move(errors).Take();
    }
    doc["seed_policy"] = doc["seeds"];
    doc.erase("seeds");
  }
  // An empty file is an empty sweep (ExpandSweep then says what is missing).
  const OJson normalized = doc.is_null()
                               ? OJson::object()
                               : internal::NormalizeJson(doc, pb::SweepSpec::descriptor(), errors);
  if (!errors.empty()) return std::move(errors).Take();

  pb::SweepSpec spec;
  const std::string text = normalized.dump(-1, ' ', false, OJson::error_handler_t::replace);
  const auto status = gp::util::JsonStringToMessage(text, &spec);  // unknown fields rejected
  if (!status.ok()) {
    return std::vector<FieldError>{RewriteProtobufError(std::string(status.message()))};
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
      path = f.array ? FieldIndex(path, f.index) : FieldPath(path, f.key);
    return path;
  }

  FieldErrors& errors_;
  std::vector<Frame> frames_;

 public:
  // The field being parsed (where the parser stopped, after an error).
  std::string CurrentPath() const { return Path(); }
};

// Collects every text-format error as a reason at "line N, column M".
class TextErrorCollector : public gp::io::ErrorCollector {
 public:
  explicit TextErrorCollector(FieldErrors& errors) : errors_(errors) {}
  void AddError(int line, gp::io::ColumnNumber column, const std::string& message) override {
    errors_.Add("line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1),
                NoSemicolons(message));
  }
  void AddWarning(int, gp::io::ColumnNumber, const std::string&) override {}

 private:
  FieldErrors& errors_;
};

}  // namespace

FieldErrorsOr<pb::SweepSpec> ParseSweepTextProto(std::string_view text) {
  FieldErrors errors("SweepSpec");
  TextErrorCollector collector(errors);
  gp::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  pb::SweepSpec spec;
  const bool ok = parser.ParseFromString(std::string(text), &spec);
  if (!errors.empty()) return std::move(errors).Take();
  if (!ok) return Only("SweepSpec", "not a valid text proto");
  return spec;
}

FieldErrorsOr<pb::SweepSpec> ParseSweepYaml(std::string_view yaml_text) {
  FieldErrors errors("SweepSpec");
  OJson document;
  try {
    const std::string text(yaml_text);
    const int docs = CountYamlDocuments(text);
    // yaml-cpp 0.7 accepts a quoted scalar left open at the end of the file when line breaks
    // follow it (they are folded into the scalar and the end of input is then never checked),
    // so `name: "x` swallows the rest of the file. Without the trailing breaks it reports
    // "illegal EOF in scalar": parse that too, and keep only that error.
    const size_t last = text.find_last_not_of(" \t\r\n");
    if (last != std::string::npos && last + 1 < text.size() &&
        text.find_first_of("\"'") != std::string::npos) {
      try {
        CountYamlDocuments(text.substr(0, last + 1));
      } catch (const YAML::ParserException& e) {
        if (e.msg == YAML::ErrorMsg::EOF_IN_SCALAR) throw;
      }
    }
    if (docs > 1) {
      return Only("SweepSpec",
                  "a sweep file holds one YAML document, found " + std::to_string(docs));
    }
    if (docs == 1) {
      YamlToJson walk(errors);
      document = walk.Document(YAML::Load(text));
      if (std::optional<FieldError> limit = walk.LimitError()) return std::vector{*limit};
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on syntax errors; this is its one boundary.
    return Only(
        "line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1),
        NoSemicolons(e.msg));
  } catch (const std::exception& e) {
    return Only("SweepSpec", "cannot read the YAML: " + NoSemicolons(e.what()));
  }
  return FromDocument(document, errors);  // adds the field errors to the duplicate keys
}

FieldErrorsOr<pb::SweepSpec> ParseSweepJson(std::string_view json_text) {
  OJson document;
  FieldErrors errors("SweepSpec");
  DuplicateKeyFinder duplicates(errors);
  try {
    document = OJson::parse(json_text, duplicates.Callback());
  } catch (const nlohmann::json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..."
    const std::string what = NoSemicolons(e.what());
    const size_t at = what.find(" at line ");
    const size_t colon = at == std::string::npos ? at : what.find(": ", at);
    if (colon == std::string::npos) return Only("SweepSpec", what);
    return Only(what.substr(at + 4, colon - at - 4), what.substr(colon + 2));
  } catch (const nlohmann::json::exception& e) {
    // out_of_range: a number beyond double ("1e999"), which the parser stops at. The message
    // has no position: name the field instead.
    std::string what = e.what();  // "[json.exception.out_of_range.406] number overflow ..."
    const size_t bracket = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) {
      what = what.substr(bracket + 2);
    }
    const std::string path = duplicates.CurrentPath();
    return Only(path.empty() ? std::string("SweepSpec") : path, NoSemicolons(what));
  }
  return FromDocument(document, errors);
}

}  // namespace rdattn::contract
