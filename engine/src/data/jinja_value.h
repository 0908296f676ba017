// The values a chat template computes with: Python's None, bool, int, float, str, list and
// dict (string keys, insertion order), Jinja's Undefined and namespace(). Lists, dicts and
// namespaces are shared by reference, as in Python, so `set ns.x = ...` is seen by every holder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lattice::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // also a namespace's attributes

  static Value none() { return with(Kind::kNone); }
  static Value boolean(bool v) {
    Value x = with(Kind::kBool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = with(Kind::kInt);
    x.i = v;
    return x;
  }
  static Value real(double v) {
    Value x = with(Kind::kFloat);
    x.f = v;
    return x;
  }
  static Value string(std::string v) {
    Value x = with(Kind::kString);
    x.s = std::move(v);
    return x;
  }
  static Value new_list(List items = {}) {
    Value x = with(Kind::kList);
    x.list = std::make_shared<List>(std::move(items));
    return x;
  }
  static Value new_dict(Dict items = {}, Kind kind = Kind::kDict) {
    Value x = with(kind);
    x.dict = std::make_shared<Dict>(std::move(items));
    return x;
  }

  bool is(Kind k) const { return kind == k; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double number() const { return kind == Kind::kFloat ? f : kind == Kind::kBool ? b : double(i); }
  // The member `key` of a dict or namespace, or nullptr.
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);  // dict or namespace

 private:
  static Value with(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
};

bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
// What {{ v }} prints: str(v) in Python ("None", "True", "[1, 'a']"); Undefined prints "".
std::string to_output(const Value& v);
// Python's repr(v) (strings quoted with ').
std::string repr(const Value& v);
// json.dumps(v, ensure_ascii=False) with the default separators, as Hugging Face's tojson.
std::string to_json(const Value& v, int indent = -1);
// Python's type name, for error messages: "str", "list", "undefined", ...
const char* type_name(const Value& v);

}  // namespace lattice::jinja
