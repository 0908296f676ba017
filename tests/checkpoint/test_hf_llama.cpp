// Specification of the HF Llama-family mapping on tiny models (Llama 3's: GQA with 2 groups,
// untied head, no biases; Qwen2's: QKV bias, tied head, MQA): exported elements sit where
// transformers' LlamaForCausalLM puts them (checked by hand-written index formulas), import
// inverts export, a TP 2 layout takes its slices, half-precision and sharded files read the same,
// and a file that does not fit the model is refused with every problem named. That the mapping
// means the same model is test_llama_parity's hf_export_* (a PyTorch forward over HF names).
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_model.h"
#include "checkpoint/safetensors.h"
#include "common/files.h"
#include "common/hf_test_files.h"

using lattice::ModelConfig;
using lattice::ParamLayout;
using lattice::ParamTensor;
using lattice::Status;
namespace st = lattice::safetensors;
namespace fs = std::filesystem;

namespace {

using lattice::testing::indexed_params;

// L = 2, C = 16, NH = 4 (HS = 4), G = 2 (Q = 2 query heads a group), F = 24, V = 10 (padded 128).
ModelConfig llama_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.vocab_size = 10;
  c.position_embedding_type = "rope";
  c.normalization = "RMSNorm";
  c.swiglu = true;
  c.ffn_hidden_size = 24;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.untie_embeddings_and_output_weights = true;
  c.disable_bias_linear = true;
  return c;
}
constexpr int64_t C = 16, NH = 4, HS = 4, G = 2, Q = 2, F = 24, V = 10;

// Qwen2's shape of the same: a bias on q, k and v only, the head tied, one key/value head (MQA).
ModelConfig qwen2_config(int groups = 1) {
  ModelConfig c = llama_config();
  c.num_query_groups = groups;
  c.untie_embeddings_and_output_weights = false;
  c.add_qkv_bias = true;
  c.ffn_hidden_size = 20;
  return c;
}

std::string contains_message(const Status& s, const std::string& part) {
  return "message lacks '" + part + "': " + s.message();
}

// Element `index` of tensor `name` in `file`, as float.
float file_at(const st::File& file, const std::string& name, int64_t index) {
  const st::TensorInfo* t = file.find(name);
  std::vector<float> all(t->numel);
  (void)file.read_float(*t, all.data());
  return all[index];
}

// `arena` after import equals `expected` except the vocabulary tables' padding rows, which are
// the mean of their real rows.
std::string first_difference(const ParamLayout& layout, const std::vector<float>& arena,
                             const std::vector<float>& given) {
  const std::vector<float> expected = lattice::testing::with_mean_padding_rows(layout, given, V);
  for (const ParamTensor& t : layout.tensors())
    for (size_t i = 0; i < t.numel; i++) {
      const float want = expected[t.offset + i];
      if (arena[t.offset + i] != want)
        return t.name + "[" + std::to_string(i) + "] = " + std::to_string(arena[t.offset + i]) +
               " after import, expected " + std::to_string(want);
    }
  return "";
}

}  // namespace

class TestHfLlama : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  std::string path(const std::string& name) const {
    return dir_.filePath(QString::fromStdString(name)).toStdString();
  }
  // Exports `params` of `c` to directory `name`; the directory, or a failure message.
  std::string exported(const std::string& name, const ModelConfig& c,
                       const std::vector<float>& params, lattice::HfWriteOptions options = {}) {
    const std::string p = path(name);
    const Status s = lattice::export_hf_llama(p, c, ParamLayout(c), params.data(), options);
    return s ? p : "export failed: " + s.message();
  }

 private slots:
  void export_writes_llama_names_shapes_and_config() {
    const ModelConfig c = llama_config();
    const std::string d = exported("names", c, indexed_params(ParamLayout(c)));
    auto file = st::File::open(d + "/model.safetensors");
    QVERIFY2(file, (d + " " + file.status().message()).c_str());
    QCOMPARE(file->metadata().at("format"), std::string("pt"));
    const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
        {"model.embed_tokens.weight", {V, C}},
        {"model.layers.1.input_layernorm.weight", {C}},
        {"model.layers.1.self_attn.q_proj.weight", {NH * HS, C}},
        {"model.layers.1.self_attn.k_proj.weight", {G * HS, C}},
        {"model.layers.1.self_attn.v_proj.weight", {G * HS, C}},
        {"model.layers.1.self_attn.o_proj.weight", {C, C}},
        {"model.layers.1.post_attention_layernorm.weight", {C}},
        {"model.layers.1.mlp.gate_proj.weight", {F, C}},
        {"model.layers.1.mlp.up_proj.weight", {F, C}},
        {"model.layers.1.mlp.down_proj.weight", {C, F}},
        {"model.norm.weight", {C}},
        {"lm_head.weight", {V, C}}};
    for (const auto& [name, shape] : expected) {
      const st::TensorInfo* t = file->find(name);
      QVERIFY2(t, (name + " is missing from the export").c_str());
      QVERIFY2(t->dtype == st::Dtype::kF32, name.c_str());
      QVERIFY2(t->shape == shape, (name + " has shape " + st::shape_to_string(t->shape) +
                                   ", Llama has " + st::shape_to_string(shape))
                                      .c_str());
    }
    QCOMPARE(file->tensors().size(), size_t{1 + 9 * 2 + 2});  // no biases
    const nlohmann::json config =
        nlohmann::json::parse(lattice::testing::slurp(d + "/config.json"));
    QVERIFY2(config["architectures"][0] == "LlamaForCausalLM", config.dump().c_str());
    QVERIFY2(config["model_type"] == "llama", config.dump().c_str());
    QVERIFY2(config["num_key_value_heads"] == 2, config.dump().c_str());
    QVERIFY2(config["intermediate_size"] == 24, config.dump().c_str());
    QVERIFY2(config["vocab_size"] == 10, config.dump().c_str());
    QVERIFY2(config["tie_word_embeddings"] == false, config.dump().c_str());
    QVERIFY2(config["attention_bias"] == false, config.dump().c_str());
    QVERIFY2(config["hidden_act"] == "silu", config.dump().c_str());
    QVERIFY2(config["rope_scaling"].is_null(), config.dump().c_str());
  }

  void qwen2_export_has_qkv_biases_and_no_head() {
    const ModelConfig c = qwen2_config();
    const std::string d = exported("qwen2", c, indexed_params(ParamLayout(c)));
    auto file = st::File::open(d + "/model.safetensors");
    QVERIFY2(file, (d + " " + file.status().message()).c_str());
    QVERIFY(!file->find("lm_head.weight"));
    QVERIFY(!file->find("model.layers.0.self_attn.o_proj.bias"));
    QVERIFY(!file->find("model.layers.0.mlp.up_proj.bias"));
    for (const char* b : {"q_proj", "k_proj", "v_proj"})
      QVERIFY2(file->find("model.layers.1.self_attn." + std::string(b) + ".bias"), b);
    QCOMPARE(file->find("model.layers.1.self_attn.k_proj.bias")->shape, std::vector<int64_t>{HS});
    const nlohmann::json config =
        nlohmann::json::parse(lattice::testing::slurp(d + "/config.json"));
    QVERIFY2(config["architectures"][0] == "Qwen2ForCausalLM", config.dump().c_str());
    QVERIFY2(config["model_type"] == "qwen2", config.dump().c_str());
    QVERIFY2(config["tie_word_embeddings"] == true, config.dump().c_str());
    QVERIFY2(config["num_key_value_heads"] == 1, config.dump().c_str());
  }

  void export_places_every_element_where_llama_expects_it() {
    const ModelConfig c = llama_config();
    const ParamLayout layout(c);
    const std::vector<float> x = indexed_params(layout);
    const std::string d = exported("layout", c, x);
    auto opened = st::File::open(d + "/model.safetensors");
    QVERIFY2(opened, opened.status().message().c_str());
    const st::File& file = *opened;
    auto ours = [&](const std::string& name) { return x.data() + layout.find(name)->offset; };
    std::vector<std::string> wrong;
    int64_t checked = 0;
    auto check = [&](const std::string& hf, int64_t index, float expected) {
      checked++;
      const float got = file_at(file, hf, index);
      if (got != expected)
        wrong.push_back(hf + "[" + std::to_string(index) + "] = " + std::to_string(got) +
                        ", expected " + std::to_string(expected));
    };
    // By hand, layer 0, input channel 5. Query head 3 (group 1, its second head), dim 2: HF row
    // 3*4 + 2 = 14; our group 1 starts at row (2 + 2) * 4 = 16, its second query head at 20,
    // dim 2 at 22. Key head 1, dim 3: HF k_proj row 7; ours 16 + 2*4 + 3 = 27. Value head 0,
    // dim 0: HF v_proj row 0; ours 0 + 3*4 = 12.
    const float* qkv0 = ours("decoder.layers.0.self_attention.linear_qkv.weight");
    check("model.layers.0.self_attn.q_proj.weight", 14 * C + 5, qkv0[22 * C + 5]);
    check("model.layers.0.self_attn.k_proj.weight", 7 * C + 5, qkv0[27 * C + 5]);
    check("model.layers.0.self_attn.v_proj.weight", 0 * C + 5, qkv0[12 * C + 5]);

    for (int64_t i = 0; i < V * C; i++) {
      check("model.embed_tokens.weight", i, ours("embedding.word_embeddings.weight")[i]);
      check("lm_head.weight", i, ours("output_layer.weight")[i]);
    }
    for (int l = 0; l < 2; l++) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      const std::string d = "decoder.layers." + std::to_string(l) + ".";
      const float* qkv = ours(d + "self_attention.linear_qkv.weight");  // ((NH + 2G) HS, C)
      for (int64_t g = 0; g < G; g++) {
        const int64_t base = g * (Q + 2) * HS;  // our group g's first row
        for (int64_t e = 0; e < HS; e++)
          for (int64_t col = 0; col < C; col++) {
            for (int64_t j = 0; j < Q; j++)  // query head g*Q + j
              check(h + "self_attn.q_proj.weight", ((g * Q + j) * HS + e) * C + col,
                    qkv[(base + j * HS + e) * C + col]);
            check(h + "self_attn.k_proj.weight", (g * HS + e) * C + col,
                  qkv[(base + Q * HS + e) * C + col]);
            check(h + "self_attn.v_proj.weight", (g * HS + e) * C + col,
                  qkv[(base + (Q + 1) * HS + e) * C + col]);
          }
      }
      const float* fc1 = ours(d + "mlp.linear_fc1.weight");  // (2, F, C): gate, up
      for (int64_t i = 0; i < F * C; i++) {
        check(h + "mlp.gate_proj.weight", i, fc1[i]);
        check(h + "mlp.up_proj.weight", i, fc1[F * C + i]);
        check(h + "mlp.down_proj.weight", i, ours(d + "mlp.linear_fc2.weight")[i]);
      }
      for (int64_t i = 0; i < C * C; i++)
        check(h + "self_attn.o_proj.weight", i, ours(d + "self_attention.linear_proj.weight")[i]);
      for (int64_t i = 0; i < C; i++) {
        check(h + "input_layernorm.weight", i, ours(d + "input_layernorm.weight")[i]);
        check(h + "post_attention_layernorm.weight", i, ours(d + "pre_mlp_layernorm.weight")[i]);
      }
    }
    for (int64_t i = 0; i < C; i++)
      check("model.norm.weight", i, ours("decoder.final_layernorm.weight")[i]);
    QCOMPARE(checked,
             int64_t{3 + 2 * V * C + 2 * ((NH + 2 * G) * HS * C + 3 * F * C + C * C + 2 * C) + C});
    std::string first_few;
    for (size_t i = 0; i < wrong.size() && i < 5; i++) first_few += "\n  " + wrong[i];
    QVERIFY2(wrong.empty(), (std::to_string(wrong.size()) + " of " + std::to_string(checked) +
                             " elements are misplaced:" + first_few)
                                .c_str());
  }

  void import_inverts_export_and_fills_the_padding_rows_with_the_mean_row() {
    for (const ModelConfig& c : {llama_config(), qwen2_config()}) {
      const ParamLayout layout(c);
      const std::vector<float> x = indexed_params(layout);
      const std::string name = c.tied_output() ? "inverse-qwen2" : "inverse-llama";
      const std::string d = exported(name, c, x);
      std::vector<float> y(layout.total_numel(), -7.0f);
      const Status s = lattice::import_hf_llama(d, c, layout, y.data());
      QVERIFY2(s, s.message().c_str());
      const std::string diff = first_difference(layout, y, x);
      QVERIFY2(diff.empty(), diff.c_str());
      // Export, import, export: the same bytes.
      const std::string again = exported(name + "-again", c, y);
      QVERIFY2(lattice::testing::slurp(d + "/model.safetensors") ==
                   lattice::testing::slurp(again + "/model.safetensors"),
               (d + " and " + again + " differ").c_str());
    }
  }

  void tensor_parallel_ranks_import_their_slices() {
    // Two query groups over two ranks: each holds one group's q, k, v rows (and biases), half of
    // gate and of up, and half of the padded vocabulary (256 rows at TP 2).
    for (ModelConfig c : {llama_config(), qwen2_config(2)}) {
      c.tensor_model_parallel_size = 2;
      const ParamLayout whole(c);
      const std::vector<float> x = indexed_params(whole);
      const std::string d = exported(c.tied_output() ? "tp-qwen2" : "tp-llama", c, x);
      std::vector<float> expected(whole.total_numel());
      QVERIFY(lattice::import_hf_llama(d, c, whole, expected.data()));
      for (int rank = 0; rank < 2; rank++) {
        lattice::ModelShard shard;
        shard.tp_rank = rank;
        shard.tp_size = 2;
        const ParamLayout part(c, shard);
        std::vector<float> slices(part.total_numel(), -7.0f), want(part.total_numel(), -7.0f);
        const Status s = lattice::import_hf(d, c, part, slices.data());
        QVERIFY2(s, s.message().c_str());
        for (const ParamTensor& t : part.tensors()) {
          lattice::slice_from_global(t, expected.data() + whole.find(t.name)->offset,
                                     want.data() + t.offset);
          for (size_t i = 0; i < t.numel; i++)
            QVERIFY2(slices[t.offset + i] == want[t.offset + i],
                     ("rank " + std::to_string(rank) + " " + t.name + "[" + std::to_string(i) +
                      "] = " + std::to_string(slices[t.offset + i]) + ", its slice holds " +
                      std::to_string(want[t.offset + i]))
                         .c_str());
        }
      }
    }
  }

  void half_precision_files_import_exactly() {
    // Values below 256 are exact in F16 and BF16; tensors alternate between the two dtypes.
    const ModelConfig c = llama_config();
    const ParamLayout layout(c);
    std::vector<float> x(layout.total_numel());
    for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>(i % 256);
    const std::string d = exported("to-halve", c, x);
    auto f32 = st::File::open(d + "/model.safetensors");
    QVERIFY2(f32, f32.status().message().c_str());
    const std::string p = path("half.safetensors");
    lattice::testing::write_half_precision_copy(*f32, p);
    std::vector<float> from_half(layout.total_numel(), 0.0f), from_f32(layout.total_numel(), 0.0f);
    const Status s = lattice::import_hf_llama(p, c, layout, from_half.data());
    QVERIFY2(s, s.message().c_str());
    QVERIFY(lattice::import_hf_llama(d, c, layout, from_f32.data()));
    QVERIFY2(from_half == from_f32, "the F16/BF16 file imported differently from the F32 one");
  }

  void bf16_export_rounds_to_nearest_even() {
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (ties to the even 1), 1 + 3 * 2^-8 halfway
    // between 1 + 2^-7 and 1 + 2^-6 (to the even 1 + 2^-6); 1 + 2^-8 + 2^-20 rounds up.
    QCOMPARE(st::bf16_to_float(st::float_to_bf16(1.0f + 0x1p-8f)), 1.0f);
    QCOMPARE(st::bf16_to_float(st::float_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
    QCOMPARE(st::bf16_to_float(st::float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
    QCOMPARE(st::bf16_to_float(st::float_to_bf16(-2.5f)), -2.5f);
    QVERIFY(std::isnan(st::bf16_to_float(st::float_to_bf16(std::nanf("")))));
    QVERIFY(std::isinf(st::bf16_to_float(st::float_to_bf16(INFINITY))));

    const ModelConfig c = llama_config();
    const ParamLayout layout(c);
    std::vector<float> x(layout.total_numel());
    for (size_t i = 0; i < x.size(); i++) x[i] = 1.0f + static_cast<float>(i) * 0x1p-12f;
    lattice::HfWriteOptions bf16;
    bf16.dtype = st::Dtype::kBF16;
    const std::string d = exported("bf16", c, x, bf16);
    auto file = st::File::open(d + "/model.safetensors");
    QVERIFY2(file, file.status().message().c_str());
    for (const st::TensorInfo& t : file->tensors())
      QVERIFY2(t.dtype == st::Dtype::kBF16, t.name.c_str());
    QVERIFY(nlohmann::json::parse(lattice::testing::slurp(d + "/config.json"))["torch_dtype"] ==
            "bfloat16");
    std::vector<float> y(layout.total_numel());
    QVERIFY(lattice::import_hf_llama(d, c, layout, y.data()));
    std::vector<float> rounded(x.size());
    for (size_t i = 0; i < x.size(); i++) rounded[i] = st::bf16_to_float(st::float_to_bf16(x[i]));
    const std::string diff = first_difference(layout, y, rounded);
    QVERIFY2(diff.empty(), diff.c_str());
  }

  void sharded_directory_reads_back_and_a_later_export_replaces_it() {
    const ModelConfig c = llama_config();
    const ParamLayout layout(c);
    const std::vector<float> x = indexed_params(layout);
    lattice::HfWriteOptions small;
    small.max_shard_bytes = 4096;  // 1 KiB tensors and larger: several shards
    const std::string d = exported("sharded", c, x, small);
    QVERIFY2(!fs::exists(d + "/model.safetensors"), "a sharded export also wrote one file");
    const nlohmann::json index =
        nlohmann::json::parse(lattice::testing::slurp(d + "/model.safetensors.index.json"));
    std::set<std::string> shards;
    uint64_t total = 0;
    for (const auto& [name, file] : index["weight_map"].items()) {
      shards.insert(file.get<std::string>());
      auto shard = st::File::open(d + "/" + file.get<std::string>());
      QVERIFY2(shard, shard.status().message().c_str());
      const st::TensorInfo* t = shard->find(name);
      QVERIFY2(t, (file.get<std::string>() + " lacks " + name).c_str());
      total += t->end - t->begin;
    }
    QCOMPARE(index["weight_map"].size(), size_t{1 + 9 * 2 + 2});
    QCOMPARE(index["metadata"]["total_size"].get<uint64_t>(), total);
    QVERIFY2(shards.size() >= 3, std::to_string(shards.size()).c_str());
    const std::string last = "model-" + std::string(5 - std::to_string(shards.size()).size(), '0') +
                             std::to_string(shards.size()) + "-of-" +
                             std::string(5 - std::to_string(shards.size()).size(), '0') +
                             std::to_string(shards.size()) + ".safetensors";
    QVERIFY2(shards.count(last), (last + " is not among the shards").c_str());
    for (const std::string& s : shards)
      QVERIFY2(fs::file_size(d + "/" + s) <= 4096 + 2048 ||
                   st::File::open(d + "/" + s)->tensors().size() == 1,
               (s + " exceeds the shard size with more than one tensor").c_str());

    std::vector<float> y(layout.total_numel(), -7.0f);
    const Status s = lattice::import_hf_llama(d, c, layout, y.data());
    QVERIFY2(s, s.message().c_str());
    QVERIFY2(first_difference(layout, y, x).empty(), first_difference(layout, y, x).c_str());
    // The index file itself names the model too.
    std::vector<float> z(layout.total_numel(), -7.0f);
    QVERIFY(lattice::import_hf_llama(d + "/model.safetensors.index.json", c, layout, z.data()));
    QVERIFY(y == z);

    // One file into the same directory: the shards and the index go.
    QCOMPARE(exported("sharded", c, x), d);
    for (const std::string& shard : shards)
      QVERIFY2(!fs::exists(d + "/" + shard), (shard + " was left behind").c_str());
    QVERIFY(!fs::exists(d + "/model.safetensors.index.json"));
    QVERIFY(lattice::import_hf_llama(d, c, layout, z.data()));
  }

  void mismatches_are_all_named_in_one_message() {
    const ModelConfig c = llama_config();
    const ParamLayout layout(c);
    const std::string d = exported("good", c, indexed_params(layout));
    auto good = st::File::open(d + "/model.safetensors");
    QVERIFY2(good, good.status().message().c_str());
    const lattice::testing::Tensors tensors(*good);
    std::vector<st::TensorSource> sources;
    for (st::TensorSource& t : tensors.sources()) {
      if (t.name == "model.layers.1.self_attn.k_proj.weight") continue;     // missing
      if (t.name == "model.layers.0.mlp.up_proj.weight") t.shape = {C, F};  // wrong shape
      sources.push_back(t);
    }
    std::vector<float> inv_freq(HS / 2, 1.0f), extra(3, 0.0f);
    sources.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                       {HS / 2},
                       inv_freq.data(),
                       nullptr});  // a buffer: ignored
    sources.push_back({"model.layers.0.self_attn.q_norm.weight", {3}, extra.data(), nullptr});
    const std::string p = path("mismatch.safetensors");
    QVERIFY(st::write(p, sources));
    std::vector<float> y(layout.total_numel(), -7.0f);
    const Status s = lattice::import_hf_llama(p, c, layout, y.data());
    QVERIFY(!s);
    for (const std::string& part :
         {"cannot import " + p + " as Llama: 3 problems",
          std::string("model.layers.0.mlp.up_proj.weight has shape [16, 24] in the file but the "
                      "model (--hidden-size 16 --ffn-hidden-size 24) expects [24, 16]"),
          std::string("model.layers.1.self_attn.k_proj.weight is missing (the model "
                      "(--hidden-size 16 --num-attention-heads 4 --num-query-groups 2) expects "
                      "[8, 16])"),
          std::string("the file holds model.layers.0.self_attn.q_norm.weight [3], which Llama "
                      "has no place for")})
      QVERIFY2(s.message().find(part) != std::string::npos, contains_message(s, part).c_str());
    for (float v : y) QVERIFY2(v == -7.0f, "a refused import wrote the arena");

    // A model of three layers names the layer count and the flag.
    ModelConfig deeper = c;
    deeper.num_layers = 3;
    std::vector<float> z(ParamLayout(deeper).total_numel());
    const Status layers = lattice::import_hf_llama(d, deeper, ParamLayout(deeper), z.data());
    const std::string part =
        "the file holds 2 layers (model.layers.0 to model.layers.1) but the model has "
        "--num-layers 3";
    QVERIFY2(!layers && layers.message().find(part) != std::string::npos,
             contains_message(layers, part).c_str());
  }

  void a_tied_head_in_the_file_must_equal_the_embedding() {
    const ModelConfig c = qwen2_config();
    const ParamLayout layout(c);
    const std::string d = exported("tied", c, indexed_params(layout));
    auto file = st::File::open(d + "/model.safetensors");
    QVERIFY2(file, file.status().message().c_str());
    const lattice::testing::Tensors tensors(*file);
    std::vector<st::TensorSource> sources = tensors.sources();
    std::vector<float> head = tensors.values_of("model.embed_tokens.weight");
    sources.push_back({"lm_head.weight", {V, C}, head.data(), nullptr});
    const std::string same = path("tied-same.safetensors");
    QVERIFY(st::write(same, sources));
    std::vector<float> y(layout.total_numel());
    const Status s = lattice::import_hf_llama(same, c, layout, y.data());
    QVERIFY2(s, s.message().c_str());
    head[3] += 1.0f;
    const std::string other = path("tied-other.safetensors");
    QVERIFY(st::write(other, sources));
    const Status refused = lattice::import_hf_llama(other, c, layout, y.data());
    const std::string part =
        "lm_head.weight differs from model.embed_tokens.weight; Lattice ties the output layer";
    QVERIFY2(!refused && refused.message().find(part) != std::string::npos,
             contains_message(refused, part).c_str());
  }

  void models_without_a_hugging_face_form_are_refused_before_writing() {
    ModelConfig c = llama_config();
    c.normalization = "LayerNorm";
    const ParamLayout layout(c);
    std::vector<float> x(layout.total_numel());
    const std::string p = path("layernorm-rope");
    const Status s = lattice::export_hf(p, c, layout, x.data());
    const std::string part =
        "the model has no Hugging Face Llama form: --normalization LayerNorm: Hugging Face's "
        "Llama family uses RMSNorm";
    QVERIFY2(!s && s.message().find(part) != std::string::npos, contains_message(s, part).c_str());
    QVERIFY2(!fs::exists(p), "a refused export wrote something");

    ModelConfig gpt = ModelConfig{};
    gpt.swiglu = true;
    const std::vector<std::string> why = lattice::hf_unsupported(gpt);
    QVERIFY2(why.size() == 1 && why[0] == "--swiglu: GPT-2's MLP is GELU",
             why.empty() ? "nothing" : why[0].c_str());
  }
};

QTEST_APPLESS_MAIN(TestHfLlama)
#include "test_hf_llama.moc"
