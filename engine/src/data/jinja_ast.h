// The parsed form of a template (jinja_parse.cpp builds it, jinja_render.cpp walks it). One
// node type for statements and expressions keeps the walker a pair of switches.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/jinja_value.h"

namespace lattice::jinja {

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Node {
  enum class Kind {
    // statements
    kBlock,   // children run in order
    kText,    // text
    kOutput,  // {{ a }}
    kIf,      // children: cond, body, cond, body, ..., [else body] (has_else)
    kFor,     // names = loop targets; a = iterable, b = filter (or null), c = body, d = else
    kSet,     // name = variable, attr = namespace attribute or "", a = value
    // expressions
    kLiteral,  // value
    kName,     // name
    kList,     // children
    kDict,     // children: key, value, key, value, ...
    kAttr,     // a.name
    kIndex,    // a[b]
    kSlice,    // a[b:c:d], each of b, c, d may be null
    kCall,     // a(children..., names[k] = kw_values[k])
    kFilter,   // a | name(children..., kw)
    kTest,     // a is [not] name(children...); negate
    kNot,      // not a
    kNeg,      // -a
    kBinary,   // a op b: op is "+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">",
               // ">=", "in", "not in", "and", "or"
    kCond,     // b if a else c (c may be null: Undefined)
  };
  Kind kind;
  int line = 0;
  std::string text;  // kText: the text; kName / kAttr / kFilter / kTest / kSet: the name
  std::string op;    // kBinary; kSet: the namespace attribute
  Value value;       // kLiteral
  NodePtr a, b, c, d;
  std::vector<NodePtr> children;
  std::vector<std::string> names;  // kFor: targets; kCall / kFilter: keyword names
  std::vector<NodePtr> kw_values;  // kCall / kFilter: keyword values
  bool has_else = false, negate = false;
};

inline NodePtr make_node(Node::Kind kind, int line) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

}  // namespace lattice::jinja
