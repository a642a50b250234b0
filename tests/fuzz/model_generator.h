#pragma once
// A structure-aware source of model documents for the loader fuzzer: fuzz bytes choose, one
// decision at a time, the axes (mostly small sizes, sometimes extreme ones), parameters with
// values, init rules and constraints, a graph of registered ops with attributes from the model
// format's own attribute table, control-flow nodes with bodies, and now and then deep nesting.
// Most documents are valid or nearly so, so that the fuzzer spends its time past the parser.
#include <fuzzer/FuzzedDataProvider.h>

#include <nlohmann/json.hpp>

namespace tenax::fuzz {

/// A model document (format 1) decided by `bytes`.
nlohmann::json generate_model(FuzzedDataProvider& bytes);

}  // namespace tenax::fuzz
