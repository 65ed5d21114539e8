// Internal to the contract library: checks and normalises a JSON document against a message
// descriptor before protobuf's JSON parser reads it. Unknown fields (with a "did you mean"
// hint), fields given twice (snake_case and camelCase), wrong kinds of value, integers out of
// range and unknown enum values are all reported, each as "field.path: reason". Scalars are
// converted to what the field needs: YAML gives every scalar as a string, so `seeds: [1, 2]`,
// `2_000_158_720`, `6e-4`, `.inf`, `true` and enum short names (`gpu` for HARDWARE_KIND_GPU)
// all work; 64-bit integers come out as decimal strings, as proto3 JSON prints them.
#pragma once

#include <google/protobuf/descriptor.h>

#include <nlohmann/json.hpp>

#include "common/field_error.h"

namespace rdattn::contract::internal {

// The normalised document (an object of the message's fields, by proto name; nulls dropped).
// Problems go to `errors`; the fields that had them are left out of the result.
nlohmann::ordered_json NormalizeJson(const nlohmann::ordered_json& document,
                                     const google::protobuf::Descriptor* descriptor,
                                     FieldErrors& errors);

}  // namespace rdattn::contract::internal
