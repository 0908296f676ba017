// Specification of the HF GPT-2 mapping on a tiny model: exported elements sit where GPT-2's
// layout puts them (checked by hand-written index formulas), import inverts export, and a
// file that does not fit the model is refused with every problem listed once.
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/hf_gpt2.h"
#include "checkpoint/safetensors.h"
#include "common/files.h"
#include "common/hf_test_files.h"

using lattice::ModelConfig;
using lattice::ParamLayout;
using lattice::ParamTensor;
using lattice::Status;
namespace st = lattice::safetensors;

namespace {

using lattice::testing::indexed_params;

// L = 2, C = 8, NH = 2 (HS = 4), F = 32, V = 10 padded to Vp = 128, P = T = 4.
ModelConfig tiny_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.vocab_size = 10;
  c.make_vocab_size_divisible_by = 128;
  c.seq_length = 4;
  return c;
}
constexpr int64_t C = 8, NH = 2, HS = 4, F = 32, V = 10, Vp = 128, P = 4;

using lattice::testing::slurp;

// Element `index` of an F32 tensor in `file`.
float file_at(const st::File& file, const std::string& name, int64_t index) {
  float v;
  std::memcpy(&v, file.bytes(*file.find(name)).data() + index * 4, 4);
  return v;
}

using lattice::testing::Tensors;

std::string contains_message(const Status& s, const std::string& part) {
  return "message lacks '" + part + "': " + s.message();
}

}  // namespace

class TestHfGpt2 : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  const ModelConfig config_ = tiny_config();
  const ParamLayout layout_{config_};
  std::string path(const std::string& name) const {
    return dir_.filePath(QString::fromStdString(name)).toStdString();
  }
  const float* ours(const std::vector<float>& params, const std::string& name) const {
    return params.data() + layout_.find(name)->offset;
  }
  std::string exported(const std::string& name, const std::vector<float>& params) const {
    const std::string p = path(name);
    const Status s = lattice::export_hf_gpt2(p, config_, layout_, params.data());
    return s ? p : "export failed: " + s.message();
  }

 private slots:
  void export_writes_gpt2_names_shapes_and_metadata() {
    const std::string p = exported("names.safetensors", indexed_params(layout_));
    auto file = st::File::open(p);
    QVERIFY2(file, (p + " " + file.status().message()).c_str());
    QCOMPARE(file->metadata().at("format"), std::string("pt"));
    QCOMPARE(file->tensors().size(), size_t{2 + 12 * 2 + 2});
    const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
        {"wte.weight", {V, C}},
        {"wpe.weight", {P, C}},
        {"h.1.ln_1.weight", {C}},
        {"h.1.ln_1.bias", {C}},
        {"h.1.attn.c_attn.weight", {C, 3 * C}},
        {"h.1.attn.c_attn.bias", {3 * C}},
        {"h.1.attn.c_proj.weight", {C, C}},
        {"h.1.attn.c_proj.bias", {C}},
        {"h.1.ln_2.weight", {C}},
        {"h.1.ln_2.bias", {C}},
        {"h.1.mlp.c_fc.weight", {C, F}},
        {"h.1.mlp.c_fc.bias", {F}},
        {"h.1.mlp.c_proj.weight", {F, C}},
        {"h.1.mlp.c_proj.bias", {C}},
        {"ln_f.weight", {C}},
        {"ln_f.bias", {C}}};
    for (const auto& [name, shape] : expected) {
      const st::TensorInfo* t = file->find(name);
      QVERIFY2(t, (name + " is missing from the export").c_str());
      QVERIFY2(t->dtype == st::Dtype::kF32, name.c_str());
      QVERIFY2(t->shape == shape, (name + " has shape " + st::shape_to_string(t->shape) +
                                   ", GPT-2 has " + st::shape_to_string(shape))
                                      .c_str());
    }
  }

  void export_places_every_element_where_gpt2_expects_it() {
    const std::vector<float> x = indexed_params(layout_);
    const std::string p = exported("layout.safetensors", x);
    auto opened = st::File::open(p);
    QVERIFY2(opened, (p + " " + opened.status().message()).c_str());
    const st::File& file = opened.value();
    std::vector<std::string> wrong;  // "name[index] = got, expected value", all of them
    int64_t checked = 0;
    auto check = [&](const std::string& hf, int64_t hf_index, float expected) {
      const float got = file_at(file, hf, hf_index);
      checked++;
      if (got != expected)
        wrong.push_back(hf + "[" + std::to_string(hf_index) + "] = " + std::to_string(got) +
                        ", expected " + std::to_string(expected));
    };

    // One element by hand: layer 0, input channel c = 2, K of head h = 1, d = 3. GPT-2's
    // c_attn column is K-block + h*HS + d = 8 + 4 + 3 = 15, flat index 2 * 24 + 15 = 63; our
    // per-head row is h*3*HS + HS + d = 12 + 4 + 3 = 19, flat index 19 * 8 + 2 = 154.
    check("h.0.attn.c_attn.weight", 63,
          ours(x, "decoder.layers.0.self_attention.linear_qkv.weight")[154]);

    for (int64_t v = 0; v < V; v++)
      for (int64_t c = 0; c < C; c++)
        check("wte.weight", v * C + c, ours(x, "embedding.word_embeddings.weight")[v * C + c]);
    for (int64_t i = 0; i < P * C; i++)
      check("wpe.weight", i, ours(x, "embedding.position_embeddings.weight")[i]);

    for (int l = 0; l < 2; l++) {
      const std::string h = "h." + std::to_string(l) + ".";
      const std::string d = "decoder.layers." + std::to_string(l) + ".";
      const float* qkv_w = ours(x, d + "self_attention.linear_qkv.weight");  // (3C, C)
      const float* qkv_b = ours(x, d + "self_attention.linear_qkv.bias");    // (3C)
      for (int64_t s = 0; s < 3; s++)                                        // q, k, v
        for (int64_t head = 0; head < NH; head++)
          for (int64_t e = 0; e < HS; e++) {
            const int64_t column = s * C + head * HS + e;    // GPT-2: [Q | K | V] blocks
            const int64_t row = head * 3 * HS + s * HS + e;  // Megatron: per-head q, k, v
            check(h + "attn.c_attn.bias", column, qkv_b[row]);
            for (int64_t c = 0; c < C; c++)  // Conv1D (in = C, out = 3C)
              check(h + "attn.c_attn.weight", c * 3 * C + column, qkv_w[row * C + c]);
          }
      // Conv1D (in, out) holds our linear (out, in) transposed.
      const float* proj_w = ours(x, d + "self_attention.linear_proj.weight");  // (C, C)
      const float* fc1_w = ours(x, d + "mlp.linear_fc1.weight");               // (F, C)
      const float* fc2_w = ours(x, d + "mlp.linear_fc2.weight");               // (C, F)
      for (int64_t i = 0; i < C; i++)
        for (int64_t o = 0; o < C; o++)
          check(h + "attn.c_proj.weight", i * C + o, proj_w[o * C + i]);
      for (int64_t i = 0; i < C; i++)
        for (int64_t o = 0; o < F; o++) check(h + "mlp.c_fc.weight", i * F + o, fc1_w[o * C + i]);
      for (int64_t i = 0; i < F; i++)
        for (int64_t o = 0; o < C; o++) check(h + "mlp.c_proj.weight", i * C + o, fc2_w[o * F + i]);
      const std::pair<const char*, const char*> copies[] = {
          {"ln_1.weight", "input_layernorm.weight"},
          {"ln_1.bias", "input_layernorm.bias"},
          {"attn.c_proj.bias", "self_attention.linear_proj.bias"},
          {"ln_2.weight", "pre_mlp_layernorm.weight"},
          {"ln_2.bias", "pre_mlp_layernorm.bias"},
          {"mlp.c_fc.bias", "mlp.linear_fc1.bias"},
          {"mlp.c_proj.bias", "mlp.linear_fc2.bias"}};
      for (const auto& [hf, megatron] : copies) {
        const float* src = ours(x, d + megatron);
        for (int64_t i = 0; i < file.find(h + hf)->shape[0]; i++) check(h + hf, i, src[i]);
      }
    }
    for (int64_t i = 0; i < C; i++) {
      check("ln_f.weight", i, ours(x, "decoder.final_layernorm.weight")[i]);
      check("ln_f.bias", i, ours(x, "decoder.final_layernorm.bias")[i]);
    }
    QCOMPARE(checked, int64_t{1 + V * C + P * C +
                              2 * (3 * C * C + 3 * C + C * C + 2 * C * F + 6 * C + F) + 2 * C});
    std::string first_few;
    for (size_t i = 0; i < wrong.size() && i < 5; i++) first_few += "\n  " + wrong[i];
    QVERIFY2(wrong.empty(), (std::to_string(wrong.size()) + " of " + std::to_string(checked) +
                             " elements are misplaced:" + first_few)
                                .c_str());
  }

  void import_inverts_export_and_fills_the_padding_rows_with_the_mean_row() {
    const std::vector<float> x = indexed_params(layout_);
    const std::string p = exported("inverse.safetensors", x);
    std::vector<float> y(layout_.total_numel(), -7.0f);
    const Status s = lattice::import_hf_gpt2(p, config_, layout_, y.data());
    QVERIFY2(s, s.message().c_str());
    // Padding row r, column c: the mean over real rows of index values, offset + (V - 1) / 2 C + c.
    const std::vector<float> want = lattice::testing::with_mean_padding_rows(layout_, x, V);
    for (const ParamTensor& t : layout_.tensors())
      for (size_t i = 0; i < t.numel; i++)
        QVERIFY2(y[t.offset + i] == want[t.offset + i],
                 (t.name + "[" + std::to_string(i) + "] = " + std::to_string(y[t.offset + i]) +
                  " after import, expected " + std::to_string(want[t.offset + i]))
                     .c_str());
    const ParamTensor* e = layout_.find("embedding.word_embeddings.weight");
    QCOMPARE(e->numel, size_t{Vp * C});
    QVERIFY(Vp > V);
    QCOMPARE(want[e->offset + V * C], static_cast<float>(e->offset + (V - 1) / 2.0 * C));
  }

  void export_import_export_gives_identical_bytes() {
    const std::string first = exported("first.safetensors", indexed_params(layout_));
    std::vector<float> y(layout_.total_numel(), 0.0f);
    QVERIFY(lattice::import_hf_gpt2(first, config_, layout_, y.data()));
    const std::string second = exported("second.safetensors", y);
    QVERIFY2(slurp(first) == slurp(second), (first + " and " + second + " differ").c_str());
  }

  void transformer_prefix_mask_buffers_and_tied_lm_head_are_accepted() {
    const std::vector<float> x = indexed_params(layout_);
    auto plain = st::File::open(exported("plain.safetensors", x));
    QVERIFY2(plain, plain.status().message().c_str());
    const Tensors tensors(plain.value());
    std::vector<st::TensorSource> sources = tensors.sources("transformer.");
    std::vector<float> mask(P * P, 1.0f);
    const float masked_bias = -1e4f;
    sources.push_back({"transformer.h.0.attn.bias", {1, 1, P, P}, mask.data(), nullptr});
    sources.push_back({"transformer.h.1.attn.masked_bias", {}, &masked_bias, nullptr});
    sources.push_back({"lm_head.weight", {V, C}, tensors.values_of("wte.weight").data(), nullptr});
    const std::string p = path("prefixed.safetensors");
    QVERIFY(st::write(p, sources));

    std::vector<float> y(layout_.total_numel(), 0.0f), z(layout_.total_numel(), 0.0f);
    const Status s = lattice::import_hf_gpt2(p, config_, layout_, y.data());
    QVERIFY2(s, s.message().c_str());
    QVERIFY(lattice::import_hf_gpt2(plain->path(), config_, layout_, z.data()));
    QVERIFY2(y == z, "the prefixed file imported differently from the plain one");

    // An lm_head that differs from wte cannot be tied, so it is refused rather than dropped.
    std::vector<float> other_head = tensors.values_of("wte.weight");
    other_head[5] += 1.0f;
    sources.back().data = other_head.data();
    const std::string untied = path("untied.safetensors");
    QVERIFY(st::write(untied, sources));
    const Status refused = lattice::import_hf_gpt2(untied, config_, layout_, y.data());
    QVERIFY(!refused);
    const std::string part = "cannot import " + untied +
                             " as GPT-2: 1 problem: lm_head.weight differs from "
                             "transformer.wte.weight";
    QVERIFY2(refused.message().find(part) != std::string::npos,
             contains_message(refused, part).c_str());
  }

  void half_precision_files_import_exactly() {
    // Values below 256 are exact in F16 and BF16; tensors alternate between the two dtypes.
    std::vector<float> x(layout_.total_numel());
    for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>(i % 256);
    auto f32 = st::File::open(exported("to_halve.safetensors", x));
    QVERIFY2(f32, f32.status().message().c_str());
    const std::string p = path("half.safetensors");
    lattice::testing::write_half_precision_copy(*f32, p);

    std::vector<float> from_half(layout_.total_numel(), 0.0f),
        from_f32(layout_.total_numel(), 0.0f);
    const Status s = lattice::import_hf_gpt2(p, config_, layout_, from_half.data());
    QVERIFY2(s, s.message().c_str());
    QVERIFY(lattice::import_hf_gpt2(f32->path(), config_, layout_, from_f32.data()));
    for (size_t i = 0; i < from_half.size(); i++)
      QVERIFY2(from_half[i] == from_f32[i],
               ("arena[" + std::to_string(i) + "] = " + std::to_string(from_half[i]) +
                " from F16/BF16, " + std::to_string(from_f32[i]) + " from F32")
                   .c_str());
  }

  void mismatches_are_all_reported_in_one_message() {
    const std::vector<float> x = indexed_params(layout_);
    auto good = st::File::open(exported("good.safetensors", x));
    QVERIFY2(good, good.status().message().c_str());
    const Tensors tensors(good.value());
    std::vector<st::TensorSource> sources;
    std::vector<float> wide(C * 16, 0.0f), long_wpe(16 * C, 0.0f), extra(3, 0.0f);
    for (st::TensorSource& s : tensors.sources("")) {
      if (s.name == "h.0.ln_2.bias") continue;  // missing
      if (s.name == "h.1.mlp.c_fc.weight") s = {s.name, {C, 16}, wide.data(), nullptr};
      if (s.name == "wpe.weight") s = {s.name, {16, C}, long_wpe.data(), nullptr};
      sources.push_back(s);
    }
    sources.push_back({"h.1.attn.rotary.weight", {3}, extra.data(), nullptr});  // unexpected
    const std::string p = path("mismatch.safetensors");
    QVERIFY(st::write(p, sources));

    std::vector<float> y(layout_.total_numel(), -7.0f);
    const Status s = lattice::import_hf_gpt2(p, config_, layout_, y.data());
    QVERIFY(!s);
    const std::string parts[] = {
        "cannot import " + p + " as GPT-2: 4 problems",
        "h.1.mlp.c_fc.weight has shape [8, 16] in the file but the model (--hidden-size 8 "
        "--ffn-hidden-size 32) expects [8, 32]",
        "wpe.weight has shape [16, 8] in the file but the model (--hidden-size 8 --seq-length "
        "4; no --max-position-embeddings) expects [4, 8] (the position table must match "
        "exactly)",
        "h.0.ln_2.bias is missing (the model (--hidden-size 8) expects [8])",
        "the file holds h.1.attn.rotary.weight [3], which GPT-2 has no place for"};
    for (const std::string& part : parts)
      QVERIFY2(s.message().find(part) != std::string::npos, contains_message(s, part).c_str());
    for (size_t i = 0; i < y.size(); i++)
      QVERIFY2(y[i] == -7.0f, ("a refused import wrote arena[" + std::to_string(i) + "]").c_str());
  }

  void layer_count_mismatch_is_named_with_its_flag() {
    const std::string p = exported("two_layers.safetensors", indexed_params(layout_));
    ModelConfig deeper = config_;
    deeper.num_layers = 3;
    const ParamLayout deeper_layout(deeper);
    std::vector<float> y(deeper_layout.total_numel(), 0.0f);
    const Status s = lattice::import_hf_gpt2(p, deeper, deeper_layout, y.data());
    QVERIFY(!s);
    for (const std::string& part :
         {"cannot import " + p +
              " as GPT-2: 13 problems:\n  the file holds 2 layers (h.0 to h.1) "
              "but the model has --num-layers 3",
          std::string("\n  h.2.attn.c_attn.weight is missing"), std::string("\n  ... and 1 more")})
      QVERIFY2(s.message().find(part) != std::string::npos, contains_message(s, part).c_str());
  }

  void non_float_dtype_and_foreign_files_are_refused() {
    const std::string p = path("ints.safetensors");
    const std::string header =
        "{\"ln_f.bias\":{\"dtype\":\"I32\",\"shape\":[8],"
        "\"data_offsets\":[0,32]}}";
    const uint64_t n = header.size();
    std::ofstream(p, std::ios::binary)
        << std::string(reinterpret_cast<const char*>(&n), 8) << header << std::string(32, '\0');
    std::vector<float> y(layout_.total_numel(), 0.0f);
    const Status s = lattice::import_hf_gpt2(p, config_, layout_, y.data());
    QVERIFY(!s);
    for (const std::string& part :
         {"cannot import " + p + " as GPT-2",
          std::string("ln_f.bias has dtype I32; only F32, F16 and BF16 can be imported"),
          std::string("the file holds no layers (h.N.*) but the model has --num-layers 2"),
          std::string("wte.weight is missing")})
      QVERIFY2(s.message().find(part) != std::string::npos, contains_message(s, part).c_str());

    const std::string missing = path("absent.safetensors");
    const Status absent = lattice::import_hf_gpt2(missing, config_, layout_, y.data());
    QVERIFY2(!absent && absent.message().find(missing) != std::string::npos,
             absent.message().c_str());
  }
};

QTEST_APPLESS_MAIN(TestHfGpt2)
#include "test_hf_gpt2.moc"
