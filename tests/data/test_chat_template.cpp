// Specification of chat templates and SFT data: the Jinja subset renders Llama 3's and Qwen 3's
// real templates (and the built-ins, and templates exercising each construct) byte for byte as
// Python's jinja2 does with Hugging Face's settings; the loss mask covers exactly each
// assistant message and the token that ends its turn; bad lines are refused naming the line;
// `lattice data preprocess --sft` writes tokens and mask datasets that read back equal.
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/escaped.h"
#include "common/files.h"
#include "common/process.h"
#include "data/chat_data.h"
#include "data/chat_template.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sentencepiece_tokenizer.h"

using lattice::ChatMessage;
using lattice::ChatTemplate;
using lattice::Conversation;
using lattice::testing::escaped;
using lattice::testing::slurp;
using lattice::testing::spit;
using nlohmann::json;

namespace {

const std::string kReference = LATTICE_SOURCE_DIR "/tests/data/chat_template_reference.py";

std::string hf_dir(const char* model) {
  return lattice::hf_tokenizers_dir() + "/" + model;
}
bool have_hf() {
  return std::filesystem::exists(hf_dir("llama3") + "/tokenizer_config.json") &&
         std::filesystem::exists(hf_dir("qwen3") + "/tokenizer_config.json");
}

// Conversations both renderers see; the last ones end with a user message (rendering only).
const json kConversations = json::parse(R"([
  [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi there. How can I help?"}],
  [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"},
   {"role": "assistant", "content": "4"}],
  [{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "Repeat after me: blue fish"},
   {"role": "assistant", "content": "blue fish"}, {"role": "user", "content": "What comes after seven?"},
   {"role": "assistant", "content": "eight"}, {"role": "user", "content": "Thanks"},
   {"role": "assistant", "content": "You are welcome."}],
  [{"role": "user", "content": "  padded\n\n"}, {"role": "assistant", "content": "\n  line one\nline two  \n"}],
  [{"role": "user", "content": "Caf\u00e9 \u65e5\u672c \ud83d\ude00"}, {"role": "assistant", "content": "\u00dcn\u00efc\u00f6d\u00e9 \u2014 ok"}],
  [{"role": "user", "content": "say nothing"}, {"role": "assistant", "content": ""}],
  [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nreasoning here\n</think>\n\nThe answer."}],
  [{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>x</think>y"},
   {"role": "user", "content": "b"}, {"role": "assistant", "content": "z"}],
  [{"role": "user", "content": "hi"}],
  [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
   {"role": "user", "content": "u2"}]
])");

Conversation to_messages(const json& conversation) {
  Conversation out;
  for (const json& m : conversation) out.push_back({m["role"], m["content"]});
  return out;
}

// Templates exercising the subset's constructs one by one, rendered by both sides.
const char* const kFeatureTemplates[] = {
    // loops over a reversed slice, loop variables, filters on attributes and subscripts
    "{% for m in messages[::-1] %}{{ loop.index }}/{{ loop.length }} {{ m.role|upper }}:"
    "{{ m['content']|length }}{% if not loop.last %}, {% endif %}{% endfor %}",
    // namespace, set in a loop, a filtered loop, ~, slices, integer arithmetic
    "{%- set ns = namespace(n=0, s='') %}\n"
    "{%- for m in messages if m.role != 'system' %}\n"
    "  {%- set ns.n = ns.n + 1 %}\n"
    "  {%- set ns.s = ns.s ~ m.content[:3] ~ '|' %}\n"
    "{%- endfor %}\n"
    "{{ ns.n }} {{ ns.s }} {{ messages|length // 2 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ 3 / 2 }} "
    "{{ 1 + 2 * 3 - 4 }} {{ 'x' if messages|length > 100 else 'y' }}",
    // tojson, tests, literals, in, str methods, default
    "{{ {'a': 1, 'b': [true, none, 'x\"y\\n'], 'c': 2.5, 'd': 'caf\u00e9'} | tojson }}\n"
    "{{ messages[0] | tojson }}\n"
    "{% if messages[0].role is string and messages[0].nope is not defined and none is none "
    "and messages is iterable and 3 is number and false is false %}ok{% endif %}\n"
    "{{ 'a,b,,c'.split(',') }} {{ '  x y  '.split() }} {{ 'xxhixx'.strip('x') }} "
    "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'abc'[::-1] }} {{ [1,2,3][-1] }} "
    "{{ 'b' in 'abc' }} {{ 'q' not in ['a'] }} {{ ' pad '.lstrip() }}| {{ ' pad '.rstrip() }}|\n"
    "{{ messages[0].content | trim | default('empty') }} {{ undefined_name | default('dflt') }} "
    "{{ none }} {{ [1, 'two', none] }} {{ 1.0 }} {{ 'a-b-c'.split('-', 1) }} {{ 'AbC'.lower() }}",
    // whitespace: trim_blocks, lstrip_blocks, comments and - markers
    "{% for m in messages %}\n"
    "    {% if m.role == 'user' %}\n"
    "U: {{ m.content }}\n"
    "    {% else %}\n"
    "A: {{ m.content }}\n"
    "    {%- endif %}\n"
    "{% endfor %}\n"
    "  {# a comment #}\n"
    "done {{- '  x' }}  {{ 'y' -}}   z\n"
    "{% if true %}  kept  {% endif %}\n"
    "    {%+ if true %}plus{% endif %}\n",
    // dict iteration and methods, elif chains, loop.previtem, else of an empty loop, Undefined
    "{% for k, v in {'x': 1, 'y': 'two'}.items() %}{{ k }}={{ v }};{% endfor %}"
    "{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %} {{ {'a': 1}.get('b', 'none') }}\n"
    "{% for m in messages %}{% if m.role == 'system' %}S{% elif m.role == 'user' %}U"
    "{% elif m.role == 'assistant' %}A{% else %}?{% endif %}"
    "{% if loop.previtem is defined %}<{{ loop.previtem.role }}{% endif %}{% endfor %}\n"
    "{% for x in [] %}never{% else %}empty{% endfor %} {{ 'x' in nothing }} {{ nothing|length }}"
    "{% if messages|length > 3 %}{{ nothing.attribute }}{% endif %}\n"
    // a set in a loop body lasts one iteration and never leaks out
    "{% set x = 0 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}({{ x }}){% endfor %}{{ x }}",
};

struct Case {
  std::string label, source, bos, eos;
  Conversation messages;
  bool add_generation_prompt = false;
};

// What jinja2 renders for each case: a string, or {"error": ...}.
json jinja2_render(const std::vector<Case>& cases) {
  nlohmann::ordered_json input = nlohmann::ordered_json::array();  // keys in message order
  for (const Case& c : cases) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (const ChatMessage& m : c.messages)
      messages.push_back({{"role", m.role}, {"content", m.content}});
    input.push_back({{"template", c.source},
                     {"bos_token", c.bos},
                     {"eos_token", c.eos},
                     {"messages", messages},
                     {"add_generation_prompt", c.add_generation_prompt}});
  }
  QTemporaryDir dir;
  const std::string path = dir.filePath("cases.json").toStdString();
  spit(path, input.dump());
  QProcess p;
  p.start("python3", {QString::fromStdString(kReference), QString::fromStdString(path)});
  if (!p.waitForFinished(60000) || p.exitCode() != 0) {
    qWarning("%s", p.readAllStandardError().constData());
    return json();
  }
  return json::parse(p.readAllStandardOutput().toStdString());
}

std::string template_source(const std::string& config_dir) {
  return json::parse(slurp(config_dir + "/tokenizer_config.json"))["chat_template"];
}

// Python's str.strip() on ASCII whitespace.
std::string py_strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

// The runs of tokens whose mask is 1.
std::vector<std::vector<int32_t>> masked_runs(const lattice::RenderedConversation& r) {
  std::vector<std::vector<int32_t>> runs;
  for (size_t k = 0; k < r.tokens.size(); k++) {
    if (!r.loss_mask[k]) continue;
    if (k == 0 || !r.loss_mask[k - 1]) runs.emplace_back();
    runs.back().push_back(r.tokens[k]);
  }
  return runs;
}

}  // namespace

class TestChatTemplate : public QObject {
  Q_OBJECT

 private slots:
  void rendersAsJinja2Does() {
    std::vector<Case> cases;
    std::vector<std::pair<std::string, ChatTemplate>> templates;
    if (have_hf()) {
      for (const char* model : {"llama3", "qwen3"}) {
        auto t = ChatTemplate::from_tokenizer_config(hf_dir(model));
        QVERIFY2(t.is_ok(), t.status().message().c_str());
        const json config = json::parse(slurp(hf_dir(model) + "/tokenizer_config.json"));
        QCOMPARE(t->bos_token(),
                 config["bos_token"].is_string() ? config["bos_token"].get<std::string>() : "");
        templates.emplace_back(model, *t);
        for (const json& c : kConversations)
          for (bool gen : {false, true})
            cases.push_back({model, template_source(hf_dir(model)), t->bos_token(), t->eos_token(),
                             to_messages(c), gen});
      }
    } else {
      qWarning(
          "Llama 3 / Qwen 3 tokenizer files missing (installers/fetch-hf-tokenizers.sh): "
          "only the built-in templates are compared");
    }
    // The built-ins, through jinja2 as well (their sources are what builtin() parses).
    for (const char* name : {"chatml", "llama3", "default"}) {
      auto t = ChatTemplate::builtin(name);
      QVERIFY2(t.is_ok(), t.status().message().c_str());
      templates.emplace_back(std::string("builtin ") + name, *t);
    }
    const size_t first_feature = templates.size();
    for (size_t k = 0; k < std::size(kFeatureTemplates); k++) {
      auto t = ChatTemplate::from_source(kFeatureTemplates[k], "feature " + std::to_string(k),
                                         "<s>", "</s>");
      QVERIFY2(t.is_ok(), t.status().message().c_str());
      templates.emplace_back("feature " + std::to_string(k), *t);
    }
    const std::string builtin_sources[] = {
        R"({%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})",
        R"({{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %})",
        R"({%- for message in messages %}{%- if message.role == 'system' %}{{- 'System: ' + message.content + '\n' }}{%- elif message.role == 'user' %}{{- 'User: ' + message.content + '\n' }}{%- elif message.role == 'assistant' %}{{- 'Assistant: ' + message.content + eos_token + '\n' }}{%- else %}{{- raise_exception('the default chat template has no role ' + message.role) }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %})"};
    for (size_t k = first_feature - 3; k < templates.size(); k++) {
      const bool builtin = k < first_feature;
      const std::string source =
          builtin ? builtin_sources[k - (first_feature - 3)] : kFeatureTemplates[k - first_feature];
      for (const json& c : kConversations)
        for (bool gen : {false, true})
          cases.push_back({templates[k].first, source, templates[k].second.bos_token(),
                           templates[k].second.eos_token(), to_messages(c), gen});
    }
    const json expected = jinja2_render(cases);
    QVERIFY2(expected.is_array() && expected.size() == cases.size(), "the jinja2 reference failed");
    size_t compared = 0;
    for (size_t k = 0; k < cases.size(); k++) {
      const Case& c = cases[k];
      const ChatTemplate* t = nullptr;
      for (const auto& [label, tmpl] : templates)
        if (label == c.label) t = &tmpl;
      auto ours = t->render(c.messages, c.add_generation_prompt);
      const std::string where =
          c.label + ", case " + std::to_string(k) +
          " (add_generation_prompt=" + (c.add_generation_prompt ? "true" : "false") + ")";
      if (expected[k].is_object()) {  // jinja2 raised: so must we
        QVERIFY2(!ours.is_ok(),
                 (where + ": jinja2 raised " + expected[k].dump() + ", Lattice rendered").c_str());
        continue;
      }
      QVERIFY2(ours.is_ok(), (where + ": " + ours.status().message()).c_str());
      const std::string want = expected[k].get<std::string>();
      QVERIFY2(
          *ours == want,
          (where + ":\n  Lattice: " + escaped(*ours) + "\n  jinja2:  " + escaped(want)).c_str());
      compared++;
    }
    QVERIFY(compared >= cases.size() * 9 / 10);
  }

  void raiseExceptionAndUnsupportedSyntaxNameTheLine() {
    auto raising = ChatTemplate::from_source(
        "{% if messages[0].role != 'system' %}\n{{ raise_exception('first must be system') }}\n{% "
        "endif %}",
        "test template", "", "");
    QVERIFY(raising.is_ok());
    const std::vector<ChatMessage> user_only = {{"user", "x"}};
    auto r = raising->render(user_only, false);
    QVERIFY(!r.is_ok());
    QCOMPARE(r.status().message(),
             std::string("test template line 2: the template raised: first must be system"));

    auto macro = ChatTemplate::from_source(
        "text\n{% if true %}\n{% macro f() %}{% endmacro %}{% endif %}", "test template", "", "");
    QVERIFY(!macro.is_ok());
    QCOMPARE(macro.status().message(), std::string("test template line 3: 'macro' statements are "
                                                   "not supported by Lattice's Jinja subset"));
    auto unclosed = ChatTemplate::from_source("a\n\n{% for m in messages %}{{ m }}", "t", "", "");
    QVERIFY(!unclosed.is_ok());
    QVERIFY2(unclosed.status().message().find("t line 3: 'for' is never closed") == 0,
             unclosed.status().message().c_str());
    auto power = ChatTemplate::from_source("{{ 2 ** 3 }}", "t", "", "");
    QVERIFY(!power.is_ok());
    QCOMPARE(power.status().message(), std::string("t line 1: '**' is not supported"));
  }

  // Loss masks with the real tokenizers: the tokens are those of the whole text, and each run
  // of masked tokens decodes to one assistant message as the template writes it plus its end.
  void masksCoverAssistantContentAndTurnEnd_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("chat_template");  // "" = the tokenizer's own
    QTest::newRow("llama3 own") << "llama3"
                                << "";
    QTest::newRow("qwen3 own") << "qwen3"
                               << "";
    QTest::newRow("qwen3 chatml") << "qwen3"
                                  << "chatml";
    QTest::newRow("llama3 builtin llama3") << "llama3"
                                           << "llama3";
    QTest::newRow("qwen3 default") << "qwen3"
                                   << "default";
  }
  void masksCoverAssistantContentAndTurnEnd() {
    QFETCH(QString, model);
    QFETCH(QString, chat_template);
    if (!have_hf())
      QSKIP("Llama 3 / Qwen 3 tokenizer files missing (installers/fetch-hf-tokenizers.sh)");
    lattice::TokenizerOptions options;
    options.type = "HuggingFaceTokenizer";
    options.model_file = hf_dir(model.toUtf8().constData());
    auto tokenizer = lattice::make_tokenizer(options);
    QVERIFY2(tokenizer.is_ok(), tokenizer.status().message().c_str());
    auto t = lattice::chat_template_for(options, chat_template.toStdString());
    QVERIFY2(t.is_ok(), t.status().message().c_str());
    const bool qwen_own = model == "qwen3" && chat_template.isEmpty();
    const bool llama = model == "llama3";
    const std::string end = llama                        ? "<|eot_id|>"
                            : chat_template == "default" ? "<|im_end|>"
                                                         : "<|im_end|>";
    size_t checked = 0;
    for (const json& c : kConversations) {
      const Conversation messages = to_messages(c);
      size_t last_user = 0;
      bool has_assistant = false;
      for (size_t i = 0; i < messages.size(); i++) {
        if (messages[i].role == "user") last_user = i;
        has_assistant |= messages[i].role == "assistant";
      }
      if (!has_assistant || (qwen_own && messages[1].content.find("</think>") != std::string::npos))
        continue;  // Qwen 3 moves reasoning into its own block: checked by rendering above
      auto r = lattice::render_for_training(*t, **tokenizer, messages);
      QVERIFY2(r.is_ok(), r.status().message().c_str());
      auto text = t->render(messages, false);
      QVERIFY(text.is_ok());
      QVERIFY2(r->tokens == (*tokenizer)->encode(*text),
               "the tokens are not those of the whole text");
      QCOMPARE(r->loss_mask.size(), r->tokens.size());
      std::vector<std::string> expected;
      for (size_t i = 0; i < messages.size(); i++) {
        if (messages[i].role != "assistant") continue;
        const std::string& content = messages[i].content;
        if (llama)
          expected.push_back(py_strip(content) + end);
        else if (qwen_own && i > last_user) {  // Qwen 3: an empty think block after the last query
          size_t a = content.find_first_not_of('\n');
          expected.push_back("<think>\n\n</think>\n\n" +
                             (a == std::string::npos ? "" : content.substr(a)) + end);
        } else if (chat_template == "default") {
          expected.push_back(" " + content + end);  // after "Assistant:"
        } else {
          expected.push_back(content + end);
        }
      }
      const auto runs = masked_runs(*r);
      QCOMPARE(runs.size(), expected.size());
      for (size_t k = 0; k < runs.size(); k++) {
        std::string got = (*tokenizer)->decode(runs[k]);
        // A token that straddles the turn's start (Qwen's "\n\n" when the content starts
        // with a newline) is masked too: it may add whitespace of the header before.
        const size_t extra = got.size() >= expected[k].size() ? got.size() - expected[k].size() : 0;
        if (extra && got.compare(extra, std::string::npos, expected[k]) == 0 &&
            py_strip(got.substr(0, extra)).empty())
          got.erase(0, extra);
        QVERIFY2(got == expected[k],
                 ("assistant turn " + std::to_string(k) + ": masked tokens decode to " +
                  escaped(got) + ", expected " + escaped(expected[k]))
                     .c_str());
        checked++;
      }
    }
    QVERIFY(checked >= 8);
  }

  // The default template with the demo model's kind of tokenizer (GPTSentencePieceTokenizer,
  // whose EOD has no text): each assistant turn ends with the EOD id, masked.
  void defaultTemplateEndsAssistantTurnsWithEod() {
    QTemporaryDir dir;
    lattice::SentencePieceTrainOptions o;
    o.model_prefix = dir.filePath("sp").toStdString();
    o.vocab_size = 400;
    o.threads = 2;
    std::vector<std::string> texts;
    for (int i = 0; i < 50; i++)
      texts.push_back(
          "User: Repeat after me: the blue fish swims. Assistant: the blue fish swims. "
          "System: What comes after seven? eight nine ten");
    const lattice::Status trained = lattice::train_sentencepiece(texts, o);
    QVERIFY2(trained.is_ok(), trained.message().c_str());
    lattice::TokenizerOptions options;
    options.type = "GPTSentencePieceTokenizer";
    options.model_file = o.model_prefix + ".model";
    auto tokenizer = lattice::make_tokenizer(options);
    QVERIFY(tokenizer.is_ok());
    auto t = lattice::chat_template_for(options);
    QVERIFY2(t.is_ok(), t.status().message().c_str());
    QCOMPARE(t->name(), std::string("built-in chat template 'default'"));
    const Conversation messages = {{"system", "the fish"},
                                   {"user", "Repeat after me: blue fish"},
                                   {"assistant", "blue fish"},
                                   {"user", "What comes after seven?"},
                                   {"assistant", "eight"}};
    auto r = lattice::render_for_training(*t, **tokenizer, messages);
    QVERIFY2(r.is_ok(), r.status().message().c_str());
    const int32_t eod = (*tokenizer)->eod();
    QCOMPARE(std::count(r->tokens.begin(), r->tokens.end(), eod), 2);
    const auto runs = masked_runs(*r);
    QCOMPARE(runs.size(), size_t(2));
    const char* contents[] = {"blue fish", "eight"};
    for (size_t k = 0; k < 2; k++) {
      QCOMPARE(runs[k].back(), eod);
      const std::vector<int32_t> body(runs[k].begin(), runs[k].end() - 1);
      QCOMPARE((*tokenizer)->decode(body), std::string(contents[k]));
    }
    // The prompt a server encodes for the next turn holds the same ids before the header.
    auto prompt = t->render(messages, true);
    QVERIFY(prompt.is_ok());
    const std::vector<int32_t> prompt_ids = t->encode(**tokenizer, *prompt);
    QVERIFY(prompt_ids.size() > r->tokens.size());
    QCOMPARE(std::count(prompt_ids.begin(), prompt_ids.end(), eod), 2);
  }

  void badLinesAreRefusedNamingTheLine_data() {
    QTest::addColumn<QByteArray>("line");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown role")
        << QByteArray(
               R"({"messages": [{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}]})")
        << "line 3: role 'bot' is not one of system, user, assistant";
    QTest::newRow("bad JSON") << QByteArray(R"({"messages": [)")
                              << "line 3: not valid JSON (byte 15)";
    QTest::newRow("no assistant") << QByteArray(
                                         R"({"messages": [{"role": "user", "content": "x"}]})")
                                  << "line 3: the conversation has no assistant message";
    QTest::newRow("neither form")
        << QByteArray(R"({"text": "x"})")
        << "line 3: the line has neither \"messages\" nor \"prompt\" and \"response\"";
    QTest::newRow("content not a string")
        << QByteArray(R"({"messages": [{"role": "assistant", "content": 5}]})")
        << "line 3: message 1's \"content\" is a JSON number, not a string";
    QTest::newRow("prompt without response")
        << QByteArray(R"({"prompt": "x"})") << "line 3: the line has no \"response\"";
  }
  void badLinesAreRefusedNamingTheLine() {
    QFETCH(QByteArray, line);
    QFETCH(QString, message);
    QTemporaryDir dir;
    const std::string path = dir.filePath("chat.jsonl").toStdString();
    spit(path, R"({"prompt": "p", "response": "r"})"
               "\n\n" +
                   line.toStdString() + "\n");
    auto read = lattice::read_chat_jsonl(path);
    QVERIFY(!read.is_ok());
    QCOMPARE(QString::fromStdString(read.status().message()),
             QString::fromStdString(path) + " " + message);
  }

  void readsBothForms() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("chat.jsonl").toStdString();
    spit(
        path,
        R"({"prompt": "p", "response": "r", "system": "s", "id": 7})"
        "\n"
        R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "x": 1}]})"
        "\r\n");
    auto read = lattice::read_chat_jsonl(path);
    QVERIFY2(read.is_ok(), read.status().message().c_str());
    QCOMPARE(read->size(), size_t(2));
    QCOMPARE((*read)[0].size(), size_t(3));
    QCOMPARE((*read)[0][0].role, std::string("system"));
    QCOMPARE((*read)[0][2].content, std::string("r"));
    QCOMPARE((*read)[1][1].role, std::string("assistant"));
  }

  void missingTemplateIsAnError() {
    QTemporaryDir dir;
    spit(dir.filePath("tokenizer_config.json").toStdString(), R"({"eos_token": "</s>"})");
    auto t = ChatTemplate::from_tokenizer_config(dir.path().toStdString());
    QVERIFY(!t.is_ok());
    QVERIFY2(t.status().message().find("has no chat_template") != std::string::npos,
             t.status().message().c_str());
    lattice::TokenizerOptions options;
    auto unknown = lattice::chat_template_for(options, "vicuna");
    QVERIFY(!unknown.is_ok());
    QCOMPARE(
        unknown.status().message(),
        std::string(
            "--chat-template 'vicuna' is neither a built-in (chatml, llama3, default) nor a file"));
  }

  // preprocess --sft: one document per conversation in both datasets, same lengths, the
  // tokens and mask render_for_training gives; through the CLI flags too.
  void preprocessWritesTokensAndMaskDatasets() {
    if (!have_hf())
      QSKIP("Llama 3 / Qwen 3 tokenizer files missing (installers/fetch-hf-tokenizers.sh)");
    QTemporaryDir dir;
    const std::string input = dir.filePath("chat.jsonl").toStdString();
    std::string lines;
    std::vector<Conversation> conversations;
    for (const json& c : kConversations) {
      const Conversation m = to_messages(c);
      if (m.back().role != "assistant") continue;
      lines += json({{"messages", c}}).dump() + "\n";
      conversations.push_back(m);
    }
    lines += R"({"prompt": "Name a color.", "response": "Blue."})"
             "\n";
    conversations.push_back({{"user", "Name a color."}, {"assistant", "Blue."}});
    spit(input, lines);
    const std::string prefix = dir.filePath("sft").toStdString();
    const lattice::testing::Run run = lattice::testing::run_process(
        LATTICE_CLI_PATH,
        {"data", "preprocess", "--sft", "--input", QString::fromStdString(input), "--output-prefix",
         QString::fromStdString(prefix), "--tokenizer-type", "HuggingFaceTokenizer",
         "--tokenizer-model", QString::fromStdString(hf_dir("qwen3")), "--workers", "2"});
    QVERIFY2(run.exit_code == 0, qPrintable(run.err));
    QVERIFY2(run.out.contains(
                 QString::fromStdString("wrote " + prefix + "_text_document_loss_mask.bin")),
             qPrintable(run.out));
    auto tokens = lattice::IndexedDataset::open(prefix + "_text_document");
    QVERIFY2(tokens.is_ok(), tokens.status().message().c_str());
    auto mask = lattice::IndexedDataset::open(prefix + "_text_document" + lattice::kLossMaskSuffix);
    QVERIFY2(mask.is_ok(), mask.status().message().c_str());
    QCOMPARE(int((*mask)->dtype()), int(lattice::TokenDtype::kU8));
    QCOMPARE((*tokens)->num_documents(), conversations.size());
    QCOMPARE((*mask)->num_documents(), conversations.size());
    QVERIFY((*tokens)->sequence_lengths().size() == (*mask)->sequence_lengths().size());
    lattice::TokenizerOptions options;
    options.type = "HuggingFaceTokenizer";
    options.model_file = hf_dir("qwen3");
    auto tokenizer = lattice::make_tokenizer(options);
    auto t = lattice::chat_template_for(options);
    QVERIFY(tokenizer.is_ok() && t.is_ok());
    for (size_t d = 0; d < conversations.size(); d++) {
      auto want = lattice::render_for_training(*t, **tokenizer, conversations[d]);
      QVERIFY(want.is_ok());
      const size_t n = static_cast<size_t>((*tokens)->sequence_lengths()[d]);
      QCOMPARE(static_cast<size_t>((*mask)->sequence_lengths()[d]), n);
      std::vector<int32_t> got_tokens(n), got_mask(n);
      (*tokens)->read(d, 0, n, got_tokens.data());
      (*mask)->read(d, 0, n, got_mask.data());
      QVERIFY2(got_tokens == want->tokens,
               ("document " + std::to_string(d) + ": tokens differ").c_str());
      QVERIFY2(std::equal(got_mask.begin(), got_mask.end(), want->loss_mask.begin(),
                          want->loss_mask.end()),
               ("document " + std::to_string(d) + ": mask differs").c_str());
    }
    // A bad line fails the command, naming the file and line.
    spit(input, lines + R"({"messages": [{"role": "bot", "content": "x"}]})"
                        "\n");
    const lattice::testing::Run bad = lattice::testing::run_process(
        LATTICE_CLI_PATH,
        {"data", "preprocess", "--sft", "--input", QString::fromStdString(input), "--output-prefix",
         QString::fromStdString(prefix + "_bad"), "--tokenizer-type", "HuggingFaceTokenizer",
         "--tokenizer-model", QString::fromStdString(hf_dir("qwen3"))});
    QCOMPARE(bad.exit_code, 1);
    const QString where = QString::fromStdString(input) + " line " +
                          QString::number(conversations.size() + 1) +
                          ": role 'bot' is not one of system, user, assistant";
    QVERIFY2(bad.err.contains(where), qPrintable(bad.err));
    QVERIFY(!std::filesystem::exists(prefix + "_bad_text_document.idx"));
  }
};

QTEST_GUILESS_MAIN(TestChatTemplate)
#include "test_chat_template.moc"
