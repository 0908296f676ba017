// Typed, range-checked reads of request fields (serve_fields.h).
#include "serve_fields.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace lattice::cli {

namespace {

using json = nlohmann::json;

// The value as the client wrote it, shortened: messages quote what was sent.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool within(double v, Bound min, Bound max) {
  const bool above = min.inclusive ? v >= min.value : v > min.value;
  const bool below = max.inclusive ? v <= max.value : v < max.value;
  return above && below;
}

}  // namespace

RequestFields::RequestFields(const json& body, bool null_is_absent)
    : body_(body), null_is_absent_(null_is_absent) {}

bool RequestFields::has(const char* name) const {
  const auto it = body_.find(name);
  return it != body_.end() && !(null_is_absent_ && it->is_null());
}

const json* RequestFields::field(const char* name) {
  if (error_ || !has(name)) return nullptr;
  return &body_.at(name);
}

void RequestFields::fail(const char* name, std::string message) {
  if (error_) return;
  error_ = ApiError{};
  error_->message = std::move(message);
  error_->param = name;
}

std::optional<int64_t> RequestFields::integer(const char* name, int64_t min, int64_t max) {
  const json* v = field(name);
  if (!v) return std::nullopt;
  // Unsigned JSON integers above INT64_MAX are out of every range here; the others compare
  // as int64 before the caller narrows them.
  const bool in_range =
      v->is_number_unsigned()
          ? v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) && v->get<int64_t>() >= min &&
                v->get<int64_t>() <= max
          : v->is_number_integer() && v->get<int64_t>() >= min && v->get<int64_t>() <= max;
  if (!in_range) {
    fail(name, std::string(name) + " must be an integer from " + std::to_string(min) + " to " +
                   std::to_string(max) + ", not " + shown(*v));
    return std::nullopt;
  }
  return v->get<int64_t>();
}

std::optional<double> RequestFields::number(const char* name, Bound min, Bound max) {
  const json* v = field(name);
  if (!v) return std::nullopt;
  if (!v->is_number() || !within(v->get<double>(), min, max)) {
    fail(name, std::string(name) + " must be a number in " + (min.inclusive ? "[" : "(") +
                   number_text(min.value) + ", " + number_text(max.value) +
                   (max.inclusive ? "]" : ")") + ", not " + shown(*v));
    return std::nullopt;
  }
  return v->get<double>();
}

std::optional<bool> RequestFields::boolean(const char* name) {
  const json* v = field(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    fail(name, std::string(name) + " must be true or false, not " + shown(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> RequestFields::string(const char* name) {
  const json* v = field(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    fail(name, std::string(name) + " must be a string, not " + shown(*v));
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<std::vector<std::string>> RequestFields::strings(const char* name, bool single,
                                                               size_t min, size_t max) {
  const json* v = field(name);
  if (!v) return std::nullopt;
  const std::string kind = std::string(name) + (single ? " must be a string or a list of strings"
                                                       : " must be a list of strings");
  if (single && v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) {
    fail(name, kind + ", not " + shown(*v));
    return std::nullopt;
  }
  if (v->size() < min) {
    fail(name, std::string(name) + " is an empty list");
    return std::nullopt;
  }
  if (v->size() > max) {
    fail(name, std::string(name) + " has " + std::to_string(v->size()) + " entries; at most " +
                   std::to_string(max));
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (const json& s : *v) {
    if (!s.is_string()) {
      fail(name, kind + ", not a list holding " + shown(s));
      return std::nullopt;
    }
    out.push_back(s.get<std::string>());
  }
  return out;
}

void RequestFields::unsupported_unless(const char* name, const json& off_value) {
  const json* v = field(name);
  if (v && *v != off_value)
    fail(name, std::string(name) + " " + shown(*v) + " is not supported by lattice serve (only " +
                   shown(off_value) + ")");
}

}  // namespace lattice::cli
