// LaunchForm: three groups of fields; every edit emits settingsChanged().
#include "launch/launch_form.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QRadioButton>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include "lattice/run_record.h"

namespace lattice::ui {

LaunchForm::LaunchForm(QWidget* parent) : QWidget(parent) {
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->addWidget(targetGroup());
  column->addWidget(dataGroup());
  column->addWidget(runGroup());
  column->addStretch(1);
  newRunName();
  updateDataRows();
}

QWidget* LaunchForm::targetGroup() {
  auto* group = new QGroupBox(tr("Target"), this);
  auto* form = new QFormLayout(group);
  target_ = new QComboBox(group);
  target_->setObjectName("target");
  target_->addItem(tr("This machine (mpirun)"), static_cast<int>(launch::Target::kLocal));
  target_->addItem(tr("Slurm batch job (sbatch)"), static_cast<int>(launch::Target::kSlurm));
  target_->addItem(tr("Hosts of a hostfile (mpirun --hostfile)"),
                   static_cast<int>(launch::Target::kHostfile));
  connect(target_, &QComboBox::currentIndexChanged, this, [this] {
    updateTargetRows();
    emit settingsChanged();
  });
  form->addRow(tr("Run on"), target_);
  form->addRow(clusterRows(group));
  targetSummary_ = new QLabel(group);
  targetSummary_->setWordWrap(true);
  targetSummary_->setForegroundRole(QPalette::PlaceholderText);
  form->addRow(targetSummary_);
  return group;
}

// The fields of the Slurm and hostfile targets; only the chosen target's are shown.
QWidget* LaunchForm::clusterRows(QWidget* parent) {
  auto* box = new QWidget(parent);
  auto* column = new QVBoxLayout(box);
  column->setContentsMargins(0, 0, 0, 0);
  auto combo = [this](const QString& name, const QStringList& items) {
    auto* c = new QComboBox(this);
    c->setObjectName(name);
    c->addItems(items);
    connect(c, &QComboBox::currentIndexChanged, this, &LaunchForm::settingsChanged);
    return c;
  };

  slurmRows_ = new QWidget(box);
  auto* slurm = new QFormLayout(slurmRows_);
  slurm->setContentsMargins(0, 0, 0, 0);
  partition_ = pathEdit("partition", tr("the cluster's default"));
  account_ = pathEdit("account", tr("the user's default"));
  timeLimit_ = pathEdit("time-limit", tr("HH:MM:SS or D-HH:MM:SS; empty: the partition's"));
  outputDir_ = pathEdit("output-dir", tr("shared storage; default ~/lattice-jobs/<run name>"));
  outputDir_->setToolTip(
      tr("The job's script, logs, run store and checkpoints, on storage every node sees"));
  launcher_ = combo("launcher", {tr("srun --mpi=pmix"), tr("mpirun inside the allocation")});
  cpusPerTask_ = new QSpinBox(slurmRows_);
  cpusPerTask_->setObjectName("cpus-per-task");
  cpusPerTask_->setRange(0, 1024);
  cpusPerTask_->setSpecialValueText(tr("Slurm's default"));
  connect(cpusPerTask_, &QSpinBox::valueChanged, this, &LaunchForm::settingsChanged);
  slurm->addRow(tr("Partition"), partition_);
  slurm->addRow(tr("Account"), account_);
  slurm->addRow(tr("Time limit"), timeLimit_);
  slurm->addRow(tr("Output"), outputDir_);
  slurm->addRow(tr("Ranks start by"), launcher_);
  slurm->addRow(tr("CPUs per rank"), cpusPerTask_);
  column->addWidget(slurmRows_);

  hostfileRows_ = new QWidget(box);
  auto* hosts = new QFormLayout(hostfileRows_);
  hosts->setContentsMargins(0, 0, 0, 0);
  hostfile_ = pathEdit("hostfile", tr("lines of \"host slots=N\""));
  network_ = combo("network", {tr("TCP (Ethernet)"), tr("InfiniBand (UCX)")});
  networkInterface_ = pathEdit("network-interface", tr("eth0, 10.0.0.0/24 or mlx5_0:1"));
  hosts->addRow(tr("Hostfile"), withBrowse(hostfile_, tr("Hostfile (*)"), false));
  hosts->addRow(tr("Network"), network_);
  hosts->addRow(tr("Interface"), networkInterface_);
  column->addWidget(hostfileRows_);
  updateTargetRows();
  return box;
}

void LaunchForm::updateTargetRows() {
  const auto target = static_cast<launch::Target>(target_->currentData().toInt());
  slurmRows_->setVisible(target == launch::Target::kSlurm);
  hostfileRows_->setVisible(target == launch::Target::kHostfile);
}

QLineEdit* LaunchForm::pathEdit(const QString& objectName, const QString& placeholder) {
  auto* edit = new QLineEdit(this);
  edit->setObjectName(objectName);
  edit->setPlaceholderText(placeholder);
  edit->setClearButtonEnabled(true);
  connect(edit, &QLineEdit::textChanged, this, &LaunchForm::settingsChanged);
  return edit;
}

QWidget* LaunchForm::withBrowse(QLineEdit* edit, const QString& filter, bool prefix) {
  auto* box = new QWidget(this);
  auto* row = new QHBoxLayout(box);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(edit, 1);
  auto* browse = new QToolButton(box);
  browse->setText(tr("…"));
  browse->setToolTip(tr("Choose a file"));
  row->addWidget(browse);
  connect(browse, &QToolButton::clicked, this, [this, edit, filter, prefix] {
    QString path = QFileDialog::getOpenFileName(this, tr("Choose a file"),
                                                QFileInfo(edit->text()).absolutePath(), filter);
    if (path.isEmpty()) return;
    if (prefix && (path.endsWith(".bin") || path.endsWith(".idx"))) path.chop(4);
    edit->setText(path);
  });
  return box;
}

QWidget* LaunchForm::dataGroup() {
  auto* group = new QGroupBox(tr("Data"), this);
  auto* column = new QVBoxLayout(group);
  source_ = new QButtonGroup(group);
  const std::pair<DataSource, QString> sources[] = {
      {DataSource::kDemo, tr("Demo corpus (the fortunes package; built on first use)")},
      {DataSource::kDataset, tr("Indexed dataset (.bin / .idx from `lattice data preprocess`)")},
      {DataSource::kMock, tr("Mock data (synthetic tokens, Megatron's --mock-data)")}};
  for (const auto& [id, text] : sources) {
    auto* radio = new QRadioButton(text, group);
    radio->setObjectName(QStringLiteral("data-%1").arg(static_cast<int>(id)));
    source_->addButton(radio, static_cast<int>(id));
    column->addWidget(radio);
  }
  source_->button(static_cast<int>(DataSource::kDemo))->setChecked(true);
  connect(source_, &QButtonGroup::idToggled, this, [this](int, bool on) {
    if (!on) return;
    updateDataRows();
    emit settingsChanged();
  });

  datasetRows_ = new QWidget(group);
  auto* form = new QFormLayout(datasetRows_);
  form->setContentsMargins(18, 0, 0, 0);
  dataPath_ = pathEdit("data-path", tr("prefix, e.g. data/corpus_text_document"));
  form->addRow(tr("Dataset"), withBrowse(dataPath_, tr("Indexed dataset (*.bin *.idx)"), true));
  tokenizer_ = new QComboBox(datasetRows_);
  tokenizer_->setObjectName("tokenizer-type");
  tokenizer_->addItems(
      {"GPTSentencePieceTokenizer", "SentencePieceTokenizer", "GPT2BPETokenizer", "NullTokenizer"});
  connect(tokenizer_, &QComboBox::currentIndexChanged, this, [this] {
    updateDataRows();
    emit settingsChanged();
  });
  form->addRow(tr("Tokenizer"), tokenizer_);
  tokenizerModel_ = pathEdit("tokenizer-model", tr("SentencePiece .model file"));
  vocabFile_ = pathEdit("vocab-file", tr("vocab.json"));
  mergeFile_ = pathEdit("merge-file", tr("merges.txt"));
  form->addRow(tr("Model file"), withBrowse(tokenizerModel_, tr("SentencePiece (*.model)"), false));
  form->addRow(tr("Vocabulary"), withBrowse(vocabFile_, tr("JSON (*.json)"), false));
  form->addRow(tr("Merges"), withBrowse(mergeFile_, tr("Text (*.txt *.bpe)"), false));
  column->addWidget(datasetRows_);
  return group;
}

QWidget* LaunchForm::runGroup() {
  auto* group = new QGroupBox(tr("Run"), this);
  auto* form = new QFormLayout(group);
  runName_ = pathEdit("run-name", tr("generated when empty"));
  auto* nameRow = new QWidget(group);
  auto* row = new QHBoxLayout(nameRow);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(runName_, 1);
  auto* fresh = new QToolButton(nameRow);
  fresh->setText(tr("New"));
  fresh->setToolTip(tr("Generate a new run name"));
  row->addWidget(fresh);
  connect(fresh, &QToolButton::clicked, this, &LaunchForm::newRunName);
  form->addRow(tr("Name"), nameRow);
  tags_ = pathEdit("tags", tr("comma-separated, e.g. baseline, tp2"));
  form->addRow(tr("Tags"), tags_);
  database_ = pathEdit("database", QString::fromStdString(default_run_db()));
  database_->setToolTip(tr("The run store this run is recorded in; empty means the default"));
  form->addRow(tr("Database"), withBrowse(database_, tr("SQLite (*.sqlite *.db)"), false));
  saveCheckpoints_ = new QCheckBox(tr("Save, in a directory of this run's own"), group);
  saveCheckpoints_->setObjectName("save-checkpoints");
  saveCheckpoints_->setToolTip(
      tr("--save <data dir>/checkpoints/<run name> (a Slurm job: <output>/checkpoints): the run "
         "saves when it ends or is stopped, and every N iterations with --save-interval N. A new "
         "run name is a new directory; a run never writes into another run's checkpoints."));
  connect(saveCheckpoints_, &QCheckBox::toggled, this, &LaunchForm::settingsChanged);
  form->addRow(tr("Checkpoints"), saveCheckpoints_);
  extraFlags_ = pathEdit("extra-flags", tr("more lattice train flags, e.g. --train-iters 50"));
  form->addRow(tr("Extra flags"), extraFlags_);
  return group;
}

void LaunchForm::updateDataRows() {
  const bool dataset = source_->checkedId() == static_cast<int>(DataSource::kDataset);
  datasetRows_->setVisible(dataset);
  const QString type = tokenizer_->currentText();
  auto* form = qobject_cast<QFormLayout*>(datasetRows_->layout());
  form->setRowVisible(tokenizerModel_->parentWidget(), type.contains("SentencePiece"));
  form->setRowVisible(vocabFile_->parentWidget(), type == QLatin1String("GPT2BPETokenizer"));
  form->setRowVisible(mergeFile_->parentWidget(), type == QLatin1String("GPT2BPETokenizer"));
}

void LaunchForm::newRunName() {
  runName_->setText(QString::fromStdString(default_run_name()));
}

void LaunchForm::setTargetSummary(const QString& text) {
  targetSummary_->setText(text);
}

LaunchSettings LaunchForm::settings() const {
  LaunchSettings s;
  s.data = static_cast<DataSource>(source_->checkedId());
  s.dataPath = dataPath_->text();
  s.tokenizerType = tokenizer_->currentText();
  s.tokenizerModel = tokenizerModel_->text();
  s.vocabFile = vocabFile_->text();
  s.mergeFile = mergeFile_->text();
  s.runName = runName_->text();
  for (const QString& t : tags_->text().split(',', Qt::SkipEmptyParts))
    if (!t.trimmed().isEmpty()) s.tags << t.trimmed();
  s.database = database_->text();
  s.extraFlags = extraFlags_->text();
  s.saveCheckpoints = saveCheckpoints_->isChecked();
  s.checkpointsFolder = checkpointsFolder_;
  s.target = static_cast<launch::Target>(target_->currentData().toInt());
  s.hostfile = hostfile_->text();
  s.network = network_->currentIndex() == 1 ? launch::Network::kInfiniband : launch::Network::kTcp;
  s.networkInterface = networkInterface_->text();
  s.partition = partition_->text();
  s.account = account_->text();
  s.timeLimit = timeLimit_->text();
  s.outputDir = outputDir_->text();
  s.launcher = launcher_->currentIndex() == 1 ? launch::Launcher::kMpirun : launch::Launcher::kSrun;
  s.cpusPerTask = cpusPerTask_->value();
  return s;
}

void LaunchForm::setSettings(const LaunchSettings& s) {
  source_->button(static_cast<int>(s.data))->setChecked(true);
  dataPath_->setText(s.dataPath);
  tokenizer_->setCurrentText(s.tokenizerType);
  tokenizerModel_->setText(s.tokenizerModel);
  vocabFile_->setText(s.vocabFile);
  mergeFile_->setText(s.mergeFile);
  if (!s.runName.isEmpty()) runName_->setText(s.runName);
  tags_->setText(s.tags.join(", "));
  database_->setText(s.database);
  extraFlags_->setText(s.extraFlags);
  saveCheckpoints_->setChecked(s.saveCheckpoints);
  checkpointsFolder_ = s.checkpointsFolder;
  target_->setCurrentIndex(std::max(target_->findData(static_cast<int>(s.target)), 0));
  hostfile_->setText(s.hostfile);
  network_->setCurrentIndex(s.network == launch::Network::kInfiniband ? 1 : 0);
  networkInterface_->setText(s.networkInterface);
  partition_->setText(s.partition);
  account_->setText(s.account);
  timeLimit_->setText(s.timeLimit);
  outputDir_->setText(s.outputDir);
  launcher_->setCurrentIndex(s.launcher == launch::Launcher::kMpirun ? 1 : 0);
  cpusPerTask_->setValue(s.cpusPerTask);
  updateTargetRows();
  updateDataRows();
}

}  // namespace lattice::ui
