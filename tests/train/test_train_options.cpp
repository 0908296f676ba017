// `lattice train` flags: Megatron's names, --config files with flags overriding them, and
// one sentence per problem that names the flag (or the file and line).
#include <QtTest/QtTest>

#include <algorithm>

#include <QTemporaryDir>
#include <fstream>

#include "lattice/train_options.h"

using lattice::parse_train_options;

namespace {
std::vector<std::string> base() {
  return {"--mock-data"};
}
std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> args = base();
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}
bool mentions(const lattice::Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}
}  // namespace

class TrainOptionsTest : public QObject {
  Q_OBJECT
 private slots:
  void megatron_flags_set_the_model() {
    auto r = parse_train_options(
        with({"--num-layers", "3", "--hidden-size=48", "--num-attention-heads", "6", "--seq-length",
              "16", "--lr", "3e-4", "--lr-decay-style", "cosine", "--global-batch-size", "8",
              "--micro-batch-size", "2", "--hidden-dropout", "0", "--seed", "99"}));
    QVERIFY2(r.is_ok(), r.status().message().c_str());
    QCOMPARE(r->model.num_layers, 3);
    QCOMPARE(r->model.hidden_size, 48);
    QCOMPARE(r->model.num_attention_heads, 6);
    QCOMPARE(r->optim.lr, 3e-4f);
    QCOMPARE(r->optim.lr_decay_style, std::string("cosine"));
    QCOMPARE(r->num_micro_batches(), 4);
    QCOMPARE(r->model.hidden_dropout, 0.0f);
    QCOMPARE(r->seed, uint64_t(99));
  }

  void megatron_defaults() {
    auto r = parse_train_options(base());
    QVERIFY(r.is_ok());
    QCOMPARE(r->model.attention_dropout, 0.1f);
    QCOMPARE(r->model.hidden_dropout, 0.1f);
    QCOMPARE(r->optim.weight_decay, 0.01f);
    QCOMPARE(r->optim.adam_beta2, 0.999f);
    QCOMPARE(r->optim.clip_grad, 1.0f);
    QCOMPARE(r->model.make_vocab_size_divisible_by, 128);
    // Not given: left 0 for the layout to make micro-batch x DP (with_default_global_batch).
    QCOMPARE(r->global_batch_size, 0);
  }

  void loss_scaler_and_device_flags() {
    auto r = parse_train_options(
        with({"--fp16", "--initial-loss-scale", "65536", "--min-loss-scale", "2",
              "--loss-scale-window", "500", "--hysteresis", "3", "--device", "auto"}));
    QVERIFY2(r.is_ok(), r.status().message().c_str());
    QVERIFY(r->fp16);
    QCOMPARE(r->initial_loss_scale, 65536.0);
    QCOMPARE(r->min_loss_scale, 2.0);
    QCOMPARE(r->loss_scale_window, 500);
    QCOMPARE(r->hysteresis, 3);
    QCOMPARE(r->device, std::string("auto"));
    auto defaults = parse_train_options(base());
    QVERIFY(defaults.is_ok());
    QCOMPARE(defaults->initial_loss_scale, 4294967296.0);  // Megatron: 2^32
    QCOMPARE(defaults->loss_scale_window, 1000);
    QCOMPARE(defaults->hysteresis, 2);
    QCOMPARE(defaults->device, std::string("cpu"));
    auto both = parse_train_options(with({"--fp16", "--bf16"}));
    QVERIFY(!both.is_ok() && mentions(both.status(), "exclude each other"));
    auto stray = parse_train_options(with({"--loss-scale", "1024"}));
    QVERIFY(!stray.is_ok() && mentions(stray.status(), "--loss-scale applies only with"));
    auto device = parse_train_options(with({"--device", "tpu"}));
    QVERIFY(!device.is_ok() && mentions(device.status(), "--device 'tpu'"));
    auto hysteresis = parse_train_options(with({"--fp16", "--hysteresis", "0"}));
    QVERIFY(!hysteresis.is_ok() && mentions(hysteresis.status(), "--hysteresis"));
  }

  void vocabulary_is_padded_as_megatron() {
    auto r = parse_train_options(with({"--vocab-size", "50257"}));
    QVERIFY(r.is_ok());
    QCOMPARE(r->model.padded_vocab_size(), 50304);
    r = parse_train_options(with({"--vocab-size", "1000", "--make-vocab-size-divisible-by", "64"}));
    QCOMPARE(r->model.padded_vocab_size(), 1024);
  }

  void unknown_flag_is_named_with_a_suggestion() {
    auto r = parse_train_options(with({"--num-layer", "4"}));
    QVERIFY(!r.is_ok());
    QVERIFY2(mentions(r.status(), "unknown flag --num-layer (did you mean --num-layers?)"),
             r.status().message().c_str());
  }

  void malformed_values_name_the_flag() {
    auto r = parse_train_options(with({"--num-layers", "four", "--lr", "fast"}));
    QVERIFY(!r.is_ok());
    QVERIFY2(mentions(r.status(), "--num-layers expects an integer, got 'four'"),
             r.status().message().c_str());
    QVERIFY2(mentions(r.status(), "--lr expects a number, got 'fast'"),
             r.status().message().c_str());
  }

  void impossible_values_are_all_reported() {
    auto r = parse_train_options(with({"--hidden-size", "100", "--num-attention-heads", "3",
                                       "--global-batch-size", "10", "--micro-batch-size", "4",
                                       "--attention-dropout", "1.5", "--lr-decay-style", "steep"}));
    QVERIFY(!r.is_ok());
    const auto& s = r.status();
    QVERIFY2(mentions(s, "--num-attention-heads 3 does not divide --hidden-size 100"),
             s.message().c_str());
    QVERIFY2(mentions(s, "--global-batch-size 10 is not a multiple of --micro-batch-size 4"),
             s.message().c_str());
    QVERIFY2(mentions(s, "--attention-dropout must lie in [0, 1)"), s.message().c_str());
    QVERIFY2(mentions(s, "--lr-decay-style 'steep' is not one of constant, linear, cosine"),
             s.message().c_str());
  }

  // --distributed-timeout-minutes: Megatron's default of 10, fractions for short tests, 0 for
  // no timeout; a negative value is refused naming the flag.
  void distributed_timeout_minutes() {
    auto defaults = parse_train_options(base());
    QVERIFY(defaults.is_ok());
    QCOMPARE(defaults->distributed_timeout_minutes, 10.0);
    auto fraction = parse_train_options(with({"--distributed-timeout-minutes", "0.05"}));
    QVERIFY2(fraction.is_ok(), fraction.status().message().c_str());
    QCOMPARE(fraction->distributed_timeout_minutes, 0.05);
    QVERIFY(parse_train_options(with({"--distributed-timeout-minutes", "0"})).is_ok());
    auto negative = parse_train_options(with({"--distributed-timeout-minutes", "-1"}));
    QVERIFY(!negative.is_ok());
    QVERIFY2(mentions(negative.status(), "--distributed-timeout-minutes must not be negative"),
             negative.status().message().c_str());
  }

  void training_needs_data() {
    auto r = parse_train_options({});
    QVERIFY(!r.is_ok());
    QVERIFY2(mentions(r.status(), "--mock-data"), r.status().message().c_str());
  }

  void sft_flags_need_a_dataset_and_each_other() {
    auto ok = parse_train_options({"--sft", "--sft-packing", "--data-path", "chat"});
    QVERIFY2(ok.is_ok(), ok.status().message().c_str());
    QVERIFY(ok->sft && ok->sft_packing);
    auto mock = parse_train_options({"--sft", "--mock-data"});
    QVERIFY(!mock.is_ok());
    QVERIFY2(mentions(mock.status(), "--sft trains on a chat dataset with a loss mask"),
             mock.status().message().c_str());
    auto alone = parse_train_options({"--sft-packing", "--data-path", "chat"});
    QVERIFY(!alone.is_ok());
    QVERIFY2(mentions(alone.status(), "--sft-packing needs --sft"),
             alone.status().message().c_str());
  }

  void config_file_is_read_and_flags_override_it() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("run.json").toStdString();
    std::ofstream(path) << R"({"num-layers": 6, "hidden_size": 96, "num-attention-heads": 4,
                              "mock-data": true, "lr": 0.002})";
    auto r = parse_train_options({"--config", path, "--num-layers", "2"});
    QVERIFY2(r.is_ok(), r.status().message().c_str());
    QCOMPARE(r->model.num_layers, 2);    // flag wins
    QCOMPARE(r->model.hidden_size, 96);  // underscore key accepted
    QCOMPARE(r->optim.lr, 0.002f);
    QCOMPARE(r->config_path, path);
  }

  void flags_given_on_the_command_line_or_in_the_config_are_told_from_defaults() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("run.json").toStdString();
    std::ofstream(path) << R"({"hidden_size": 96, "mock-data": true})";
    auto r = parse_train_options({"--config", path, "--num-layers=2", "--seq-length", "64"});
    QVERIFY2(r.is_ok(), r.status().message().c_str());
    QVERIFY(r->given("num-layers"));
    QVERIFY(r->given("hidden-size"));  // the config's key, underscores and all
    QVERIFY(r->given("mock-data"));
    QVERIFY2(r->given("seq-length"), "a flag given with its default value is still given");
    QVERIFY(!r->given("num-attention-heads"));
    QVERIFY(!r->given("vocab-size"));
  }

  void malformed_config_names_file_and_line() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("bad.json").toStdString();
    std::ofstream(path) << "{\n  \"num-layers\": 4,\n  \"lr\": ,\n}\n";
    auto r = parse_train_options({"--config", path});
    QVERIFY(!r.is_ok());
    QVERIFY2(mentions(r.status(), path + ":3: not valid JSON"), r.status().message().c_str());
  }

  void config_keys_are_checked() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("keys.json").toStdString();
    std::ofstream(path) << R"({"mock-data": true, "num-layres": 4, "lr": "high"})";
    auto r = parse_train_options({"--config", path});
    QVERIFY(!r.is_ok());
    QVERIFY2(mentions(r.status(), "unknown key --num-layres (did you mean --num-layers?)"),
             r.status().message().c_str());
    QVERIFY2(mentions(r.status(), "key \"lr\" expects a number, got \"high\""),
             r.status().message().c_str());
  }

  void missing_config_file_is_named() {
    auto r = parse_train_options({"--config", "/nonexistent/run.json"});
    QVERIFY(!r.is_ok());
    QVERIFY2(mentions(r.status(), "--config /nonexistent/run.json: cannot open the file"),
             r.status().message().c_str());
  }

  void settings_round_trip_through_json() {
    auto r = parse_train_options(
        with({"--num-layers", "3", "--lr", "0.5", "--lr-decay-style", "cosine"}));
    QVERIFY(r.is_ok());
    auto again = lattice::parse_train_options_json(lattice::train_options_json(*r), "record");
    QVERIFY2(again.is_ok(), again.status().message().c_str());
    QCOMPARE(lattice::train_options_json(*again), lattice::train_options_json(*r));
  }

  // The vision tower's flags (docs/vision.md, Megatron's and LLaVA's names): read into
  // TrainOptions::vision, copied into the model's config, checked by VisionConfig's rules in one
  // sentence each; the combinations training does not run are refused.
  void vision_flags_are_read_checked_and_refused_where_unsupported() {
    auto r = lattice::parse_train_flags(with({"--vision-model-type",
                                              "clip",
                                              "--vision-num-layers",
                                              "4",
                                              "--vision-hidden-size",
                                              "48",
                                              "--vision-num-attention-heads",
                                              "3",
                                              "--patch-dim",
                                              "14",
                                              "--img-h",
                                              "336",
                                              "--img-w",
                                              "224",
                                              "--disable-vision-class-token",
                                              "--vision-select-layer",
                                              "-1",
                                              "--hidden-size",
                                              "96",
                                              "--freeze-LM",
                                              "--freeze-ViT"}));
    QVERIFY2(r.is_ok(), r.status().message().c_str());
    const lattice::VisionConfig v = r->vision_config();
    QCOMPARE(v.num_layers, 4);
    QCOMPARE(v.hidden_size, 48);
    QCOMPARE(v.num_attention_heads, 3);
    QCOMPARE(v.patches(), 24 * 16);
    QCOMPARE(v.seq_length(), 24 * 16);  // no class token
    QCOMPARE(v.layers_run(), 4);
    QCOMPARE(v.lm_hidden_size, 96);
    QVERIFY(v.validate().empty());
    QVERIFY(r->model.has_vision());  // the model's config carries the tower
    QCOMPARE(r->model.vision.hidden_size, 48);
    QCOMPARE(r->model.vision.lm_hidden_size, 96);
    QVERIFY(r->model.freeze_lm && r->model.freeze_vision);
    QVERIFY(r->validate().empty());
    // 16-bit compute trains the tower too (Note [tower precision] in model/gpt_vision.cpp).
    for (const char* precision : {"--bf16", "--fp16"}) {
      auto half = parse_train_options(with({"--vision-model-type", "clip", precision}));
      QVERIFY2(half.is_ok(), half.status().message().c_str());
    }
    auto cp =
        parse_train_options(with({"--vision-model-type", "clip", "--context-parallel-size", "2"}));
    // Context parallelism splits the spliced sequence (Note [images under context
    // parallelism]); tests/train/test_vlm_layouts.sh runs it.
    QVERIFY2(cp.is_ok(), cp.status().message().c_str());
    QVERIFY(cp->validate().empty());
    auto hf = parse_train_options(
        with({"--vision-model-type", "clip", "--disable-vision-class-token", "--save-hf", "out"}));
    QVERIFY(mentions(hf.status(),
                     "--save-hf: --disable-vision-class-token: HF's CLIPVisionModel always has "
                     "a class token"));
    auto text = parse_train_options(with({"--freeze-ViT"}));
    QVERIFY(mentions(text.status(), "--freeze-ViT needs a vision tower"));
    auto bad = parse_train_options(with({"--vision-model-type", "siglip", "--patch-dim", "5"}));
    QVERIFY(!bad.is_ok());
    QVERIFY(mentions(bad.status(), "--vision-model-type 'siglip' is not supported"));
    QVERIFY(mentions(bad.status(), "--patch-dim 5 does not divide --img-h 32"));
    QVERIFY(parse_train_options(base()).is_ok());  // text only: no vision rule applies
  }

  void help_lists_every_flag_with_its_default() {
    const std::string help = lattice::train_options_help();
    for (const char* flag : {"--num-layers", "--ffn-hidden-size", "--max-position-embeddings",
                             "--global-batch-size", "--lr-warmup-iters", "--adam-eps",
                             "--clip-grad", "--make-vocab-size-divisible-by", "--load-hf"})
      QVERIFY2(help.find(flag) != std::string::npos, flag);
    QVERIFY(help.find("(default 0.1)") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TrainOptionsTest)
#include "test_train_options.moc"
