// Errors as values at module boundaries (I/O, configuration, checkpoints): a Status is ok
// or carries one sentence a user can act on; Result<T> is a value or such a Status.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace lattice {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status invalid_argument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status io_error(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status corrupt(std::string msg) { return Status(Code::kCorrupt, std::move(msg)); }
  static Status internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
  // Memory (or another resource) ran out: the message names what and how much.
  static Status resource_exhausted(std::string msg) {
    return Status(Code::kResourceExhausted, std::move(msg));
  }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return message_; }

 private:
  enum class Code { kOk, kInvalidArgument, kIoError, kCorrupt, kInternal, kResourceExhausted };
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: must not be ok
  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace lattice
