// Template text -> syntax tree (jinja_ast.h): the source is cut into text and tags with
// jinja2's whitespace rules (trim_blocks, lstrip_blocks, `-` markers), then each tag's
// expression is parsed by precedence as jinja2's parser does.
#include <cctype>
#include <cstdlib>

#include "data/jinja_ast.h"
#include "data/jinja_template.h"

namespace lattice::jinja {

namespace {

struct Segment {
  enum class Type { kText, kOutput, kStatement } type;
  std::string body;
  int line = 0;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Where the tag opened at `open` ends (the index of its closing "}}", "%}" or "#}"), skipping
// quoted strings in expressions; npos when unterminated.
size_t find_close(std::string_view src, size_t open, char kind) {
  const char close = kind == '{' ? '}' : kind;
  char quote = 0;
  for (size_t i = open + 2; i + 1 < src.size(); i++) {
    const char c = src[i];
    if (kind == '#') {
      if (c == '#' && src[i + 1] == '}') return i;
      continue;
    }
    if (quote) {
      if (c == '\\')
        i++;
      else if (c == quote)
        quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == close && src[i + 1] == '}') {
      return i;
    }
  }
  return std::string_view::npos;
}

Status split(std::string_view src, const std::string& name, std::vector<Segment>& out) {
  size_t pos = 0;
  bool line_starting = true, strip_next = false;
  int line = 1;
  size_t line_counted = 0;
  auto line_at = [&](size_t at) {
    for (; line_counted < at; line_counted++) line += src[line_counted] == '\n';
    return line;
  };
  while (true) {
    size_t open = pos;
    while (true) {
      open = src.find('{', open);
      if (open == std::string_view::npos || open + 1 >= src.size()) {
        open = std::string_view::npos;
        break;
      }
      const char k = src[open + 1];
      if (k == '{' || k == '%' || k == '#') break;
      open++;
    }
    std::string text(
        src.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos));
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && is_space(text[k])) k++;
      text.erase(0, k);
    }
    if (open == std::string_view::npos) {
      if (!text.empty()) out.push_back({Segment::Type::kText, text, line_at(pos)});
      return Status::ok();
    }
    const char kind = src[open + 1];
    const char marker = open + 2 < src.size() ? src[open + 2] : 0;
    if (marker == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && marker != '+') {  // lstrip_blocks
      size_t l = text.rfind('\n');
      l = l == std::string::npos ? 0 : l + 1;
      bool blank = true;
      for (size_t k = l; k < text.size(); k++) blank &= text[k] == ' ' || text[k] == '\t';
      if ((l > 0 || line_starting) && blank) text.resize(l);
    }
    if (!text.empty()) out.push_back({Segment::Type::kText, text, line_at(pos)});
    const int tag_line = line_at(open);
    const size_t close = find_close(src, open, kind);
    if (close == std::string_view::npos)
      return Status::invalid_argument(name + " line " + std::to_string(tag_line) +
                                      ": the tag opened here is never closed");
    std::string body(src.substr(open + 2, close - open - 2));
    if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.erase(0, 1);
    strip_next = !body.empty() && body.back() == '-';
    if (strip_next) body.pop_back();
    pos = close + 2;
    line_starting = false;
    if (kind != '{' && !strip_next) {  // trim_blocks: the first newline after a block tag goes
      if (pos < src.size() && src[pos] == '\n')
        pos++, line_starting = true;
      else if (pos + 1 < src.size() && src[pos] == '\r' && src[pos + 1] == '\n')
        pos += 2, line_starting = true;
    }
    if (kind == '{') out.push_back({Segment::Type::kOutput, body, tag_line});
    if (kind == '%') out.push_back({Segment::Type::kStatement, body, tag_line});
  }
}

// ---- expressions ----

struct Token {
  enum class Type { kName, kInt, kFloat, kString, kOp, kEnd } type;
  std::string text;
};

class ExprParser {
 public:
  ExprParser(const std::string& body, int line, const std::string& name)
      : line_(line), name_(name) {
    lex(body);
  }
  const Status& status() const { return status_; }
  bool failed() const { return !status_.is_ok(); }
  bool at_end() const { return tokens_[at_].type == Token::Type::kEnd; }
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(at_ + ahead, tokens_.size() - 1)];
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* word, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::kName && peek(ahead).text == word;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    at_++;
    return true;
  }
  bool accept_name(const char* word) {
    if (!is_name(word)) return false;
    at_++;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "'" + found());
  }
  std::string expect_name() {
    if (peek().type != Token::Type::kName) {
      fail("expected a name" + found());
      return "";
    }
    return tokens_[at_++].text;
  }
  void fail(const std::string& what) {
    if (status_.is_ok())
      status_ = Status::invalid_argument(name_ + " line " + std::to_string(line_) + ": " + what);
  }
  std::string found() const {
    return at_end() ? ", found the end of the tag" : ", found '" + peek().text + "'";
  }

  // expression: or_expr ['if' or_expr ['else' expression]]
  NodePtr expression() {
    NodePtr x = or_expr();
    if (!failed() && accept_name("if")) {
      auto n = node(Node::Kind::kCond);
      n->b = x;
      n->a = or_expr();
      if (accept_name("else")) n->c = expression();
      return n;
    }
    return x;
  }

 private:
  NodePtr node(Node::Kind k) { return make_node(k, line_); }
  NodePtr binary(const std::string& op, NodePtr a, NodePtr b) {
    auto n = node(Node::Kind::kBinary);
    n->op = op;
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }
  NodePtr or_expr() {
    NodePtr x = and_expr();
    while (!failed() && accept_name("or")) x = binary("or", x, and_expr());
    return x;
  }
  NodePtr and_expr() {
    NodePtr x = not_expr();
    while (!failed() && accept_name("and")) x = binary("and", x, not_expr());
    return x;
  }
  NodePtr not_expr() {
    if (accept_name("not")) {
      auto n = node(Node::Kind::kNot);
      n->a = not_expr();
      return n;
    }
    return compare();
  }
  NodePtr compare() {
    NodePtr x = concat();
    while (!failed()) {
      static const char* kOps[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool matched = false;
      for (const char* op : kOps)
        if (accept_op(op)) {
          x = binary(op, x, concat());
          matched = true;
          break;
        }
      if (matched) continue;
      if (accept_name("in")) {
        x = binary("in", x, concat());
      } else if (is_name("not") && is_name("in", 1)) {
        at_ += 2;
        x = binary("not in", x, concat());
      } else {
        break;
      }
    }
    return x;
  }
  NodePtr concat() {
    NodePtr x = sum();
    while (!failed() && accept_op("~")) x = binary("~", x, sum());
    return x;
  }
  NodePtr sum() {
    NodePtr x = product();
    while (!failed()) {
      if (accept_op("+"))
        x = binary("+", x, product());
      else if (accept_op("-"))
        x = binary("-", x, product());
      else
        break;
    }
    return x;
  }
  NodePtr product() {
    NodePtr x = unary();
    while (!failed()) {
      if (accept_op("*"))
        x = binary("*", x, unary());
      else if (accept_op("//"))
        x = binary("//", x, unary());
      else if (accept_op("/"))
        x = binary("/", x, unary());
      else if (accept_op("%"))
        x = binary("%", x, unary());
      else if (is_op("**"))
        fail("'**' is not supported");
      else
        break;
    }
    return x;
  }
  NodePtr unary() {
    if (accept_op("-")) {
      auto n = node(Node::Kind::kNeg);
      n->a = unary();
      return filters(n);
    }
    if (accept_op("+")) return unary();
    return filters(postfix(primary()));
  }
  // Call arguments after '(' up to ')': positional into children, keywords into names/kw_values.
  void arguments(Node& n) {
    while (!failed() && !accept_op(")")) {
      if (!n.children.empty() || !n.names.empty()) expect_op(",");
      if (accept_op(")")) break;
      if (peek().type == Token::Type::kName && is_op("=", 1)) {
        n.names.push_back(tokens_[at_].text);
        at_ += 2;
        n.kw_values.push_back(expression());
      } else {
        n.children.push_back(expression());
      }
      if (at_end()) {
        fail("expected ')'" + found());
        break;
      }
    }
  }
  NodePtr filters(NodePtr x) {
    while (!failed()) {
      if (accept_op("|")) {
        auto n = node(Node::Kind::kFilter);
        n->a = x;
        n->text = expect_name();
        if (accept_op("(")) arguments(*n);
        x = n;
      } else if (accept_name("is")) {
        auto n = node(Node::Kind::kTest);
        n->a = x;
        n->negate = accept_name("not");
        n->text = expect_name();
        if (accept_op("(")) arguments(*n);
        x = n;
      } else {
        break;
      }
    }
    return x;
  }
  NodePtr postfix(NodePtr x) {
    while (!failed()) {
      if (accept_op(".")) {
        auto n = node(Node::Kind::kAttr);
        n->a = x;
        if (peek().type == Token::Type::kInt) {  // foo.0 is foo[0] in Jinja
          n->kind = Node::Kind::kIndex;
          n->b = node(Node::Kind::kLiteral);
          n->b->value = Value::integer(std::atoll(tokens_[at_++].text.c_str()));
        } else {
          n->text = expect_name();
        }
        x = n;
      } else if (accept_op("[")) {
        NodePtr parts[3];
        int colons = 0;
        while (!failed() && !accept_op("]")) {
          if (accept_op(":")) {
            if (++colons > 2) fail("a slice has at most two ':'");
            continue;
          }
          if (parts[colons]) fail("expected ']'" + found());
          parts[colons] = expression();
          if (at_end()) fail("expected ']'" + found());
        }
        auto n = node(colons ? Node::Kind::kSlice : Node::Kind::kIndex);
        n->a = x;
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
        if (!colons && !n->b) fail("empty subscript []");
        x = n;
      } else if (accept_op("(")) {
        auto n = node(Node::Kind::kCall);
        n->a = x;
        arguments(*n);
        x = n;
      } else {
        break;
      }
    }
    return x;
  }
  NodePtr primary() {
    const Token t = peek();
    if (failed()) return node(Node::Kind::kLiteral);
    auto lit = node(Node::Kind::kLiteral);
    switch (t.type) {
      case Token::Type::kEnd:
        fail("expected an expression, found the end of the tag");
        return lit;
      case Token::Type::kInt:
        at_++;
        lit->value = Value::integer(std::strtoll(t.text.c_str(), nullptr, 10));
        return lit;
      case Token::Type::kFloat:
        at_++;
        lit->value = Value::real(std::strtod(t.text.c_str(), nullptr));
        return lit;
      case Token::Type::kString: {
        at_++;
        std::string s = t.text;
        while (peek().type == Token::Type::kString) s += tokens_[at_++].text;  // 'a' 'b'
        lit->value = Value::string(s);
        return lit;
      }
      case Token::Type::kName: {
        at_++;
        if (t.text == "true" || t.text == "True")
          lit->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False")
          lit->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None")
          lit->value = Value::none();
        else {
          auto n = node(Node::Kind::kName);
          n->text = t.text;
          return n;
        }
        return lit;
      }
      case Token::Type::kOp:
        break;
    }
    if (accept_op("(")) {
      NodePtr x = expression();
      if (is_op(",")) fail("tuples are not supported");
      expect_op(")");
      return x;
    }
    if (accept_op("[")) {
      auto n = node(Node::Kind::kList);
      while (!failed() && !accept_op("]")) {
        if (!n->children.empty()) expect_op(",");
        if (accept_op("]")) break;
        n->children.push_back(expression());
        if (at_end()) fail("expected ']'" + found());
      }
      return n;
    }
    if (accept_op("{")) {
      auto n = node(Node::Kind::kDict);
      while (!failed() && !accept_op("}")) {
        if (!n->children.empty()) expect_op(",");
        if (accept_op("}")) break;
        n->children.push_back(expression());
        expect_op(":");
        n->children.push_back(expression());
        if (at_end()) fail("expected '}'" + found());
      }
      return n;
    }
    fail("unexpected '" + t.text + "'");
    return lit;
  }

  void lex(const std::string& s) {
    size_t i = 0;
    while (i < s.size() && status_.is_ok()) {
      const char c = s[i];
      if (is_space(c)) {
        i++;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) j++;
        tokens_.push_back({Token::Type::kName, s.substr(i, j - i)});
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) j++;
        bool real =
            j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]));
        if (real) {
          j++;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) j++;
        }
        std::string digits;
        for (size_t k = i; k < j; k++)
          if (s[k] != '_') digits += s[k];
        tokens_.push_back({real ? Token::Type::kFloat : Token::Type::kInt, digits});
        i = j;
      } else if (c == '\'' || c == '"') {
        std::string text;
        size_t j = i + 1;
        for (; j < s.size() && s[j] != c; j++) {
          if (s[j] != '\\' || j + 1 >= s.size()) {
            text += s[j];
            continue;
          }
          const char e = s[++j];
          switch (e) {
            case 'n':
              text += '\n';
              break;
            case 't':
              text += '\t';
              break;
            case 'r':
              text += '\r';
              break;
            case '0':
              text += '\0';
              break;
            case '\\':
            case '\'':
            case '"':
              text += e;
              break;
            case '\n':
              break;
            default:
              text += '\\';
              text += e;  // Python keeps unknown escapes
          }
        }
        if (j >= s.size()) {
          fail("unterminated string");
          return;
        }
        tokens_.push_back({Token::Type::kString, text});
        i = j + 1;
      } else {
        static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+",
                                     "-",  "*",  "/",  "%",  "~",  "|",  ".", ",", ":",
                                     "(",  ")",  "[",  "]",  "{",  "}",  "="};
        bool matched = false;
        for (const char* op : kOps) {
          const size_t n = std::char_traits<char>::length(op);
          if (s.compare(i, n, op) == 0) {
            tokens_.push_back({Token::Type::kOp, op});
            i += n;
            matched = true;
            break;
          }
        }
        if (!matched) fail(std::string("unexpected character '") + c + "'");
      }
    }
    tokens_.push_back({Token::Type::kEnd, ""});
  }

  std::vector<Token> tokens_;
  size_t at_ = 0;
  int line_;
  const std::string& name_;
  Status status_;
};

// ---- statements ----

class StatementParser {
 public:
  StatementParser(std::vector<Segment> segments, const std::string& name)
      : segments_(std::move(segments)), name_(name) {}

  // Parses until one of `ends` (a statement keyword) or the end of the template; returns the
  // keyword that stopped it in `stopped` (empty at the end).
  Result<NodePtr> block(const std::vector<std::string>& ends, std::string& stopped, size_t& at) {
    auto out = make_node(Node::Kind::kBlock, 0);
    stopped.clear();
    while (at < segments_.size()) {
      const Segment& seg = segments_[at];
      if (seg.type == Segment::Type::kText) {
        auto n = make_node(Node::Kind::kText, seg.line);
        n->text = seg.body;
        out->children.push_back(n);
        at++;
        continue;
      }
      ExprParser p(seg.body, seg.line, name_);
      if (p.failed()) return p.status();
      if (seg.type == Segment::Type::kOutput) {
        auto n = make_node(Node::Kind::kOutput, seg.line);
        n->a = p.expression();
        if (!p.failed() && !p.at_end()) p.fail("expected '}}'" + p.found());
        if (p.failed()) return p.status();
        out->children.push_back(n);
        at++;
        continue;
      }
      const std::string keyword = p.peek().type == Token::Type::kName ? p.peek().text : "";
      for (const std::string& e : ends)
        if (keyword == e) {
          stopped = keyword;
          return out;
        }
      at++;
      Result<NodePtr> n = statement(keyword, p, seg.line, at);
      if (!n) return n.status();
      out->children.push_back(*n);
    }
    return out;  // at the end: body() names the block left open
  }

 private:
  Status done(ExprParser& p) {
    if (!p.failed() && !p.at_end()) p.fail("expected '%}'" + p.found());
    return p.status();
  }
  // The body of `keyword` after its tag (at points past it), up to one of `ends`.
  Result<NodePtr> body(const std::vector<std::string>& ends, std::string& stopped, size_t& at,
                       int line, const std::string& keyword) {
    Result<NodePtr> b = block(ends, stopped, at);
    if (!b) return b.status();
    if (stopped.empty())
      return Status::invalid_argument(name_ + " line " + std::to_string(line) + ": '" + keyword +
                                      "' is never closed");
    return b;
  }
  // Consumes the closing tag `at` points to, which must be just the keyword.
  Status close_tag(size_t& at) {
    const Segment& seg = segments_[at++];
    ExprParser p(seg.body, seg.line, name_);
    p.expect_name();
    return done(p);
  }

  Result<NodePtr> statement(const std::string& keyword, ExprParser& p, int line, size_t& at) {
    std::string stopped;
    if (keyword == "if") {
      auto n = make_node(Node::Kind::kIf, line);
      p.accept_name("if");
      n->children.push_back(p.expression());
      if (Status s = done(p); !s) return s;
      while (true) {
        Result<NodePtr> b = body({"elif", "else", "endif"}, stopped, at, line, "if");
        if (!b) return b.status();
        n->children.push_back(*b);
        const Segment& seg = segments_[at++];
        ExprParser q(seg.body, seg.line, name_);
        q.expect_name();
        if (stopped == "elif") {
          n->children.push_back(q.expression());
          if (Status s = done(q); !s) return s;
        } else if (stopped == "else") {
          if (Status s = done(q); !s) return s;
          Result<NodePtr> e = body({"endif"}, stopped, at, line, "if");
          if (!e) return e.status();
          n->children.push_back(*e);
          n->has_else = true;
          if (Status s = close_tag(at); !s) return s;
          return n;
        } else {
          if (Status s = done(q); !s) return s;
          return n;
        }
      }
    }
    if (keyword == "for") {
      auto n = make_node(Node::Kind::kFor, line);
      p.accept_name("for");
      do n->names.push_back(p.expect_name());
      while (!p.failed() && p.accept_op(","));
      if (!p.failed() && !p.accept_name("in")) p.fail("expected 'in'" + p.found());
      if (p.failed()) return p.status();
      // The iterable stops before a filter's `if` (jinja2 parses it with no conditional).
      n->a = p.expression();
      if (n->a && n->a->kind == Node::Kind::kCond) {  // `for x in xs if cond`
        NodePtr cond = n->a;
        if (cond->c) p.fail("'else' in a for loop's filter");
        n->a = cond->b;
        n->b = cond->a;
      }
      if (p.is_name("recursive")) p.fail("recursive loops are not supported");
      if (Status s = done(p); !s) return s;
      Result<NodePtr> b = body({"else", "endfor"}, stopped, at, line, "for");
      if (!b) return b.status();
      n->c = *b;
      if (stopped == "else") {
        if (Status s = close_tag(at); !s) return s;
        Result<NodePtr> e = body({"endfor"}, stopped, at, line, "for");
        if (!e) return e.status();
        n->d = *e;
      }
      if (Status s = close_tag(at); !s) return s;
      return n;
    }
    if (keyword == "set") {
      auto n = make_node(Node::Kind::kSet, line);
      p.accept_name("set");
      n->text = p.expect_name();
      if (p.accept_op(".")) n->op = p.expect_name();
      if (!p.failed() && p.is_op(",")) p.fail("'set' with several targets is not supported");
      if (!p.failed() && !p.accept_op("=")) p.fail("block 'set' (without '=') is not supported");
      n->a = p.expression();
      if (Status s = done(p); !s) return s;
      return n;
    }
    if (keyword == "generation") {  // Hugging Face's assistant-mask marker: render the body
      p.accept_name("generation");
      if (Status s = done(p); !s) return s;
      Result<NodePtr> b = body({"endgeneration"}, stopped, at, line, "generation");
      if (!b) return b.status();
      if (Status s = close_tag(at); !s) return s;
      return b;
    }
    if (keyword.rfind("end", 0) == 0 || keyword == "elif" || keyword == "else")
      return Status::invalid_argument(name_ + " line " + std::to_string(line) + ": unexpected '" +
                                      keyword + "'");
    const std::string what =
        keyword.empty() ? "an empty or malformed statement" : "'" + keyword + "' statements";
    return Status::invalid_argument(name_ + " line " + std::to_string(line) + ": " + what +
                                    " are not supported by Lattice's Jinja subset");
  }

  std::vector<Segment> segments_;
  const std::string& name_;
};

}  // namespace

Result<Template> Template::parse(std::string_view source, const std::string& name) {
  std::vector<Segment> segments;
  if (Status s = split(source, name, segments); !s) return s;
  StatementParser parser(std::move(segments), name);
  std::string stopped;
  size_t at = 0;
  Result<NodePtr> root = parser.block({}, stopped, at);
  if (!root) return root.status();
  Template t;
  t.root_ = *root;
  t.name_ = name;
  return t;
}

}  // namespace lattice::jinja
