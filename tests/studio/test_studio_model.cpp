// The Plan form's Model section with the Llama family (issue 23): the presets hold their
// Hugging Face configs and are recognised again, every new field is editable as one undo step
// (the preset list then says Custom), a broken rule shows under its row, the fields round-trip
// through config files, saved settings and the launch command, and Suggest finds valid layouts
// for Llama 3 70B.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "app/studio_settings.h"
#include "launch/launch_command.h"
#include "plan/form_section.h"
#include "plan/model_presets.h"
#include "plan/model_section.h"
#include "plan/plan_model.h"
#include "plan/suggest_dialog.h"
#include "plan/suggest_model.h"
#include "plan/train_flags.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const ModelPreset& preset(const QString& name) {
  for (const ModelPreset& p : modelPresets())
    if (p.name == name) return p;
  qFatal("no preset %s", qPrintable(name));
}

Plan planOf(const QString& name) {
  Plan plan = defaultPlan();
  applyPreset(plan.options, preset(name));
  normalizePlan(plan);
  return plan;
}

QString errorText(QWidget* root, const QString& field) {
  auto* label = root->findChild<QLabel*>(FormSection::errorLabelName(field));
  return label && label->isVisibleTo(root) ? label->text() : QString();
}

}  // namespace

class TestStudioModel : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

  // config.json's values, and the checkpoints' published totals at TP 1 (every vocabulary is a
  // multiple of 128, so nothing is padded).
  void presetsHoldTheirHuggingFaceConfigs_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QList<int>>("shape");  // layers, hidden, heads, kv heads, FFN, vocab
    QTest::addColumn<double>("theta");
    QTest::addColumn<double>("epsilon");
    QTest::addColumn<bool>("qkvBias");
    QTest::addColumn<qint64>("parameters");
    QTest::newRow("Llama 3 8B") << "Llama 3 8B" << QList<int>{32, 4096, 32, 8, 14336, 128256}
                                << 500000.0 << 1e-5 << false << 8030261248LL;
    QTest::newRow("Llama 3 70B") << "Llama 3 70B" << QList<int>{80, 8192, 64, 8, 28672, 128256}
                                 << 500000.0 << 1e-5 << false << 70553706496LL;
    QTest::newRow("Llama 3.1 405B")
        << "Llama 3.1 405B" << QList<int>{126, 16384, 128, 8, 53248, 128256} << 500000.0 << 1e-5
        << false << 405853388800LL;
    QTest::newRow("Qwen2.5 7B") << "Qwen2.5 7B" << QList<int>{28, 3584, 28, 4, 18944, 152064}
                                << 1000000.0 << 1e-6 << true << 7615616512LL;
    QTest::newRow("Mistral 7B") << "Mistral 7B v0.1" << QList<int>{32, 4096, 32, 8, 14336, 32000}
                                << 10000.0 << 1e-5 << false << 7241732096LL;
  }

  void presetsHoldTheirHuggingFaceConfigs() {
    QFETCH(QString, name);
    QFETCH(QList<int>, shape);
    QFETCH(double, theta);
    QFETCH(double, epsilon);
    QFETCH(bool, qkvBias);
    QFETCH(qint64, parameters);
    const Plan plan = planOf(name);
    const ModelConfig& m = plan.options.model;
    QCOMPARE((QList<int>{m.num_layers, m.hidden_size, m.num_attention_heads, m.kv_heads(), m.ffn(),
                         m.vocab_size}),
             shape);
    QVERIFY(m.group_query_attention && m.swiglu && m.rope() && m.rms_norm());
    QVERIFY(m.untie_embeddings_and_output_weights && m.disable_bias_linear);
    QCOMPARE(m.add_qkv_bias, qkvBias);
    QCOMPARE(m.rotary_base, static_cast<float>(theta));
    QCOMPARE(m.rotary_percent, 1.0f);
    QCOMPARE(m.norm_epsilon, static_cast<float>(epsilon));
    QCOMPARE(m.num_parameters(), parameters);
    QVERIFY2(m.validate().empty(), m.validate().empty() ? "" : m.validate().front().c_str());
    QCOMPARE(modelPresets()[presetIndexOf(plan.options)].name, name);
  }

  // Every field applyPreset sets counts; fields the model ignores do not.
  void anyChangedArchitectureFieldMakesTheModelCustom() {
    const Plan llama = planOf("Llama 3 8B");
    QVERIFY(presetIndexOf(llama.options) >= 0);
    const std::vector<std::pair<const char*, std::function<void(ModelConfig&)>>> edits = {
        {"num-query-groups", [](ModelConfig& m) { m.num_query_groups = 4; }},
        {"group-query-attention", [](ModelConfig& m) { m.group_query_attention = false; }},
        {"swiglu", [](ModelConfig& m) { m.swiglu = false; }},
        {"ffn-hidden-size", [](ModelConfig& m) { m.ffn_hidden_size = 14400; }},
        {"position-embedding-type", [](ModelConfig& m) { m.position_embedding_type = "none"; }},
        {"rotary-base", [](ModelConfig& m) { m.rotary_base = 10000; }},
        {"rotary-percent", [](ModelConfig& m) { m.rotary_percent = 0.5f; }},
        {"normalization", [](ModelConfig& m) { m.normalization = "LayerNorm"; }},
        {"norm-epsilon", [](ModelConfig& m) { m.norm_epsilon = 1e-6f; }},
        {"untie", [](ModelConfig& m) { m.untie_embeddings_and_output_weights = false; }},
        {"disable-bias-linear", [](ModelConfig& m) { m.disable_bias_linear = false; }},
        {"add-qkv-bias", [](ModelConfig& m) { m.add_qkv_bias = true; }}};
    for (const auto& [what, edit] : edits) {
      Plan changed = llama;
      edit(changed.options.model);
      QVERIFY2(presetIndexOf(changed.options) == -1, what);
    }
    Plan gpt2 = planOf("GPT-2 124M");
    gpt2.options.model.rotary_base = 500000;  // no RoPE: ignored
    gpt2.options.model.num_query_groups = 4;  // no GQA: ignored
    QCOMPARE(modelPresets()[presetIndexOf(gpt2.options)].name, QString("GPT-2 124M"));
  }

  void everyNewFieldIsOneUndoStepAndTheListSaysCustom() {
    PlanModel model;
    model.resetPlan(planOf("Qwen2.5 7B"));
    ModelSection section(&model);
    section.refresh();
    QObject::connect(&model, &PlanModel::planChanged, &section, &ModelSection::refresh);
    auto* list = section.findChild<QComboBox*>("preset");
    QCOMPARE(list->currentText(), QString("Qwen2.5 7B"));
    const Plan before = model.plan();
    const ModelConfig& m = model.plan().options.model;
    auto combo = [&](const char* name, const QString& value) {
      auto* box = section.findChild<QComboBox*>(name);
      QVERIFY2(box && box->findData(value) >= 0, name);
      box->setCurrentIndex(box->findData(value));
      emit box->activated(box->currentIndex());
    };
    auto check = [&](const char* name, bool on) {
      auto* box = section.findChild<QCheckBox*>(name);
      QVERIFY2(box, name);
      box->setChecked(on);
    };
    const std::vector<std::pair<const char*, std::function<void()>>> steps = {
        {"groups 7", [&] { section.findChild<QSpinBox*>("num-query-groups")->setValue(7); }},
        {"no GQA", [&] { check("group-query-attention", false); }},
        {"GELU", [&] { check("swiglu", false); }},
        {"learned positions", [&] { combo("position-embedding-type", "learned_absolute"); }},
        {"rope", [&] { combo("position-embedding-type", "rope"); }},
        {"theta", [&] { section.findChild<QDoubleSpinBox*>("rotary-base")->setValue(20000); }},
        {"rotary 50 %",
         [&] { section.findChild<QDoubleSpinBox*>("rotary-percent")->setValue(50); }},
        {"epsilon", [&] { section.findChild<QDoubleSpinBox*>("norm-epsilon")->setValue(1e-5); }},
        {"LayerNorm", [&] { combo("normalization", "LayerNorm"); }},
        {"tied", [&] { check("untie-embeddings-and-output-weights", false); }},
        {"no QKV bias", [&] { check("add-qkv-bias", false); }},
        {"biases", [&] { check("disable-bias-linear", false); }}};
    for (const auto& [name, step] : steps) {
      const int count = model.undoStack()->count();
      step();
      if (QTest::currentTestFailed()) return;
      QVERIFY2(model.undoStack()->count() == count + 1, name);
      QVERIFY2(list->currentText() == "Custom", name);
    }
    QCOMPARE(m.num_query_groups, 7);
    QVERIFY(!m.group_query_attention && !m.swiglu && m.rope());
    QCOMPARE(m.rotary_base, 20000.0f);
    QCOMPARE(m.rotary_percent, 0.5f);
    QCOMPARE(m.norm_epsilon, 1e-5f);
    QCOMPARE(m.normalization, std::string("LayerNorm"));
    QVERIFY(!m.untie_embeddings_and_output_weights && !m.add_qkv_bias && !m.disable_bias_linear);
    QVERIFY2(model.isValid(),
             qPrintable(model.isValid() ? QString() : model.analysis().errors[0].message));
    for (size_t i = 0; i < steps.size(); i++) model.undoStack()->undo();
    QVERIFY(samePlan(model.plan(), before));
    QCOMPARE(list->currentText(), QString("Qwen2.5 7B"));
    QCOMPARE(section.findChild<QDoubleSpinBox*>("norm-epsilon")->text(), QString("1e-06"));
  }

  void brokenRulesShowUnderTheirRow() {
    PlanModel model;
    model.resetPlan(planOf("Qwen2.5 7B"));
    ModelSection section(&model);
    QObject::connect(&model, &PlanModel::planChanged, &section, &ModelSection::refresh);
    section.refresh();
    section.show();
    section.findChild<QSpinBox*>("num-query-groups")->setValue(3);
    QVERIFY2(errorText(&section, "group-query-attention")
                 .contains("--num-query-groups 3 does not divide --num-attention-heads 28"),
             qPrintable(errorText(&section, "group-query-attention")));
    model.undoStack()->undo();
    QVERIFY(errorText(&section, "group-query-attention").isEmpty());
    auto* norm = section.findChild<QComboBox*>("normalization");
    norm->setCurrentIndex(norm->findData("LayerNorm"));
    emit norm->activated(norm->currentIndex());  // Qwen2.5's epsilon is 1e-06
    QVERIFY2(
        errorText(&section, "normalization")
            .contains(QRegularExpression("^--norm-epsilon \\S+ needs --normalization RMSNorm")),
        qPrintable(errorText(&section, "normalization")));
    QVERIFY(!model.isValid());
  }

  void fieldsRoundTripThroughConfigSettingsAndLaunch() {
    Plan plan = planOf("Qwen2.5 7B");
    plan.options.model.rotary_percent = 0.5f;
    plan.options.model.tensor_model_parallel_size = 4;
    plan.cluster = {.name = {}, .nodes = 1, .devices_per_node = 4, .device = "h100"};
    normalizePlan(plan);
    QTemporaryDir dir;
    const QString path = dir.filePath("qwen.json");
    QVERIFY(writeConfigFile(path, plan.options));
    Result<TrainOptions> back = readConfigFile(path);
    QVERIFY2(back, back ? "" : back.status().message().c_str());
    QCOMPARE(QString::fromStdString(train_options_json(*back)),
             QString::fromStdString(train_options_json(plan.options)));
    QSettings settings(dir.filePath("studio.ini"), QSettings::IniFormat);
    savePlan(settings, plan);
    const std::optional<Plan> loaded = loadPlan(settings);
    QVERIFY(loaded && samePlan(*loaded, plan));

    LaunchSettings launch;
    launch.data = DataSource::kMock;
    LaunchEnvironment env;
    env.lattice = "lattice";
    env.mpirun = "/usr/bin/mpirun";
    env.cores = 4;
    env.dataDir = dir.path();
    const LaunchCommand cmd = buildLaunchCommand(plan, analyzePlan(plan, 0), launch, env);
    QVERIFY(!cmd.steps.empty());
    const QStringList& args = cmd.steps.back().arguments;
    const QString line = args.join(' ');
    for (const char* part :
         {"--position-embedding-type rope", "--rotary-base 1000000", "--rotary-percent 0.5",
          "--normalization RMSNorm", "--norm-epsilon 1e-06", "--swiglu", "--group-query-attention",
          "--num-query-groups 4", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
          "--add-qkv-bias", "--ffn-hidden-size 18944"})
      QVERIFY2(line.contains(part), qPrintable(QString(part) + " missing from: " + line));
    // What Start trains (the command's flags through the engine's parser) is the plan's model.
    Result<TrainOptions> trained = runConfiguration(plan, launch, env);
    QVERIFY(trained);
    const ModelConfig& a = trained->model;
    const ModelConfig& b = plan.options.model;
    QVERIFY(a.position_embedding_type == b.position_embedding_type &&
            a.rotary_base == b.rotary_base && a.rotary_percent == b.rotary_percent &&
            a.normalization == b.normalization && a.norm_epsilon == b.norm_epsilon &&
            a.swiglu == b.swiglu && a.group_query_attention == b.group_query_attention &&
            a.num_query_groups == b.num_query_groups &&
            a.untie_embeddings_and_output_weights == b.untie_embeddings_and_output_weights &&
            a.disable_bias_linear == b.disable_bias_linear && a.add_qkv_bias == b.add_qkv_bias);
  }

  void suggestFindsLayoutsForLlama3_70B() {
    PlanModel model;
    Plan plan = planOf("Llama 3 70B");
    plan.cluster = {.name = {}, .nodes = 8, .devices_per_node = 8, .device = "h100"};
    setPrecision(plan.options, "bf16");
    model.resetPlan(plan);
    SuggestDialog dialog(&model);
    QSignalSpy finished(&dialog, &SuggestDialog::searchFinished);
    dialog.search();
    QVERIFY2(finished.wait(60000), "the search did not finish in 60 s");
    SuggestModel* table = dialog.tableModel();
    QVERIFY(table->rowCount() > 0);
    QVERIFY(table->candidate(0).fits);
    for (int r = 0; r < table->rowCount(); r++)
      QVERIFY2(8 % table->candidate(r).layout.tp == 0,
               qPrintable(QString("row %1: TP %2 splits 8 query groups")
                              .arg(r)
                              .arg(table->candidate(r).layout.tp)));
    dialog.applyRow(0);
    QVERIFY(model.isValid());
    QCOMPARE(modelPresets()[presetIndexOf(model.plan().options)].name, QString("Llama 3 70B"));
  }
};

QTEST_MAIN(TestStudioModel)
#include "test_studio_model.moc"
