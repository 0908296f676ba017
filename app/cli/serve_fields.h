// The one validation layer for the fields of `lattice serve`'s request bodies (serve_api.h):
// each read checks a field's JSON type and range and, on the first failure, keeps an ApiError
// that names the field (OpenAI's `param`) and the value it got. Integers must be JSON integers
// (5.0 is not one) and are compared in 64 bits before any narrowing, so 4294967297 never wraps.
// Not a schema engine: the APIs' rules across fields (top_k with top_p) stay in serve_api.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lattice::cli {

// An error answer of either API: the HTTP status and OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault; "" for none (null)
  std::string type = "invalid_request_error";
  std::string code;  // "" for none (null)
};

// A closed or open bound of a number field.
struct Bound {
  double value;
  bool inclusive = true;
};

class RequestFields {
 public:
  // `body` must outlive this. `null_is_absent`: OpenAI reads null as "the default"; Megatron's
  // server rejects null like any other wrong type.
  RequestFields(const nlohmann::json& body, bool null_is_absent);

  // Whether the field is there (and not null where null means absent).
  bool has(const char* name) const;
  // Each read returns nothing when the field is absent or after a failure (then ok() is false);
  // once a read failed, later reads return nothing and keep the first error.
  std::optional<int64_t> integer(const char* name, int64_t min, int64_t max);
  std::optional<double> number(const char* name, Bound min, Bound max);
  std::optional<bool> boolean(const char* name);
  std::optional<std::string> string(const char* name);
  // A list of `min` to `max` strings, or (`single`) one bare string.
  std::optional<std::vector<std::string>> strings(const char* name, bool single, size_t min,
                                                  size_t max);
  // A field the server does not implement: accepted only at the value that means "off".
  void unsupported_unless(const char* name, const nlohmann::json& off_value);
  // Records a failure on `name` (first one wins).
  void fail(const char* name, std::string message);

  bool ok() const { return !error_; }
  const ApiError& error() const { return *error_; }

 private:
  const nlohmann::json* field(const char* name);

  const nlohmann::json& body_;
  bool null_is_absent_;
  std::optional<ApiError> error_;
};

}  // namespace lattice::cli
