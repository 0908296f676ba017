// JSONL field extraction for the preprocessing tool (jsonl.h). A SAX pass over the line keeps
// only the wanted member, so no document tree is built, and every error, a number too large
// for a double included, reports its column.
#include "data/jsonl.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace lattice {

namespace {

using nlohmann::json;

// The reason as ASCII of bounded length: nlohmann quotes the bytes last read, which may be
// invalid UTF-8 or a whole unterminated string. Bytes >= 0x80 are shown as <FF>.
std::string printable(const std::string& text) {
  constexpr size_t kMaxLength = 200;
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= kMaxLength) return out + "...";
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += '<';
      out += kHex[c >> 4];
      out += kHex[c & 15];
      out += '>';
    }
  }
  return out;
}

// Records the type of the root and the type (and, for a string, the value) of the last
// top-level member named `key`: of repeated keys the last wins, as in Python's json.loads.
// Type names are nlohmann's ("null", "boolean", "number", ...).
class FieldFinder final : public json::json_sax_t {
 public:
  explicit FieldFinder(const std::string& key) : key_(key) {}

  bool null() override { return value("null"); }
  bool boolean(bool) override { return value("boolean"); }
  bool number_integer(number_integer_t) override { return value("number"); }
  bool number_unsigned(number_unsigned_t) override { return value("number"); }
  bool number_float(number_float_t, const string_t&) override { return value("number"); }
  bool string(string_t& text) override {
    if (depth_ == 1 && wanted_) field_ = std::move(text);
    return value("string");
  }
  bool binary(binary_t&) override { return value("binary"); }
  bool start_object(std::size_t) override {
    value("object");
    depth_++;
    return true;
  }
  bool start_array(std::size_t) override {
    value("array");
    depth_++;
    return true;
  }
  bool end_object() override {
    depth_--;
    return true;
  }
  bool end_array() override {
    depth_--;
    return true;
  }
  bool key(string_t& name) override {
    if (depth_ == 1) wanted_ = name == key_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const json::exception& e) override {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 7: syntax
    // error ..." or "[json.exception.out_of_range.406] number overflow parsing '1e999'":
    // keep the reason, the column is reported separately.
    std::string what = e.what();
    what = what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2);
    if (what.starts_with("parse error") && what.find(": ") != std::string::npos)
      what = what.substr(what.find(": ") + 2);
    error_ = "invalid JSON at column " + std::to_string(position) + ": " + printable(what);
    return false;
  }

  const std::string& error() const { return error_; }
  const char* root_type() const { return root_type_; }
  const char* field_type() const { return field_type_; }
  std::string& field() { return field_; }

 private:
  bool value(const char* type) {
    if (depth_ == 0) root_type_ = type;
    if (depth_ == 1 && wanted_) {
      field_type_ = type;
      wanted_ = false;
    }
    return true;
  }

  const std::string& key_;
  int depth_ = 0;
  bool wanted_ = false;  // the next value at depth 1 belongs to `key`
  const char* root_type_ = nullptr;
  const char* field_type_ = nullptr;
  std::string field_;
  std::string error_;
};

}  // namespace

Result<std::string> jsonl_field(std::string_view line, const std::string& key) {
  FieldFinder finder(key);
  if (!json::sax_parse(line.begin(), line.end(), &finder))
    return Status::corrupt(finder.error().empty() ? "invalid JSON" : finder.error());
  if (std::string_view(finder.root_type()) != "object")
    return Status::invalid_argument(std::string("the line holds a JSON ") + finder.root_type() +
                                    ", not an object with a \"" + key + "\" key");
  if (!finder.field_type())
    return Status::invalid_argument("the line's JSON object has no \"" + key + "\" key");
  if (std::string_view(finder.field_type()) != "string")
    return Status::invalid_argument("\"" + key + "\" holds a JSON " + finder.field_type() +
                                    ", not a string");
  return std::move(finder.field());
}

bool read_jsonl_batch(std::istream& in, size_t max_lines, size_t& number, size_t& bytes,
                      JsonlBatch& batch) {
  batch.lines.clear();
  batch.numbers.clear();
  std::string line;
  while (batch.lines.size() < max_lines) {
    if (!std::getline(in, line)) return false;
    number++;
    bytes += line.size() + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    batch.lines.push_back(std::move(line));
    batch.numbers.push_back(number);
  }
  return true;
}

}  // namespace lattice
