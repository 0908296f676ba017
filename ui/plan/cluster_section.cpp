// ClusterSection: world size as nodes x devices, the device kind and its figures.
#include "plan/cluster_section.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QRegularExpressionValidator>
#include <QSpinBox>

#include "plan/text_format.h"

namespace lattice::ui {

ClusterSection::ClusterSection(PlanModel* model, QWidget* parent)
    : FormSection(tr("Cluster"), model, parent) {
  // The name under which Calibrate saves this cluster's rates (a folder name, hence the
  // validator: lattice/calibration.h, check_cluster_name).
  auto* name = new QLineEdit(this);
  name->setObjectName("cluster-name");
  name->setPlaceholderText(tr("none: calibrations are the device's"));
  name->setValidator(new QRegularExpressionValidator(
      QRegularExpression(QStringLiteral("[A-Za-z0-9_-][A-Za-z0-9._-]*")), name));
  connect(name, &QLineEdit::editingFinished, this, [this, name] {
    const QString text = name->text();
    if (text == model_->plan().cluster.name) return;
    model_->edit(tr("Set cluster name"), [&](Plan& p) { p.cluster.name = text; });
  });
  onRefresh([name](const Plan& p, const PlanAnalysis&) {
    if (name->text() != p.cluster.name) name->setText(p.cluster.name);
  });
  addRow(tr("Name"), name, {},
         tr("The cluster's name: Calibrate saves its fitted rates for this cluster and device, "
            "and plans of this name use them (`lattice plan --cluster-name`)"));
  QSpinBox* nodes = intEditor(
      1, 65536, "nodes", tr("Set nodes"), [](const Plan& p) { return p.cluster.nodes; },
      [](Plan& p, int v) { p.cluster.nodes = v; });
  QSpinBox* perNode = intEditor(
      1, 1024, "devices-per-node", tr("Set devices per node"),
      [](const Plan& p) { return p.cluster.devices_per_node; },
      [](Plan& p, int v) { p.cluster.devices_per_node = v; });
  perNode->setSuffix(tr(" per node"));
  auto* devices = new QWidget(this);
  auto* row = new QHBoxLayout(devices);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(nodes, 1);
  row->addWidget(new QLabel(QStringLiteral("×"), devices));
  row->addWidget(perNode, 1);
  addRow(tr("Devices"), devices, {"world"},
         tr("The world size is nodes x devices per node; one rank per device (for this "
            "machine's CPU, one rank per 'device', sharing the cores)"));

  auto* kind = new QComboBox(this);
  kind->setObjectName("device");
  kind->addItem(tr("This machine's CPU"), QString(kDeviceCpu));
  for (const DeviceSpec& d : known_devices("bf16"))
    kind->addItem(QString::fromStdString(d.name), QString::fromStdString(d.key));
  kind->addItem(tr("Custom device"), QString(kDeviceCustom));
  connect(kind, &QComboBox::activated, this, [this, kind](int index) {
    const QString key = kind->itemData(index).toString();
    model_->edit(tr("Set device %1").arg(kind->itemText(index)),
                 [&](Plan& p) { p.cluster.device = key; });
  });
  onRefresh([kind](const Plan& p, const PlanAnalysis&) {
    const int index = kind->findData(p.cluster.device);
    kind->setCurrentIndex(index >= 0 ? index : kind->count() - 1);
  });
  addRow(tr("Device"), kind, {"device"});

  // The custom device's figures, shown only when it is selected.
  auto custom = [this](const QString& label, const QString& suffix, double max, int decimals,
                       double ClusterSettings::*member) {
    QDoubleSpinBox* spin = doubleEditor(
        0.01, max, decimals, suffix, "custom-" + label, tr("Set custom %1").arg(label.toLower()),
        [member](const Plan& p) { return p.cluster.*member; },
        [member](Plan& p, double v) { p.cluster.*member = v; });
    addRow(label, spin, {});
    return spin;
  };
  QList<QWidget*> customRows = {
      custom(tr("Memory"), tr(" GiB"), 1e5, 1, &ClusterSettings::custom_memory_gib),
      custom(tr("Peak rate"), tr(" TFLOP/s"), 1e6, 1, &ClusterSettings::custom_tflops),
      custom(tr("In-node link"), tr(" GB/s"), 1e5, 1, &ClusterSettings::custom_intra_node_gbs),
      custom(tr("Network"), tr(" GB/s"), 1e5, 2, &ClusterSettings::custom_inter_node_gbs),
      custom(tr("Memory bandwidth"), tr(" GB/s"), 1e6, 0, &ClusterSettings::custom_memory_gbs)};

  QLabel* note = addNote();
  note->setObjectName("device-summary");
  onRefresh([nodes, perNode](const Plan& p, const PlanAnalysis&) {
    nodes->setSuffix(p.cluster.nodes == 1 ? tr(" node") : tr(" nodes"));
  });
  onRefresh([this, note, customRows](const Plan& p, const PlanAnalysis& a) {
    const bool isCustom = p.cluster.device == QLatin1String(kDeviceCustom);
    for (QWidget* w : customRows) setRowVisible(w, isCustom);
    const DeviceSpec& d = a.cluster.device;
    QString text =
        tr("%1 · %2 and %3 (%4) per device · links %5 GB/s in a node, "
           "%6 GB/s between nodes")
            .arg(plural(p.cluster.world(), "device", "devices"))
            .arg(humanBytes(d.memory_bytes), humanFlops(d.peak_flops), precisionOf(p.options))
            .arg(d.intra_node_bandwidth / 1e9, 0, 'f', 0)
            .arg(d.inter_node_bandwidth / 1e9, 0, 'f', 1);
    if (p.cluster.device == QLatin1String(kDeviceCpu))
      text += model_->cpuGflops() > 0 ? tr(" · SGEMM measured at %1 on all cores")
                                            .arg(humanFlops(model_->cpuGflops() * 1e9))
                                      : tr(" · SGEMM rate not measured yet (assumed)");
    note->setText(text);
  });
}

}  // namespace lattice::ui
