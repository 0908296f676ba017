// The subset of Jinja that chat templates use (Hugging Face renders them with jinja2,
// trim_blocks=True, lstrip_blocks=True), rendered byte for byte as jinja2 does: text and
// {{ }} / {% %} / {# #} with `-` whitespace control; if / elif / else, for (loop.index0, index,
// first, last, length, revindex, an `if` filter, else), set (also `set ns.attr`),
// generation blocks (rendered as their body); expressions with Python's literals, `if else`,
// or / and / not, comparisons, in, is [not] tests, + - * / // % ~, filters, subscripts and
// slices, attributes, calls of namespace(), range(), raise_exception() and the str / dict
// methods templates call. Anything else (macros, includes, call blocks, ...) is refused when
// parsed, with the template's line named. Not a sandbox for untrusted templates beyond that:
// there is no file or attribute access outside the values passed in.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "data/jinja_value.h"
#include "lattice/status.h"

namespace lattice::jinja {

struct Node;

class Template {
 public:
  // Errors read "<name> line N: <what>" (invalid_argument).
  static Result<Template> parse(std::string_view source, const std::string& name);
  // Renders with `variables` as the global names. A raise_exception(msg) in the template is an
  // invalid_argument "<name> line N: the template raised: msg".
  Result<std::string> render(const Dict& variables) const;

 private:
  std::shared_ptr<const Node> root_;
  std::string name_;
};

}  // namespace lattice::jinja
