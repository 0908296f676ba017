// The config.json of real Llama-family models as Hugging Face publishes them (Meta-Llama-3-8B,
// Qwen2.5-7B, Mistral-7B-v0.1, Llama-3.1-8B, Mixtral-8x7B-v0.1) read into Lattice's model flags:
// the models Lattice can express become exactly their published parameter counts (Mixtral's
// experts --num-experts, --moe-router-topk), Llama 3.1's RoPE scaling
// --use-rope-scaling; a sliding window in use and other RoPE scaling are refused by file and key;
// flags given that disagree with the file are named with both values, and the config.json export
// writes reads back to the same model.
#include <QTemporaryDir>
#include <QTest>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_llama_config.h"
#include "checkpoint/safetensors.h"
#include "common/files.h"
#include "lattice/train_options.h"

using lattice::ModelConfig;
using lattice::Status;
using lattice::TrainOptions;
namespace st = lattice::safetensors;

namespace {

// meta-llama/Meta-Llama-3-8B
constexpr const char* kLlama3_8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// Qwen/Qwen2.5-7B
constexpr const char* kQwen25_7B = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 131072,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_mrope": false,
  "use_sliding_window": false,
  "vocab_size": 152064
})";

// mistralai/Mistral-7B-v0.1
constexpr const char* kMistral7B = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// mistralai/Mixtral-8x7B-v0.1
constexpr const char* kMixtral8x7B = R"({
  "architectures": ["MixtralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "output_router_logits": false,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// meta-llama/Llama-3.1-8B's rope_scaling, on Llama 3's config.
nlohmann::json llama31_8b() {
  nlohmann::json j = nlohmann::json::parse(kLlama3_8B);
  j["max_position_embeddings"] = 131072;
  j["rope_scaling"] = {{"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192},
                       {"rope_type", "llama3"}};
  return j;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

std::string contains_message(const Status& s, const std::string& part) {
  return "message lacks '" + part + "': " + s.message();
}

}  // namespace

class TestHfLlamaConfig : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // A model directory of `config` with a stand-in weights file: apply_hf_model reads only
  // config.json for the Llama family.
  std::string model_dir(const std::string& name, const std::string& config) {
    const std::string d = dir_.filePath(QString::fromStdString(name)).toStdString();
    std::filesystem::create_directories(d);
    lattice::testing::spit(d + "/config.json", config);
    const float one = 1.0f;
    (void)st::write(d + "/model.safetensors", {{"model.norm.weight", {1}, &one, nullptr}});
    return d;
  }
  // The options after --load-hf DIR with `flags`, or the error.
  lattice::Result<TrainOptions> options(const std::string& d, std::vector<std::string> flags) {
    flags.push_back("--load-hf");
    flags.push_back(d);
    return lattice::parse_train_flags(flags);
  }

  // write_hf_llama_config of `m`, read back through --load-hf: the same model.
  void check_config_round_trip(const std::string& label, const ModelConfig& m) {
    const std::string d = dir_.filePath(QString::fromStdString(label)).toStdString();
    std::filesystem::create_directories(d);
    QVERIFY(lattice::write_hf_llama_config(d + "/config.json", m, 301, st::Dtype::kF32));
    const std::string text = lattice::testing::slurp(d + "/config.json");
    QVERIFY2((text.find("MixtralForCausalLM") != std::string::npos) == m.moe(), text.c_str());
    const std::string dir = model_dir(label, text);
    auto o = options(dir, {"--micro-batch-size", "1"});
    QVERIFY2(o, o.status().message().c_str());
    ModelConfig back = o->model;
    back.seq_length = m.seq_length;
    back.max_position_embeddings = 0;
    for (const auto& [name, same] : std::vector<std::pair<const char*, bool>>{
             {"layers", back.num_layers == m.num_layers},
             {"hidden", back.hidden_size == m.hidden_size},
             {"heads", back.num_attention_heads == m.num_attention_heads},
             {"groups", back.kv_heads() == m.kv_heads()},
             {"ffn", m.moe() ? back.moe_ffn() == m.moe_ffn() : back.ffn() == m.ffn()},
             {"experts", back.num_experts == m.num_experts &&
                             back.moe_router_topk == m.moe_router_topk &&
                             back.moe_aux_loss_coeff == m.moe_aux_loss_coeff},
             {"vocab", back.vocab_size == m.vocab_size},
             {"rotary base", back.rotary_base == m.rotary_base},
             {"rope scaling", back.llama3_rope_factor() == m.llama3_rope_factor()},
             {"epsilon", back.norm_epsilon == m.norm_epsilon},
             {"biases", back.qkv_bias() == m.qkv_bias() && back.linear_bias() == m.linear_bias()},
             {"tied", back.tied_output() == m.tied_output()},
             {"parameters", back.num_parameters() == m.num_parameters()}})
      QVERIFY2(same, name);
  }

 private slots:
  void llama3_8b_becomes_its_8_03b_parameters() {
    const std::string d = model_dir("llama3-8b", kLlama3_8B);
    auto o = options(d, {});
    QVERIFY2(o, o.status().message().c_str());
    const ModelConfig& m = o->model;
    QCOMPARE(m.num_layers, 32);
    QCOMPARE(m.hidden_size, 4096);
    QCOMPARE(m.ffn(), 14336);
    QCOMPARE(m.num_attention_heads, 32);
    QCOMPARE(m.kv_heads(), 8);
    QVERIFY(m.group_query_attention);
    QCOMPARE(m.max_positions(), 8192);
    QCOMPARE(m.seq_length, 8192);
    QCOMPARE(m.rotary_base, 500000.0f);
    QCOMPARE(m.norm_epsilon, 1e-5f);
    QVERIFY(m.rope() && m.rms_norm() && m.swiglu);
    QVERIFY(!m.tied_output() && !m.qkv_bias() && !m.linear_bias());
    QCOMPARE(m.attention_dropout, 0.0f);
    QCOMPARE(m.hidden_dropout, 0.0f);
    QCOMPARE(o->tokenizer.vocab_size, 128255);  // NullTokenizer: EOD is the last of 128256 ids
    QCOMPARE(m.vocab_size, 128256);
    QVERIFY2(m.validate().empty(), joined(m.validate()).c_str());
    QCOMPARE(m.num_parameters(), int64_t{8030261248});  // Meta's published count
  }

  void qwen25_7b_has_its_qkv_biases_and_7_62b_parameters() {
    const std::string d = model_dir("qwen2.5-7b", kQwen25_7B);
    auto o = options(d, {});
    QVERIFY2(o, o.status().message().c_str());
    const ModelConfig& m = o->model;
    QCOMPARE(m.num_layers, 28);
    QCOMPARE(m.kv_heads(), 4);
    QCOMPARE(m.rotary_base, 1e6f);
    QCOMPARE(m.norm_epsilon, 1e-6f);
    QVERIFY(m.qkv_bias() && !m.linear_bias() && m.add_qkv_bias && m.disable_bias_linear);
    QVERIFY(!m.tied_output());
    QCOMPARE(m.max_positions(), 131072);
    QVERIFY2(m.validate().empty(), joined(m.validate()).c_str());
    QCOMPARE(m.num_parameters(), int64_t{7615616512});
  }

  void mistral_7b_v01s_sliding_window_is_refused_by_key() {
    const std::string d = model_dir("mistral-7b", kMistral7B);
    auto o = options(d, {});
    QVERIFY(!o);
    const std::string part = d +
                             "/config.json: sliding_window is 4096, shorter than "
                             "max_position_embeddings 32768: Lattice's attention is fully "
                             "causal, not windowed";
    QVERIFY2(o.status().message().find(part) != std::string::npos,
             contains_message(o.status(), part).c_str());
    // Without the window (Mistral v0.2 and later), it is Llama's architecture.
    nlohmann::json unwindowed = nlohmann::json::parse(kMistral7B);
    unwindowed["sliding_window"] = nullptr;
    auto read = lattice::parse_hf_llama_config(unwindowed, "mistral/config.json");
    QVERIFY2(read, read.status().message().c_str());
    QCOMPARE(read->num_query_groups, 8);
    QVERIFY(!read->qkv_bias && !read->linear_bias && !read->tied);
  }

  void mixtral_8x7b_becomes_its_46_7b_parameters() {
    const std::string d = model_dir("mixtral-8x7b", kMixtral8x7B);
    auto o = options(d, {});
    QVERIFY2(o, o.status().message().c_str());
    const ModelConfig& m = o->model;
    QCOMPARE(m.num_layers, 32);
    QCOMPARE(m.num_experts, 8);
    QCOMPARE(m.moe_router_topk, 2);
    QCOMPARE(m.moe_layer_freq, 1);
    QCOMPARE(m.moe_ffn(), 14336);
    QCOMPARE(m.moe_aux_loss_coeff, 0.02f);
    QCOMPARE(m.kv_heads(), 8);
    QCOMPARE(m.rotary_base, 1e6f);
    QCOMPARE(m.norm_epsilon, 1e-5f);
    QCOMPARE(m.seq_length, 32768);
    QVERIFY(m.rope() && m.rms_norm() && m.swiglu);
    QVERIFY(!m.tied_output() && !m.qkv_bias() && !m.linear_bias());
    QVERIFY2(m.validate().empty(), joined(m.validate()).c_str());
    QVERIFY(lattice::hf_llama_unsupported(m).empty());
    QCOMPARE(m.num_parameters(), int64_t{46702792704});  // Mistral's published 46.7B
    // The flags must agree with the file; the aux loss's weight is training's to choose.
    auto tuned = options(d, {"--moe-aux-loss-coeff", "0.001", "--seq-length", "4096"});
    QVERIFY2(tuned, tuned.status().message().c_str());
    QCOMPARE(tuned->model.moe_aux_loss_coeff, 0.001f);
    auto wrong = options(d, {"--num-experts", "4", "--moe-router-topk", "1",
                             "--moe-ffn-hidden-size", "1024", "--moe-layer-freq", "2"});
    QVERIFY(!wrong);
    const std::string c = d + "/config.json";
    for (const std::string& part :
         {"--num-experts 4 disagrees with " + c + ", which gives num_local_experts 8",
          "--moe-router-topk 1 disagrees with " + c + ", which gives num_experts_per_tok 2",
          "--moe-ffn-hidden-size 1024 disagrees with " + c +
              ", which gives intermediate_size 14336 (an expert's width)",
          "--moe-layer-freq 2 disagrees with " + c +
              ", which is a Mixtral model (experts in every layer)"})
      QVERIFY2(wrong.status().message().find(part) != std::string::npos,
               contains_message(wrong.status(), part).c_str());
    // A dense file refuses experts.
    auto dense = options(model_dir("llama3-8b-moe", kLlama3_8B), {"--num-experts", "8"});
    QVERIFY(!dense);
    QVERIFY2(dense.status().message().find("--num-experts 8 disagrees with") != std::string::npos &&
                 dense.status().message().find("which is a dense model (model_type llama)") !=
                     std::string::npos,
             dense.status().message().c_str());
  }

  void mixtral_sliding_window_must_cover_the_sequence() {
    nlohmann::json j = nlohmann::json::parse(kMixtral8x7B);
    j["sliding_window"] = 4096;
    const std::string d = model_dir("mixtral-windowed", j.dump(2));
    auto o = options(d, {});
    QVERIFY(!o);
    const std::string part = "--load-hf: " + d +
                             "/config.json: sliding_window is 4096, shorter than --seq-length "
                             "32768: Lattice's attention is fully causal, not windowed (pass "
                             "--seq-length 4096 or less)";
    QVERIFY2(o.status().message().find(part) != std::string::npos,
             contains_message(o.status(), part).c_str());
    auto within = options(d, {"--seq-length", "4096"});
    QVERIFY2(within, within.status().message().c_str());
    j["num_experts_per_tok"] = 9;
    j["router_aux_loss_coef"] = -1;
    auto read = lattice::parse_hf_llama_config(j, "m/config.json");
    QVERIFY(!read);
    for (const std::string& p :
         {std::string("m/config.json: num_experts_per_tok 9 is more than num_local_experts 8"),
          std::string("m/config.json: router_aux_loss_coef is -1, not a number >= 0")})
      QVERIFY2(read.status().message().find(p) != std::string::npos,
               contains_message(read.status(), p).c_str());
  }

  void llama31_rope_scaling_becomes_use_rope_scaling() {
    const std::string d = model_dir("llama3.1-8b", llama31_8b().dump(2));
    auto o = options(d, {});
    QVERIFY2(o, o.status().message().c_str());
    const ModelConfig& m = o->model;
    QVERIFY(m.use_rope_scaling);
    QCOMPARE(m.rope_scaling_factor, 8.0f);
    QCOMPARE(m.llama3_rope_factor(), 8.0f);
    QCOMPARE(m.max_positions(), 131072);
    QCOMPARE(m.num_parameters(), int64_t{8030261248});
    // A factor given must agree; Llama 3's file has no scaling to agree with.
    auto other = options(d, {"--rope-scaling-factor", "32"});
    QVERIFY(!other);
    const std::string part = "--rope-scaling-factor 32 disagrees with " + d +
                             "/config.json, which gives rope_scaling's factor 8";
    QVERIFY2(other.status().message().find(part) != std::string::npos,
             contains_message(other.status(), part).c_str());
    auto unscaled = options(model_dir("llama3-8b-scaled", kLlama3_8B), {"--use-rope-scaling"});
    QVERIFY(!unscaled);
    QVERIFY2(unscaled.status().message().find("--use-rope-scaling true disagrees with") !=
                 std::string::npos,
             unscaled.status().message().c_str());
  }

  void other_rope_scaling_is_refused_by_file_and_key() {
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"low_freq_factor", 2.0},
             {"rope_type", "yarn"},
             {"original_max_position_embeddings", 4096}}) {
      nlohmann::json j = llama31_8b();
      j["rope_scaling"][key] = value;
      auto read = lattice::parse_hf_llama_config(j, "s/config.json");
      QVERIFY(!read);
      const std::string part = "s/config.json: rope_scaling is {";
      QVERIFY2(read.status().message().find(part) == 0 &&
                   read.status().message().find("Lattice's RoPE scales only as Llama 3.1 does") !=
                       std::string::npos,
               (key + ": " + read.status().message()).c_str());
    }
  }

  void what_lattice_cannot_express_is_named() {
    nlohmann::json j = nlohmann::json::parse(kLlama3_8B);
    j["hidden_act"] = "gelu";
    j["head_dim"] = 64;
    j["attention_bias"] = true;
    j["num_key_value_heads"] = 5;
    auto read = lattice::parse_hf_llama_config(j, "x/config.json");
    QVERIFY(!read);
    for (const std::string& part :
         {std::string("x/config.json: hidden_act is \"gelu\"; Lattice's --swiglu MLP is silu"),
          std::string("x/config.json: head_dim is 64, but Lattice's head size is hidden_size / "
                      "num_attention_heads = 128"),
          std::string("x/config.json: attention_bias is true but mlp_bias is not"),
          std::string("x/config.json: num_key_value_heads 5 does not divide num_attention_heads "
                      "32")})
      QVERIFY2(read.status().message().find(part) != std::string::npos,
               contains_message(read.status(), part).c_str());
    nlohmann::json gpt2 = {{"model_type", "gpt2"}};
    auto other = lattice::parse_hf_llama_config(gpt2, "g/config.json");
    QVERIFY(!other && other.status().message().find("g/config.json: model_type is \"gpt2\"") == 0);
    nlohmann::json sizeless = nlohmann::json::parse(kLlama3_8B);
    sizeless.erase("intermediate_size");
    auto missing = lattice::parse_hf_llama_config(sizeless, "s/config.json");
    QVERIFY2(!missing && missing.status().message() ==
                             "s/config.json: intermediate_size is missing; a Llama-family "
                             "config.json gives it",
             missing.status().message().c_str());
  }

  void flags_given_must_agree_with_the_file() {
    const std::string d = model_dir("agree", kLlama3_8B);
    auto agreeing = options(d, {"--num-layers", "32", "--group-query-attention",
                                "--num-query-groups", "8", "--rotary-base", "500000", "--swiglu",
                                "--untie-embeddings-and-output-weights", "--seq-length", "128"});
    QVERIFY2(agreeing, agreeing.status().message().c_str());
    QCOMPARE(agreeing->model.seq_length, 128);  // a shorter training sequence is the user's
    auto o = options(d, {"--num-layers", "2", "--num-query-groups", "4", "--group-query-attention",
                         "--normalization", "LayerNorm", "--norm-epsilon", "1e-6",
                         "--ffn-hidden-size", "1024", "--vocab-size", "1000"});
    QVERIFY(!o);
    const std::string c = d + "/config.json";
    for (const std::string& part :
         {"--load-hf: --num-layers 2 disagrees with " + c + ", which gives num_hidden_layers 32",
          "--load-hf: --num-query-groups 4 disagrees with " + c +
              ", which gives num_key_value_heads 8",
          "--load-hf: --normalization LayerNorm disagrees with " + c +
              ", which is a Llama-family model (RMSNorm)",
          "--load-hf: --norm-epsilon 1e-06 disagrees with " + c +
              ", which gives rms_norm_eps 1e-05",
          "--load-hf: --ffn-hidden-size 1024 disagrees with " + c +
              ", which gives intermediate_size 14336",
          "--load-hf: --vocab-size 1000 gives NullTokenizer's model 1001 ids (EOD = --vocab-size) "
          "but " +
              c + " has 128256 (vocab_size): pass --vocab-size 128255 or leave it out"})
      QVERIFY2(o.status().message().find(part) != std::string::npos,
               contains_message(o.status(), part).c_str());
    // A Llama file (by its tensor names) without its config.json says what is missing.
    const std::string bare = dir_.filePath("bare.safetensors").toStdString();
    const std::vector<float> embedding(8, 0.5f);
    QVERIFY(st::write(bare, {{"model.embed_tokens.weight", {2, 4}, embedding.data(), nullptr}}));
    auto lone = lattice::parse_train_flags({"--load-hf", bare});
    const std::string part = "--load-hf: " + bare + " has no config.json beside it";
    QVERIFY2(!lone && lone.status().message().find(part) == 0,
             contains_message(lone.status(), part).c_str());
  }

  void exported_config_reads_back_to_the_same_model() {
    ModelConfig m;
    m.num_layers = 3;
    m.hidden_size = 48;
    m.num_attention_heads = 6;
    m.seq_length = 32;
    m.vocab_size = 301;
    m.position_embedding_type = "rope";
    m.rotary_base = 250000.0f;
    m.normalization = "RMSNorm";
    m.norm_epsilon = 1e-6f;
    m.swiglu = true;
    m.ffn_hidden_size = 80;
    m.group_query_attention = true;
    m.num_query_groups = 3;
    m.disable_bias_linear = true;
    m.add_qkv_bias = true;
    m.use_rope_scaling = true;
    m.rope_scaling_factor = 32.0f;  // Llama 3.2's
    m.attention_dropout = 0.0f;
    m.hidden_dropout = 0.0f;
    check_config_round_trip("roundtrip", m);
    // As Mixtral (no biases): the experts' count, k, width and aux coefficient come back.
    m.add_qkv_bias = false;
    m.num_experts = 6;
    m.moe_router_topk = 3;
    m.moe_ffn_hidden_size = 24;
    m.moe_aux_loss_coeff = 0.03f;
    check_config_round_trip("roundtrip-mixtral", m);
  }
};

QTEST_APPLESS_MAIN(TestHfLlamaConfig)
#include "test_hf_llama_config.moc"
