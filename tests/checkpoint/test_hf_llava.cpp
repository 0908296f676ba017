// Hugging Face LLaVA (LlavaForConditionalGeneration) interchange of a vision-language model
// (hf_llava.h): a tiny CLIP tower + projector before a Llama-shaped LM exported and imported
// gives every parameter bit for bit, also into the chunks of TP 2 and through `lattice train
// --load-hf` on 2 MPI ranks; the files carry transformers' names and config.json keys; an
// independent float64 PyTorch forward from those files alone (llava_reference.py, written from
// transformers' CLIPVisionModel, LlavaMultiModalProjector and LlamaForCausalLM) gives Lattice's
// loss on the same image and tokens to 1e-9; what has no LLaVA form (no class token, a patch
// bias) and a config.json that disagrees with the flags given are refused in one sentence each.
// The images' mean and std travel in preprocessor_config.json (a CLIPImageProcessor's): export
// writes the model's, import reads them back bit for bit (CLIP's, assumed, without the file; a
// malformed one refused); a --load-hf run on data of another normalisation says so and trains on
// the data's. A GPT-2 language model (GPT2LMHeadModel under language_model.) round-trips and
// matches the reference too. The vocabulary's padding rows do not travel: a padded model reloads
// as itself with those rows the mean of the real rows (its loss the reference's with that many
// columns of the mean logit, within log(1 + padding / V) of the HF model's), and a
// trained VLM whose vocabulary needs no padding validates at the same loss through --load and
// through --load-hf of its `ckpt export-hf`. The reference is skipped where Debian's
// python3-torch is missing.
#include <QtTest/QtTest>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/hf_model.h"
#include "checkpoint/safetensors.h"
#include "common/files.h"
#include "common/hf_test_files.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "common/torch_reference.h"
#include "lattice/kernels.h"
#include "lattice/train_options.h"
#include "model/gpt.h"

using namespace lattice;

namespace {

constexpr int kBatch = 2, kSeq = 16;

// A Llama-shaped LM (RoPE, RMSNorm, SwiGLU, untied head, GQA with 2 groups) with a CLIP tower
// of 3 layers fed from the penultimate one (LLaVA's -2), 16 x 16 images in 8 x 8 patches. The
// vocabulary (120) is a multiple of 8, so no padding row (Lattice's softmax would see it; an HF
// file has none).
ModelConfig llava_config() {
  ModelConfig c = testing::tiny_vlm_config(true, 1, kSeq, 0.1f);
  c.make_vocab_size_divisible_by = 8;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.vision.num_layers = 3;
  c.vision.select_layer = -2;
  // Not CLIP's, and one channel a float that needs 9 digits to read back.
  c.vision.image_mean = {0.5f, 0.25f, 0.1234567f};
  c.vision.image_std = {0.3f, 0.2f, std::nextafter(0.27577711f, 1.0f)};
  return c;
}

std::vector<float> initial_weights(const ModelConfig& c) {
  GptModel<float> init(c, kBatch);
  if (!init.init_weights(7).is_ok()) qFatal("init_weights failed");
  return {init.params(), init.params() + init.arena_size()};
}

// The first tensor of `layout` whose bytes differ between a and b, or "".
QString first_difference(const ParamLayout& layout, const float* a, const float* b) {
  for (const ParamTensor& t : layout.tensors())
    if (std::memcmp(a + t.offset, b + t.offset, t.numel * sizeof(float)) != 0)
      return QString::fromStdString(t.name) + " differs";
  return {};
}

bool mentions(const Status& s, const std::string& text) {
  return !s.is_ok() && s.message().find(text) != std::string::npos;
}

bool same_bits(const std::array<float, 3>& a, const std::array<float, 3>& b) {
  return std::memcmp(a.data(), b.data(), sizeof a) == 0;
}

// Two sequences, each with one image's placeholders, their next-token targets (-1 where the
// next is a placeholder) and the images' pixels.
struct Batch {
  std::vector<int32_t> tokens, targets;  // (kBatch, kSeq)
  std::vector<float> images;             // (kBatch, Cin, H, W)
};

Batch test_batch(const ModelConfig& c) {
  const VisionConfig& v = c.vision;
  const int Np = v.patches(), N = kBatch * kSeq;
  Batch out{std::vector<int32_t>(N), std::vector<int32_t>(N), {}};
  for (int b = 0; b < kBatch; b++) {
    int32_t* x = out.tokens.data() + b * kSeq;
    for (int t = 0; t < kSeq; t++) x[t] = (t * 37 + b * 53 + 11) % c.vocab_size;
    for (int k = 0; k < Np; k++) x[2 + 3 * b + k] = c.image_token_id();
    for (int t = 0; t < kSeq; t++) {
      const int32_t next = t + 1 < kSeq ? x[t + 1] : 5;
      out.targets[b * kSeq + t] = next == c.image_token_id() ? -1 : next;
    }
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  out.images.resize(static_cast<size_t>(kBatch) * v.num_channels * v.img_h * v.img_w);
  for (float& p : out.images) p = pixel(rng);
  return out;
}

// Lattice's loss (GptModel<double>) of `c` with `weights` on `batch`; NaN when it cannot run.
double lattice_loss(const ModelConfig& c, const std::vector<float>& weights, const Batch& batch) {
  GptModel<double> model(c, kBatch);
  std::copy(weights.begin(), weights.end(), model.params());
  auto acts = model.new_activations();
  if (!acts || !model.load_images(**acts, batch.tokens.data(), batch.images.data()).is_ok())
    return std::nan("");
  return model.forward(**acts, batch.tokens.data(), batch.targets.data(), 0,
                       1.0f / (kBatch * kSeq));
}

}  // namespace

class HfLlava : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  ModelConfig config_ = llava_config();
  std::vector<float> weights_;
  QString exported() const { return dir_.filePath("llava"); }

  // Lattice's loss (lattice_loss) of `c` with `weights` against llava_reference.py's from the
  // HF files at `model_dir` (its softmax given `padding_columns` more columns of logit 0); ""
  // when they agree to 1e-9. `unpadded`, when given, gets the reference's loss without them.
  QString reference_check(const ModelConfig& c, const std::vector<float>& weights,
                          const QString& model_dir, int padding_columns = 0,
                          double* unpadded = nullptr) {
    const Batch batch = test_batch(c);
    const double ours = lattice_loss(c, weights, batch);
    if (std::isnan(ours)) return "Lattice's model cannot run";
    QJsonArray pixels;
    for (float p : batch.images) pixels.append(static_cast<double>(p));
    const QString spec = model_dir + "-spec.json";
    std::ofstream(spec.toStdString())
        << ("{\"tokens\": " + testing::rows_json(batch.tokens, kSeq) +
            ", \"targets\": " + testing::rows_json(batch.targets, kSeq) +
            ", \"images\": " + QJsonDocument(pixels).toJson(QJsonDocument::Compact) +
            ", \"padding_columns\": " + QString::number(padding_columns) + "}")
               .toStdString();
    const testing::Run py = testing::run_process(
        testing::kPython,
        {QString(LATTICE_SOURCE_DIR) + "/tests/checkpoint/llava_reference.py", model_dir, spec}, {},
        300000);
    if (py.exit_code != 0) return "the reference failed: " + py.err;
    const QJsonObject answer = QJsonDocument::fromJson(py.out.toUtf8()).object();
    const double theirs = answer["loss"].toDouble();
    if (unpadded) *unpadded = answer["loss_without_padding"].toDouble();
    if (std::abs(ours - theirs) <= 1e-9 * std::abs(theirs)) return {};
    return QString("loss: lattice %1, pytorch from the HF files %2")
        .arg(ours, 0, 'g', 17)
        .arg(theirs, 0, 'g', 17);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QVERIFY(config_.validate().empty());
    kernels::set_num_threads(2);
    weights_ = initial_weights(config_);
    const ParamLayout layout(config_);
    QVERIFY(hf_unsupported(config_).empty());
    const Status s = export_hf(exported().toStdString(), config_, layout, weights_.data());
    QVERIFY2(s.is_ok(), s.message().c_str());
  }

  void export_writes_transformers_names_shapes_and_config() {
    auto file = safetensors::File::open((exported() + "/model.safetensors").toStdString());
    QVERIFY(file);
    std::map<std::string, std::vector<int64_t>> got;
    for (const auto& t : file->tensors()) got[t.name] = t.shape;
    const std::string tower = "vision_tower.vision_model.", layer = tower + "encoder.layers.2.";
    const std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
        {tower + "embeddings.patch_embedding.weight", {16, 3, 8, 8}},
        {tower + "embeddings.class_embedding", {16}},
        {tower + "embeddings.position_embedding.weight", {5, 16}},
        {tower + "pre_layrnorm.weight", {16}},
        {tower + "post_layernorm.bias", {16}},
        {layer + "self_attn.q_proj.weight", {16, 16}},
        {layer + "self_attn.k_proj.bias", {16}},
        {layer + "self_attn.v_proj.weight", {16, 16}},
        {layer + "self_attn.out_proj.weight", {16, 16}},
        {layer + "layer_norm2.bias", {16}},
        {layer + "mlp.fc1.weight", {24, 16}},
        {"multi_modal_projector.linear_1.weight", {32, 16}},
        {"multi_modal_projector.linear_2.bias", {32}},
        {"language_model.model.embed_tokens.weight", {120, 32}},
        {"language_model.model.layers.1.self_attn.k_proj.weight", {16, 32}},
        {"language_model.model.layers.1.mlp.gate_proj.weight", {48, 32}},
        {"language_model.model.norm.weight", {32}},
        {"language_model.lm_head.weight", {120, 32}}};
    for (const auto& [name, shape] : want)
      QVERIFY2(got.count(name) && got[name] == shape, ("missing or misshapen: " + name).c_str());
    QCOMPARE(got.size(), size_t{2 * 9 + 2 + 3 * 16 + 4 + 4 + 2 + 2});

    const nlohmann::json c =
        nlohmann::json::parse(testing::slurp((exported() + "/config.json").toStdString()));
    QCOMPARE(c["architectures"], nlohmann::json::array({"LlavaForConditionalGeneration"}));
    QCOMPARE(c["model_type"], "llava");
    QCOMPARE(c["vision_feature_layer"], -2);
    QCOMPARE(c["vision_feature_select_strategy"], "default");
    QCOMPARE(c["projector_hidden_act"], "gelu");
    QCOMPARE(c["image_token_index"], config_.image_token_id());
    QCOMPARE(c["text_config"]["model_type"], "llama");
    QCOMPARE(c["text_config"]["num_key_value_heads"], 2);
    const nlohmann::json& v = c["vision_config"];
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, nlohmann::json>>{{"model_type", "clip_vision_model"},
                                                             {"hidden_size", 16},
                                                             {"intermediate_size", 24},
                                                             {"num_hidden_layers", 3},
                                                             {"num_attention_heads", 2},
                                                             {"image_size", 16},
                                                             {"patch_size", 8},
                                                             {"num_channels", 3},
                                                             {"layer_norm_eps", 1e-5},
                                                             {"hidden_act", "quick_gelu"}})
      QVERIFY2(v.contains(key) && v[key] == value,
               (key + " is " + v.value(key, nlohmann::json()).dump()).c_str());

    // preprocessor_config.json: a CLIPImageProcessor for 16 x 16 images with the model's mean
    // and std.
    const nlohmann::json p = nlohmann::json::parse(
        testing::slurp((exported() + "/preprocessor_config.json").toStdString()));
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"image_processor_type", "CLIPImageProcessor"},
             {"do_resize", true},
             {"size", {{"shortest_edge", 16}}},
             {"resample", 3},
             {"do_center_crop", true},
             {"crop_size", {{"height", 16}, {"width", 16}}},
             {"do_rescale", true},
             {"rescale_factor", 1.0 / 255},
             {"do_normalize", true}})
      QVERIFY2(p.contains(key) && p[key] == value,
               (key + " is " + p.value(key, nlohmann::json()).dump()).c_str());
    for (const char* key : {"image_mean", "image_std"}) {
      const std::array<float, 3>& want =
          key == std::string("image_mean") ? config_.vision.image_mean : config_.vision.image_std;
      QVERIFY2(p.contains(key) && p[key].is_array() && p[key].size() == 3, key);
      for (int c = 0; c < 3; c++)
        QVERIFY2(static_cast<float>(p[key][c].get<double>()) == want[c],
                 (std::string(key) + " is " + p[key].dump()).c_str());
    }
    QCOMPARE(p["image_mean"][0].dump(), std::string("0.5"));  // the short decimal
  }

  void import_reads_the_images_normalisation_from_preprocessor_config() {
    // The directory, and its weights file named alone (preprocessor_config.json beside it).
    for (const std::string& path :
         {exported().toStdString(), (exported() + "/model.safetensors").toStdString()}) {
      auto o = parse_train_flags({"--load-hf", path});
      QVERIFY2(o, o ? "" : o.status().message().c_str());
      const VisionConfig& v = o->model.vision;
      QVERIFY2(same_bits(v.image_mean, config_.vision.image_mean), path.c_str());
      QVERIFY2(same_bits(v.image_std, config_.vision.image_std), path.c_str());
      QVERIFY(!v.image_norm_assumed);
    }

    // None beside config.json: CLIP's, assumed (as an older Lattice checkpoint's).
    const QString bare = dir_.filePath("no-preprocessor");
    QVERIFY(QDir().mkpath(bare));
    QVERIFY(QFile::copy(exported() + "/model.safetensors", bare + "/model.safetensors"));
    QVERIFY(QFile::copy(exported() + "/config.json", bare + "/config.json"));
    auto clip = parse_train_flags({"--load-hf", bare.toStdString()});
    QVERIFY2(clip, clip ? "" : clip.status().message().c_str());
    QVERIFY(same_bits(clip->model.vision.image_mean, kClipImageMean));
    QVERIFY(same_bits(clip->model.vision.image_std, kClipImageStd));
    QVERIFY(clip->model.vision.image_norm_assumed);

    // A malformed one is refused in one sentence naming the file and the key.
    const std::string file = bare.toStdString() + "/preprocessor_config.json";
    const std::pair<nlohmann::json, std::string> bad[] = {
        {{{"image_mean", {0.5, 0.5}}}, ": image_mean is [0.5,0.5], not a list of 3 numbers"},
        {{{"image_std", {0.5, "0.5", 0.5}}},
         ": image_std is [0.5,\"0.5\",0.5], not a list of 3 numbers"},
        {{{"image_std", {0.5, 0.0, 0.5}}},
         ": image_std is [0.5,0.0,0.5]; every channel's std must be above 0"}};
    for (const auto& [json, why] : bad) {
      std::ofstream(file) << json.dump();
      auto refused = parse_train_flags({"--load-hf", bare.toStdString()});
      QVERIFY2(mentions(refused.status(), "--load-hf: " + file + why),
               refused ? "accepted" : refused.status().message().c_str());
    }
    QVERIFY(QFile::remove(QString::fromStdString(file)));
  }

  void import_gives_every_bit_back_whole_and_at_tp_2() {
    const ParamLayout layout(config_);
    std::vector<float> back(layout.total_numel(), 0.0f);
    Status s = import_hf(exported().toStdString(), config_, layout, back.data());
    QVERIFY2(s.is_ok(), s.message().c_str());
    const QString diff = first_difference(layout, weights_.data(), back.data());
    QVERIFY2(diff.isEmpty(), qPrintable(diff));

    // Each TP rank's chunk gets its slice of the whole import.
    ModelConfig tp = config_;
    tp.tensor_model_parallel_size = 2;
    for (int rank = 0; rank < 2; rank++) {
      ModelShard shard;
      shard.tp_rank = rank;
      shard.tp_size = 2;
      const ParamLayout chunk(tp, shard);
      std::vector<float> got(chunk.total_numel(), 0.0f), want(chunk.total_numel(), 0.0f);
      s = import_hf(exported().toStdString(), tp, chunk, got.data());
      QVERIFY2(s.is_ok(), s.message().c_str());
      for (const ParamTensor& t : chunk.tensors()) {
        const ParamTensor* whole = layout.find(t.name);
        QVERIFY(whole);
        std::vector<float> global(whole->numel);
        std::copy_n(back.data() + whole->offset, whole->numel, global.data());
        // TP 2 pads the vocabulary further: those rows are the mean of the real ones.
        const int64_t width = whole->numel / whole->global_shape[0];
        global.resize(t.global_shape[0] * width, 0.0f);
        if (t.global_shape[0] > whole->global_shape[0]) {
          ParamLayout padded(tp);
          std::vector<float> table(padded.total_numel(), 0.0f);
          const ParamTensor* p = padded.find(t.name);
          std::copy(global.begin(), global.end(), table.begin() + p->offset);
          table = testing::with_mean_padding_rows(padded, table, config_.vocab_size);
          std::copy_n(table.begin() + p->offset, global.size(), global.begin());
        }
        slice_from_global(t, global.data(), want.data() + t.offset);
      }
      const QString d = first_difference(chunk, want.data(), got.data());
      QVERIFY2(d.isEmpty(), qPrintable(QString("TP rank %1: %2").arg(rank).arg(d)));
    }
  }

  void the_names_newer_transformers_save_import_too() {
    // transformers 4.52+: model.language_model.<Llama's names without "model.">, lm_head at
    // the top, model.vision_tower., model.multi_modal_projector.
    auto file = safetensors::File::open((exported() + "/model.safetensors").toStdString());
    QVERIFY(file);
    const std::pair<std::string, std::string> renames[] = {
        {"language_model.model.", "model.language_model."},
        {"language_model.lm_head.", "lm_head."},
        {"vision_tower.", "model.vision_tower."},
        {"multi_modal_projector.", "model.multi_modal_projector."}};
    std::vector<std::vector<float>> data;
    data.reserve(file->tensors().size());
    std::vector<safetensors::TensorSource> sources;
    for (const auto& t : file->tensors()) {
      std::string name = t.name;
      for (const auto& [from, to] : renames)
        if (name.rfind(from, 0) == 0) {
          name = to + name.substr(from.size());
          break;
        }
      data.emplace_back(t.numel);
      QVERIFY(file->read_float(t, data.back().data()).is_ok());
      sources.push_back({name, t.shape, data.back().data(), {}});
    }
    const QString newer = dir_.filePath("newer");
    QVERIFY(QDir().mkpath(newer));
    QVERIFY(safetensors::write((newer + "/model.safetensors").toStdString(), sources).is_ok());
    QVERIFY(QFile::copy(exported() + "/config.json", newer + "/config.json"));
    const ParamLayout layout(config_);
    std::vector<float> back(layout.total_numel(), 0.0f);
    const Status s = import_hf(newer.toStdString(), config_, layout, back.data());
    QVERIFY2(s.is_ok(), s.message().c_str());
    const QString diff = first_difference(layout, weights_.data(), back.data());
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  void load_hf_on_two_tp_ranks_saves_the_same_bytes() {
    // --load-hf with no model flag (config.json gives them), lr 0, --save-hf: TP 1 and TP 2
    // write the file read.
    for (int ranks : {1, 2}) {
      const QString out = dir_.filePath(QString("saved-tp%1").arg(ranks));
      const testing::Run r = testing::run_lattice(ranks, {"train",
                                                          "--db",
                                                          dir_.filePath("runs.sqlite"),
                                                          "--load-hf",
                                                          exported(),
                                                          "--tensor-model-parallel-size",
                                                          QString::number(ranks),
                                                          "--mock-data",
                                                          "--train-iters",
                                                          "1",
                                                          "--eval-iters",
                                                          "0",
                                                          "--lr",
                                                          "0",
                                                          "--min-lr",
                                                          "0",
                                                          "--micro-batch-size",
                                                          "2",
                                                          "--threads",
                                                          "1",
                                                          "--save-hf",
                                                          out});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
      QVERIFY2(r.out.contains("loaded LLaVA"), qPrintable(r.out));
      // Mock data is CLIP-normalised, the file's mean and std are not: the run trains on the
      // data's, says so, and saves them.
      QVERIFY2(r.out.contains("differ from " + exported() +
                              "'s preprocessor_config.json (mean (0.5, 0.25, 0.123457)"),
               qPrintable(r.out));
      const nlohmann::json saved =
          nlohmann::json::parse(testing::slurp((out + "/preprocessor_config.json").toStdString()));
      for (int c = 0; c < 3; c++)
        QVERIFY(static_cast<float>(saved["image_mean"][c].get<double>()) == kClipImageMean[c]);
      QVERIFY2(testing::slurp((out + "/model.safetensors").toStdString()) ==
                   testing::slurp((exported() + "/model.safetensors").toStdString()),
               qPrintable(QString("TP %1 saved other bytes").arg(ranks)));
    }
  }

  void the_files_give_lattices_loss_in_an_independent_pytorch_forward() {
    if (!testing::torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    const QString errors = reference_check(config_, weights_, exported());
    QVERIFY2(errors.isEmpty(), qPrintable(errors));
  }

  void a_padded_vocabulary_reloads_with_mean_rows_and_nothing_else() {
    // 120 ids padded to 128 (Note [vocabulary padding rows] in hf_tensors.cpp): the file has no
    // place for the 8 padding rows, import makes each the mean of the real rows, and the
    // reloaded model's loss is the HF model's with 8 more columns, each the mean of the real
    // logits, to 1e-9: within log(1 + 8 / 120) of the HF model's own loss, and not the exported
    // model's (its padding rows were not the mean).
    if (!testing::torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    ModelConfig c = config_;
    c.make_vocab_size_divisible_by = 128;
    const int padding = c.padded_vocab_size() - c.vocab_size;
    QCOMPARE(padding, 8);
    const std::vector<float> weights = initial_weights(c);
    const ParamLayout layout(c);
    const QString out = dir_.filePath("llava-padded");
    Status s = export_hf(out.toStdString(), c, layout, weights.data());
    QVERIFY2(s.is_ok(), s.message().c_str());
    std::vector<float> back(layout.total_numel(), 1.0f);
    s = import_hf(out.toStdString(), c, layout, back.data());
    QVERIFY2(s.is_ok(), s.message().c_str());
    const std::vector<float> meaned = testing::with_mean_padding_rows(layout, weights, c.vocab_size);
    const QString diff = first_difference(layout, meaned.data(), back.data());
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    double hf_loss = 0;
    const QString mean_columns = reference_check(c, back, out, padding, &hf_loss);
    QVERIFY2(mean_columns.isEmpty(), qPrintable(mean_columns));
    const double reloaded = lattice_loss(c, back, test_batch(c));
    const double exported = lattice_loss(c, weights, test_batch(c));
    const double bound = std::log(1.0 + double(padding) / c.vocab_size);
    QVERIFY2(reloaded >= hf_loss && reloaded - hf_loss <= bound &&
                 std::abs(reloaded - exported) > 1e-6,
             qPrintable(QString("reloaded %1, the HF model's %2 (bound %3), the exported model's %4")
                            .arg(reloaded, 0, 'g', 17)
                            .arg(hf_loss, 0, 'g', 17)
                            .arg(bound, 0, 'g', 17)
                            .arg(exported, 0, 'g', 17)));
  }

  void a_trained_vlm_through_export_hf_gives_its_validation_loss_back() {
    // train --save, ckpt export-hf, then the validation loss through --load-hf equals the one
    // through --load, digit for digit: 15 ids + EOD need no padding at a multiple of 16, so the
    // two models are the same function. --finetune: a resumed --load evaluates the validation
    // samples after those its run saw (the checkpoint's consumed count), --load-hf from the
    // first.
    const QStringList quiet =
        QString(
            "--no-db --threads 1 --mock-data --micro-batch-size 4 --global-batch-size 8 "
            "--eval-iters 2 --make-vocab-size-divisible-by 16")
            .split(' ');
    const QStringList model =
        QString(
            "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
            "--vocab-size 15 --vision-model-type clip --vision-num-layers 2 "
            "--vision-hidden-size 16 --vision-num-attention-heads 2 --img-h 16 --img-w 16 "
            "--patch-dim 8 --vision-select-layer -2")
            .split(' ');
    const QString saved = dir_.filePath("trained"), hf = dir_.filePath("trained-hf");
    testing::Run r =
        testing::run_lattice(1, QStringList{"train", "--train-iters", "4", "--lr", "1e-2",
                                            "--eval-interval", "4", "--save", saved} +
                                    model + quiet);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("vocab 16 (padded 16)"), qPrintable(r.out));
    r = testing::run_lattice(1, {"ckpt", "export-hf", saved, hf});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    auto validation_loss = [&](const QStringList& args) -> QString {
      const testing::Run v =
          testing::run_lattice(1, QStringList{"train", "--skip-train"} + args + quiet);
      const QRegularExpression line("end of training for val data \\| lm loss value: (\\S+)");
      const QRegularExpressionMatch m = line.match(v.out);
      if (v.exit_code == 0 && m.hasMatch()) return m.captured(1);
      qWarning("%s", qPrintable(v.err + v.out));
      return {};
    };
    const QString loaded = validation_loss(QStringList{"--load", saved, "--finetune"} + model);
    const QString from_hf = validation_loss({"--load-hf", hf});
    QVERIFY2(!loaded.isEmpty() && loaded == from_hf,
             qPrintable("--load: " + loaded + "\n--load-hf of its export-hf: " + from_hf));
  }

  void a_gpt2_language_model_round_trips_and_matches_pytorch() {
    // GPT2LMHeadModel under language_model. (transformer.h.N..., Conv1D weights, tied head).
    ModelConfig c = testing::tiny_vlm_config(false, 1, kSeq, 0.1f);
    c.make_vocab_size_divisible_by = 8;
    c.vision.select_layer = -2;
    QVERIFY(c.validate().empty());
    QVERIFY(hf_unsupported(c).empty());
    const std::vector<float> weights = initial_weights(c);
    const ParamLayout layout(c);
    const QString out = dir_.filePath("llava-gpt2");
    Status s = export_hf(out.toStdString(), c, layout, weights.data());
    QVERIFY2(s.is_ok(), s.message().c_str());
    auto file = safetensors::File::open((out + "/model.safetensors").toStdString());
    QVERIFY(file);
    QVERIFY(file->find("language_model.transformer.h.1.attn.c_attn.weight"));
    QVERIFY(file->find("language_model.transformer.wpe.weight"));
    std::vector<float> back(layout.total_numel(), 0.0f);
    s = import_hf(out.toStdString(), c, layout, back.data());
    QVERIFY2(s.is_ok(), s.message().c_str());
    const QString diff = first_difference(layout, weights.data(), back.data());
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    auto flags = parse_train_flags({"--load-hf", out.toStdString()});
    QVERIFY2(flags, flags ? "" : flags.status().message().c_str());
    QCOMPARE(flags->model.normalization, std::string("LayerNorm"));
    QCOMPARE(flags->model.hidden_size, c.hidden_size);
    QCOMPARE(flags->model.num_layers, c.num_layers);
    QCOMPARE(flags->model.num_attention_heads, c.num_attention_heads);
    QCOMPARE(flags->model.ffn(), c.ffn());
    QCOMPARE(flags->model.max_positions(), c.max_positions());
    QCOMPARE(flags->model.vocab_size, c.vocab_size);
    QCOMPARE(flags->model.vision.select_layer, -2);
    if (!testing::torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    const QString errors = reference_check(c, weights, out);
    QVERIFY2(errors.isEmpty(), qPrintable(errors));
  }

  void what_llava_cannot_express_is_refused_naming_the_flag() {
    ModelConfig c = config_;
    c.vision.class_token = false;
    const ParamLayout layout(c);
    std::vector<float> params(layout.total_numel(), 0.0f);
    const Status s = export_hf(dir_.filePath("none").toStdString(), c, layout, params.data());
    QVERIFY2(mentions(s,
                      "--disable-vision-class-token: HF's CLIPVisionModel always has a "
                      "class token"),
             s.message().c_str());
    c = config_;
    c.vision.patch_bias = true;
    const std::vector<std::string> why = hf_unsupported(c);
    QVERIFY(why.size() == 1 &&
            why[0] == "--vision-patch-bias: HF CLIP's patch embedding has no bias");
  }

  void a_config_that_disagrees_with_the_flags_is_refused() {
    const std::string dir = exported().toStdString();
    auto hidden = parse_train_flags({"--load-hf", dir, "--vision-hidden-size", "32"});
    QVERIFY(mentions(hidden.status(), "--vision-hidden-size 32 disagrees with " + dir +
                                          "/config.json, which gives vision_config.hidden_size "
                                          "16"));
    auto layer = parse_train_flags({"--load-hf", dir, "--vision-select-layer", "-1"});
    QVERIFY(mentions(layer.status(), "--vision-select-layer -1 disagrees with " + dir +
                                         "/config.json, which gives vision_feature_layer -2"));
    auto cls = parse_train_flags({"--load-hf", dir, "--disable-vision-class-token"});
    QVERIFY(mentions(cls.status(), "(CLIP's tower has a class token)"));
    // No flag: the file's settings.
    auto fine = parse_train_flags({"--load-hf", dir});
    QVERIFY2(fine, fine ? "" : fine.status().message().c_str());
    QCOMPARE(fine->model.vision.num_layers, 3);
    QCOMPARE(fine->model.vision.select_layer, -2);
    QCOMPARE(fine->model.kv_heads(), 2);

    // A file that keeps the class token ("full") has no Lattice form.
    const QString full = dir_.filePath("full");
    QVERIFY(QDir().mkpath(full));
    QVERIFY(QFile::copy(exported() + "/model.safetensors", full + "/model.safetensors"));
    nlohmann::json c = nlohmann::json::parse(testing::slurp(dir + "/config.json"));
    c["vision_feature_select_strategy"] = "full";
    std::ofstream((full + "/config.json").toStdString()) << c.dump();
    auto strategy = parse_train_flags({"--load-hf", full.toStdString()});
    QVERIFY(mentions(strategy.status(),
                     "vision_feature_select_strategy is \"full\"; Lattice's tower drops the class "
                     "token (\"default\")"));
  }
};

QTEST_GUILESS_MAIN(HfLlava)
#include "test_hf_llava.moc"
