// Walks the syntax tree (jinja_ast.h) with jinja2's semantics: block scopes for loops (a
// `set` inside a for loop does not leak out, which is why templates use namespace()), Python
// operators, and the filters, tests and methods chat templates call. Errors name the line.
#include <algorithm>
#include <cmath>
#include <map>

#include "data/jinja_ast.h"
#include "data/jinja_template.h"

namespace lattice::jinja {

namespace {

using Kind = Value::Kind;

bool py_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

// Byte offsets of each code point of UTF-8 `s`, plus s.size() at the end.
std::vector<size_t> code_points(const std::string& s) {
  std::vector<size_t> at;
  for (size_t k = 0; k < s.size(); k++)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) at.push_back(k);
  at.push_back(s.size());
  return at;
}

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto strips = [&](unsigned char c) {
    return chars && chars->is(Kind::kString)
               ? chars->s.find(static_cast<char>(c)) != std::string::npos
               : py_space(c);
  };
  size_t a = 0, b = s.size();
  if (left)
    while (a < b && strips(static_cast<unsigned char>(s[a]))) a++;
  if (right)
    while (b > a && strips(static_cast<unsigned char>(s[b - 1]))) b--;
  return s.substr(a, b - a);
}

Value split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List parts;
  if (!sep || sep->is(Kind::kNone)) {  // runs of whitespace, no empty parts
    size_t k = 0;
    while (true) {
      while (k < s.size() && py_space(static_cast<unsigned char>(s[k]))) k++;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = s.size();
        while (e > k && py_space(static_cast<unsigned char>(s[e - 1]))) e--;
        parts.push_back(Value::string(s.substr(k, e - k)));
        break;
      }
      size_t e = k;
      while (e < s.size() && !py_space(static_cast<unsigned char>(s[e]))) e++;
      parts.push_back(Value::string(s.substr(k, e - k)));
      k = e;
    }
    return Value::new_list(std::move(parts));
  }
  size_t k = 0;
  while (true) {
    const size_t e = maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit
                         ? std::string::npos
                         : s.find(sep->s, k);
    if (e == std::string::npos) {
      parts.push_back(Value::string(s.substr(k)));
      break;
    }
    parts.push_back(Value::string(s.substr(k, e - k)));
    k = e + sep->s.size();
  }
  return Value::new_list(std::move(parts));
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t k = s.find(from); k != std::string::npos; k = s.find(from, k + to.size()))
    s.replace(k, from.size(), to);
  return s;
}

class Renderer {
 public:
  Renderer(const std::string& name, const Dict& globals) : name_(name) {
    scopes_.emplace_back();
    for (const auto& [k, v] : globals) scopes_.back()[k] = v;
  }

  Status run(const Node& root, std::string& out) {
    exec(root, out);
    return status_;
  }

 private:
  bool failed() const { return !status_.is_ok(); }
  Value fail(const Node& n, const std::string& what) {
    if (status_.is_ok())
      status_ = Status::invalid_argument(name_ + " line " + std::to_string(n.line) + ": " + what);
    return Value();
  }

  // ---- statements ----
  void exec(const Node& n, std::string& out) {
    if (failed()) return;
    switch (n.kind) {
      case Node::Kind::kBlock:
        for (const NodePtr& c : n.children) exec(*c, out);
        return;
      case Node::Kind::kText:
        out += n.text;
        return;
      case Node::Kind::kOutput: {
        Value v = eval(*n.a);
        if (!failed()) out += to_output(v);
        return;
      }
      case Node::Kind::kIf: {
        const size_t conditions = (n.children.size() - (n.has_else ? 1 : 0)) / 2;
        for (size_t k = 0; k < conditions; k++) {
          const bool take = truthy(eval(*n.children[2 * k]));
          if (failed()) return;
          if (take) return exec(*n.children[2 * k + 1], out);
        }
        if (n.has_else) exec(*n.children.back(), out);
        return;
      }
      case Node::Kind::kFor:
        return exec_for(n, out);
      case Node::Kind::kSet: {
        Value v = eval(*n.a);
        if (failed()) return;
        if (n.op.empty()) {
          scopes_.back()[n.text] = std::move(v);
          return;
        }
        Value* target = lookup(n.text);
        if (!target || !target->is(Kind::kNamespace)) {
          fail(n, "'" + n.text + "' is not a namespace(), so 'set " + n.text + "." + n.op +
                      "' cannot assign to it");
          return;
        }
        target->set(n.op, std::move(v));
        return;
      }
      default:
        fail(n, "internal: an expression where a statement was expected");
    }
  }

  void exec_for(const Node& n, std::string& out) {
    Value seq = eval(*n.a);
    if (failed()) return;
    List items;
    if (seq.is(Kind::kList))
      items = *seq.list;
    else if (seq.is(Kind::kDict))
      for (const auto& [k, v] : *seq.dict) items.push_back(Value::string(k));
    else if (seq.is(Kind::kString)) {
      const auto at = code_points(seq.s);
      for (size_t k = 0; k + 1 < at.size(); k++)
        items.push_back(Value::string(seq.s.substr(at[k], at[k + 1] - at[k])));
    } else if (!seq.is(Kind::kUndefined)) {  // jinja2 iterates an Undefined as empty
      fail(n, std::string("cannot loop over a ") + type_name(seq));
      return;
    }
    auto bind = [&](const Value& item) {
      auto& scope = scopes_.back();
      if (n.names.size() == 1) {
        scope[n.names[0]] = item;
        return true;
      }
      if (!item.is(Kind::kList) || item.list->size() != n.names.size()) {
        fail(n,
             "cannot unpack " + repr(item) + " into " + std::to_string(n.names.size()) + " names");
        return false;
      }
      for (size_t k = 0; k < n.names.size(); k++) scope[n.names[k]] = (*item.list)[k];
      return true;
    };
    if (n.b) {  // `for x in xs if cond`: the loop sees only the items that pass
      List kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        const bool keep = bind(item) && truthy(eval(*n.b));
        scopes_.pop_back();
        if (failed()) return;
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < length && !failed(); k++) {
      scopes_.emplace_back();
      if (bind(items[k])) {
        Dict loop = {{"index0", Value::integer(k)},
                     {"index", Value::integer(k + 1)},
                     {"revindex0", Value::integer(length - k - 1)},
                     {"revindex", Value::integer(length - k)},
                     {"first", Value::boolean(k == 0)},
                     {"last", Value::boolean(k == length - 1)},
                     {"length", Value::integer(length)}};
        loop.emplace_back("previtem", k > 0 ? items[k - 1] : Value());
        loop.emplace_back("nextitem", k + 1 < length ? items[k + 1] : Value());
        scopes_.back()["loop"] = Value::new_dict(std::move(loop));
        exec(*n.c, out);
      }
      scopes_.pop_back();
    }
    if (length == 0 && n.d) exec(*n.d, out);
  }

  Value* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return &found->second;
    }
    return nullptr;
  }

  // ---- expressions ----
  Value eval(const Node& n) {
    if (failed()) return Value();
    switch (n.kind) {
      case Node::Kind::kLiteral:
        return n.value;
      case Node::Kind::kName: {
        const Value* v = lookup(n.text);
        return v ? *v : Value();
      }
      case Node::Kind::kList: {
        List items;
        for (const NodePtr& c : n.children) items.push_back(eval(*c));
        return Value::new_list(std::move(items));
      }
      case Node::Kind::kDict: {
        Value d = Value::new_dict();
        for (size_t k = 0; k + 1 < n.children.size(); k += 2) {
          Value key = eval(*n.children[k]);
          if (!key.is(Kind::kString)) return fail(n, "dict keys must be strings here");
          d.set(key.s, eval(*n.children[k + 1]));
        }
        return d;
      }
      case Node::Kind::kAttr: {
        Value obj = eval(*n.a);
        if (obj.is(Kind::kUndefined))  // jinja2's Undefined raises on attribute access
          return fail(n, "an undefined value has no attribute '" + n.text + "'");
        if (const Value* v = obj.find(n.text)) return *v;
        return Value();  // jinja2: a missing attribute is Undefined
      }
      case Node::Kind::kIndex:
        return index(n, eval(*n.a), eval(*n.b));
      case Node::Kind::kSlice:
        return slice(n);
      case Node::Kind::kCall:
        return call(n);
      case Node::Kind::kFilter:
        return filter(n);
      case Node::Kind::kTest: {
        const bool r = test(n);
        return Value::boolean(n.negate ? !r : r);
      }
      case Node::Kind::kNot:
        return Value::boolean(!truthy(eval(*n.a)));
      case Node::Kind::kNeg: {
        Value v = eval(*n.a);
        if (v.is(Kind::kInt) || v.is(Kind::kBool))
          return Value::integer(-static_cast<int64_t>(v.number()));
        if (v.is(Kind::kFloat)) return Value::real(-v.f);
        return fail(n, std::string("bad operand type for unary -: ") + type_name(v));
      }
      case Node::Kind::kBinary:
        return binary(n);
      case Node::Kind::kCond:
        if (truthy(eval(*n.a))) return eval(*n.b);
        return n.c ? eval(*n.c) : Value();
      default:
        return fail(n, "internal: a statement where an expression was expected");
    }
  }

  Value index(const Node& n, const Value& obj, const Value& key) {
    if (failed()) return Value();
    if (obj.is(Kind::kDict) || obj.is(Kind::kNamespace)) {
      if (!key.is(Kind::kString)) return Value();
      const Value* v = obj.find(key.s);
      return v ? *v : Value();
    }
    if ((obj.is(Kind::kList) || obj.is(Kind::kString)) &&
        (key.is(Kind::kInt) || key.is(Kind::kBool))) {
      const std::vector<size_t> at =
          obj.is(Kind::kString) ? code_points(obj.s) : std::vector<size_t>();
      const int64_t size = obj.is(Kind::kList) ? static_cast<int64_t>(obj.list->size())
                                               : static_cast<int64_t>(at.size()) - 1;
      int64_t k = static_cast<int64_t>(key.number());
      if (k < 0) k += size;
      if (k < 0 || k >= size) return Value();  // jinja2: Undefined, not IndexError
      if (obj.is(Kind::kList)) return (*obj.list)[k];
      return Value::string(obj.s.substr(at[k], at[k + 1] - at[k]));
    }
    if (obj.is(Kind::kUndefined)) return fail(n, "cannot subscript an undefined value");
    return Value();
  }

  Value slice(const Node& n) {
    Value obj = eval(*n.a);
    Value bounds[3];
    const NodePtr* parts[3] = {&n.b, &n.c, &n.d};
    for (int k = 0; k < 3; k++)
      if (*parts[k]) {
        bounds[k] = eval(**parts[k]);
        if (!bounds[k].is(Kind::kInt) && !bounds[k].is(Kind::kNone))
          return fail(n, "slice bounds must be integers");
      }
    if (failed()) return Value();
    const bool is_list = obj.is(Kind::kList);
    if (!is_list && !obj.is(Kind::kString))
      return fail(n, std::string("cannot slice a ") + type_name(obj));
    const std::vector<size_t> at = is_list ? std::vector<size_t>() : code_points(obj.s);
    const int64_t size =
        is_list ? static_cast<int64_t>(obj.list->size()) : static_cast<int64_t>(at.size()) - 1;
    const int64_t step = bounds[2].is(Kind::kInt) ? bounds[2].i : 1;
    if (step == 0) return fail(n, "slice step cannot be zero");
    // Python's PySlice_AdjustIndices.
    auto adjust = [&](const Value& v, int64_t fallback) {
      if (!v.is(Kind::kInt)) return fallback;
      int64_t k = v.i;
      if (k < 0) {
        k += size;
        if (k < 0) k = step < 0 ? -1 : 0;
      } else if (k >= size) {
        k = step < 0 ? size - 1 : size;
      }
      return k;
    };
    const int64_t start = adjust(bounds[0], step < 0 ? size - 1 : 0);
    const int64_t stop = adjust(bounds[1], step < 0 ? -1 : size);
    List items;
    std::string text;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (is_list)
        items.push_back((*obj.list)[k]);
      else
        text += obj.s.substr(at[k], at[k + 1] - at[k]);
    }
    return is_list ? Value::new_list(std::move(items)) : Value::string(std::move(text));
  }

  // Positional then keyword arguments of a call or filter, evaluated.
  struct Args {
    std::vector<Value> pos;
    std::map<std::string, Value> kw;
    const Value* get(size_t k, const char* name) const {
      if (k < pos.size()) return &pos[k];
      auto it = kw.find(name);
      return it == kw.end() ? nullptr : &it->second;
    }
  };
  Args args_of(const Node& n) {
    Args a;
    for (const NodePtr& c : n.children) a.pos.push_back(eval(*c));
    for (size_t k = 0; k < n.names.size(); k++) a.kw[n.names[k]] = eval(*n.kw_values[k]);
    return a;
  }

  Value call(const Node& n) {
    if (n.a->kind == Node::Kind::kAttr) {  // a method: obj.name(...)
      Value obj = eval(*n.a->a);
      Args a = args_of(n);
      if (failed()) return Value();
      return method(n, obj, n.a->text, a);
    }
    if (n.a->kind != Node::Kind::kName || lookup(n.a->text))
      return fail(n, "only namespace(), range(), raise_exception() and methods can be called");
    const std::string& f = n.a->text;
    Args a = args_of(n);
    if (failed()) return Value();
    if (f == "namespace") {
      Value ns = Value::new_dict({}, Kind::kNamespace);
      for (const Value& p : a.pos)
        if (p.is(Kind::kDict))
          for (const auto& [k, v] : *p.dict) ns.set(k, v);
      for (const auto& [k, v] : a.kw) ns.set(k, v);
      return ns;
    }
    if (f == "raise_exception") {
      const Value* msg = a.get(0, "message");
      return fail(n, "the template raised: " + (msg ? to_output(*msg) : std::string()));
    }
    if (f == "range") {
      int64_t lo = 0, hi = 0, step = 1;
      for (const Value& p : a.pos)
        if (!p.is(Kind::kInt)) return fail(n, "range() takes integers");
      if (a.pos.size() == 1)
        hi = a.pos[0].i;
      else if (a.pos.size() >= 2)
        lo = a.pos[0].i, hi = a.pos[1].i;
      if (a.pos.size() == 3) step = a.pos[2].i;
      if (a.pos.empty() || a.pos.size() > 3 || step == 0)
        return fail(n, "range() takes 1 to 3 arguments, step not 0");
      List items;
      for (int64_t k = lo; step > 0 ? k < hi : k > hi; k += step)
        items.push_back(Value::integer(k));
      return Value::new_list(std::move(items));
    }
    return fail(n, "unknown function '" + f + "'");
  }

  Value method(const Node& n, const Value& obj, const std::string& m, const Args& a) {
    if (obj.is(Kind::kString)) {
      const std::string& s = obj.s;
      if (m == "startswith" || m == "endswith") {
        const Value* p = a.get(0, "prefix");
        if (!p || !p->is(Kind::kString)) return fail(n, m + "() takes a string here");
        const std::string& x = p->s;
        const bool r = x.size() <= s.size() &&
                       (m == "startswith" ? s.compare(0, x.size(), x) == 0
                                          : s.compare(s.size() - x.size(), x.size(), x) == 0);
        return Value::boolean(r);
      }
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const Value* chars = a.get(0, "chars");
        if (chars && chars->is(Kind::kNone)) chars = nullptr;
        return Value::string(strip(s, chars, m != "rstrip", m != "lstrip"));
      }
      if (m == "split") {
        const Value* sep = a.get(0, "sep");
        const Value* maxsplit = a.get(1, "maxsplit");
        if (sep && sep->is(Kind::kString) && sep->s.empty())
          return fail(n, "split() with an empty separator");
        return split(s, sep, maxsplit && maxsplit->is(Kind::kInt) ? maxsplit->i : -1);
      }
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r)
          c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                             : std::tolower(static_cast<unsigned char>(c)));
        return Value::string(r);
      }
      if (m == "replace") {
        const Value* from = a.get(0, "old");
        const Value* to = a.get(1, "new");
        if (!from || !to || !from->is(Kind::kString) || !to->is(Kind::kString))
          return fail(n, "replace() takes two strings");
        return Value::string(replace_all(s, from->s, to->s));
      }
    }
    if (obj.is(Kind::kDict)) {
      if (m == "items" || m == "keys" || m == "values") {
        List items;
        for (const auto& [k, v] : *obj.dict) {
          if (m == "items")
            items.push_back(Value::new_list({Value::string(k), v}));
          else
            items.push_back(m == "keys" ? Value::string(k) : v);
        }
        return Value::new_list(std::move(items));
      }
      if (m == "get") {
        const Value* key = a.get(0, "key");
        const Value* fallback = a.get(1, "default");
        const Value* v = key && key->is(Kind::kString) ? obj.find(key->s) : nullptr;
        return v ? *v : fallback ? *fallback : Value::none();
      }
    }
    return fail(n, std::string("the method ") + type_name(obj) + "." + m + "() is not supported");
  }

  Value filter(const Node& n) {
    Value v = eval(*n.a);
    Args a = args_of(n);
    if (failed()) return Value();
    const std::string& f = n.text;
    if (f == "length" || f == "count") {
      if (v.is(Kind::kString))
        return Value::integer(static_cast<int64_t>(code_points(v.s).size()) - 1);
      if (v.is(Kind::kList)) return Value::integer(static_cast<int64_t>(v.list->size()));
      if (v.is(Kind::kDict)) return Value::integer(static_cast<int64_t>(v.dict->size()));
      if (v.is(Kind::kUndefined)) return Value::integer(0);
      return fail(n, std::string("a ") + type_name(v) + " has no length");
    }
    if (f == "trim") {
      const Value* chars = a.get(0, "chars");
      return Value::string(strip(to_output(v), chars, true, true));
    }
    if (f == "tojson") {
      const Value* indent = a.get(0, "indent");
      return Value::string(
          to_json(v, indent && indent->is(Kind::kInt) ? static_cast<int>(indent->i) : -1));
    }
    if (f == "string") return Value::string(to_output(v));
    if (f == "safe") return v;
    if (f == "upper" || f == "lower" || f == "replace")
      return method(n, Value::string(to_output(v)), f, a);
    if (f == "default" || f == "d") {
      const Value* fallback = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      const bool use = v.is(Kind::kUndefined) || (boolean && truthy(*boolean) && !truthy(v));
      return use ? (fallback ? *fallback : Value::string("")) : v;
    }
    if (f == "first" || f == "last") {
      if (v.is(Kind::kList)) {
        if (v.list->empty()) return Value();
        return f == "first" ? v.list->front() : v.list->back();
      }
      if (v.is(Kind::kString)) return index(n, v, Value::integer(f == "first" ? 0 : -1));
      return fail(n, std::string("'") + f + "' of a " + type_name(v));
    }
    if (f == "join") {
      const Value* sep = a.get(0, "d");
      if (!v.is(Kind::kList)) return fail(n, std::string("'join' of a ") + type_name(v));
      std::string out;
      for (size_t k = 0; k < v.list->size(); k++) {
        if (k && sep) out += to_output(*sep);
        out += to_output((*v.list)[k]);
      }
      return Value::string(out);
    }
    if (f == "list") {
      if (v.is(Kind::kList)) return Value::new_list(*v.list);
      if (v.is(Kind::kString)) {
        List items;
        const auto at = code_points(v.s);
        for (size_t k = 0; k + 1 < at.size(); k++)
          items.push_back(Value::string(v.s.substr(at[k], at[k + 1] - at[k])));
        return Value::new_list(std::move(items));
      }
    }
    if (f == "items" && v.is(Kind::kDict)) return method(n, v, "items", a);
    if (f == "int") {
      if (v.is(Kind::kString))
        return Value::integer(std::atoll(strip(v.s, nullptr, true, true).c_str()));
      if (v.is_number()) return Value::integer(static_cast<int64_t>(v.number()));
      return Value::integer(0);
    }
    return fail(n, "the filter '" + f + "' is not supported by Lattice's Jinja subset");
  }

  bool test(const Node& n) {
    const std::string& t = n.text;
    if (t == "defined" || t == "undefined") {
      Value v = eval(*n.a);
      return v.is(Kind::kUndefined) == (t == "undefined");
    }
    Value v = eval(*n.a);
    Args a = args_of(n);
    if (failed()) return false;
    if (t == "none") return v.is(Kind::kNone);
    if (t == "string") return v.is(Kind::kString);
    if (t == "number") return v.is(Kind::kInt) || v.is(Kind::kFloat);
    if (t == "integer") return v.is(Kind::kInt);
    if (t == "float") return v.is(Kind::kFloat);
    if (t == "boolean") return v.is(Kind::kBool);
    if (t == "true") return v.is(Kind::kBool) && v.b;
    if (t == "false") return v.is(Kind::kBool) && !v.b;
    if (t == "mapping") return v.is(Kind::kDict);
    if (t == "sequence") return v.is(Kind::kList) || v.is(Kind::kString) || v.is(Kind::kDict);
    if (t == "iterable") return v.is(Kind::kList) || v.is(Kind::kString) || v.is(Kind::kDict);
    if (t == "odd" || t == "even") return v.is(Kind::kInt) && (v.i % 2 != 0) == (t == "odd");
    if (t == "eq" || t == "equalto" || t == "==") return !a.pos.empty() && equal(v, a.pos[0]);
    if (t == "ne" || t == "!=") return !a.pos.empty() && !equal(v, a.pos[0]);
    fail(n, "the test '" + t + "' is not supported by Lattice's Jinja subset");
    return false;
  }

  Value binary(const Node& n) {
    const std::string& op = n.op;
    if (op == "and") {
      Value l = eval(*n.a);
      return truthy(l) ? eval(*n.b) : l;
    }
    if (op == "or") {
      Value l = eval(*n.a);
      return truthy(l) ? l : eval(*n.b);
    }
    Value l = eval(*n.a), r = eval(*n.b);
    if (failed()) return Value();
    if (op == "~") return Value::string(to_output(l) + to_output(r));
    if (op == "==") return Value::boolean(equal(l, r));
    if (op == "!=") return Value::boolean(!equal(l, r));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is(Kind::kString) && l.is(Kind::kString))
        found = r.s.find(l.s) != std::string::npos;
      else if (r.is(Kind::kList))
        found = std::any_of(r.list->begin(), r.list->end(),
                            [&](const Value& x) { return equal(l, x); });
      else if (r.is(Kind::kUndefined))  // iterates as empty
        found = false;
      else if (r.is(Kind::kDict) || r.is(Kind::kNamespace))
        found = l.is(Kind::kString) && r.find(l.s);
      else
        return fail(n, std::string("'in' needs a string, list or dict on the right, not a ") +
                           type_name(r));
      return Value::boolean(op == "in" ? found : !found);
    }
    const bool numbers = l.is_number() && r.is_number();
    const bool ints = numbers && !l.is(Kind::kFloat) && !r.is(Kind::kFloat);
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c;
      if (numbers)
        c = l.number() < r.number() ? -1 : l.number() > r.number() ? 1 : 0;
      else if (l.is(Kind::kString) && r.is(Kind::kString))
        c = l.s.compare(r.s) < 0 ? -1 : l.s == r.s ? 0 : 1;
      else
        return fail(n, "'" + op + "' between a " + type_name(l) + " and a " + type_name(r));
      return Value::boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    if (op == "+") {
      if (l.is(Kind::kString) && r.is(Kind::kString)) return Value::string(l.s + r.s);
      if (l.is(Kind::kList) && r.is(Kind::kList)) {
        List items = *l.list;
        items.insert(items.end(), r.list->begin(), r.list->end());
        return Value::new_list(std::move(items));
      }
    }
    if (op == "*" &&
        ((l.is(Kind::kString) && r.is(Kind::kInt)) || (l.is(Kind::kInt) && r.is(Kind::kString)))) {
      const Value& s = l.is(Kind::kString) ? l : r;
      std::string out;
      for (int64_t k = 0; k < (l.is(Kind::kInt) ? l.i : r.i); k++) out += s.s;
      return Value::string(out);
    }
    if (!numbers)
      return fail(
          n, "unsupported operand types for " + op + ": " + type_name(l) + " and " + type_name(r));
    const double x = l.number(), y = r.number();
    if (op == "+") return ints ? Value::integer(int64_t(x) + int64_t(y)) : Value::real(x + y);
    if (op == "-") return ints ? Value::integer(int64_t(x) - int64_t(y)) : Value::real(x - y);
    if (op == "*") return ints ? Value::integer(int64_t(x) * int64_t(y)) : Value::real(x * y);
    if (y == 0 && (op == "/" || op == "//" || op == "%")) return fail(n, "division by zero");
    if (op == "/") return Value::real(x / y);
    if (op == "//")
      return ints ? Value::integer(static_cast<int64_t>(std::floor(x / y)))
                  : Value::real(std::floor(x / y));
    if (op == "%") {
      if (ints) {
        int64_t m = int64_t(x) % int64_t(y);
        if (m != 0 && ((m < 0) != (int64_t(y) < 0))) m += int64_t(y);
        return Value::integer(m);
      }
      return Value::real(x - y * std::floor(x / y));
    }
    return fail(n, "unsupported operator " + op);
  }

  std::string name_;
  std::vector<std::map<std::string, Value>> scopes_;
  Status status_;
};

}  // namespace

Result<std::string> Template::render(const Dict& variables) const {
  Renderer r(name_, variables);
  std::string out;
  if (Status s = r.run(*root_, out); !s) return s;
  return out;
}

}  // namespace lattice::jinja
