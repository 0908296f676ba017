// QSettings keys and conversions.
#include "app/studio_settings.h"

#include <QThread>

#include "plan/train_flags.h"

namespace lattice::ui {

namespace {

QString cpuKey() {
  return QStringLiteral("machine/sgemm_gflops_%1").arg(QThread::idealThreadCount());
}

}  // namespace

void savePlan(QSettings& s, const Plan& plan) {
  s.beginGroup("plan");
  s.setValue("options", QString::fromStdString(train_options_json(plan.options)));
  const ClusterSettings& c = plan.cluster;
  s.setValue("cluster_name", c.name);
  s.setValue("nodes", c.nodes);
  s.setValue("devices_per_node", c.devices_per_node);
  s.setValue("device", c.device);
  s.setValue("custom_memory_gib", c.custom_memory_gib);
  s.setValue("custom_tflops", c.custom_tflops);
  s.setValue("custom_intra_node_gbs", c.custom_intra_node_gbs);
  s.setValue("custom_inter_node_gbs", c.custom_inter_node_gbs);
  s.setValue("custom_memory_gbs", c.custom_memory_gbs);
  s.endGroup();
}

std::optional<Plan> loadPlan(QSettings& s) {
  s.beginGroup("plan");
  const QString json = s.value("options").toString();
  Plan plan;
  ClusterSettings& c = plan.cluster;
  const ClusterSettings d;
  c.name = s.value("cluster_name", d.name).toString();
  c.nodes = s.value("nodes", d.nodes).toInt();
  c.devices_per_node = s.value("devices_per_node", d.devices_per_node).toInt();
  c.device = s.value("device", d.device).toString();
  c.custom_memory_gib = s.value("custom_memory_gib", d.custom_memory_gib).toDouble();
  c.custom_tflops = s.value("custom_tflops", d.custom_tflops).toDouble();
  c.custom_intra_node_gbs = s.value("custom_intra_node_gbs", d.custom_intra_node_gbs).toDouble();
  c.custom_inter_node_gbs = s.value("custom_inter_node_gbs", d.custom_inter_node_gbs).toDouble();
  c.custom_memory_gbs = s.value("custom_memory_gbs", d.custom_memory_gbs).toDouble();
  s.endGroup();
  if (json.isEmpty()) return std::nullopt;
  Result<TrainOptions> options = optionsFromJson(json.toStdString());
  if (!options) return std::nullopt;
  plan.options = *options;
  c.nodes = std::max(c.nodes, 1);
  c.devices_per_node = std::max(c.devices_per_node, 1);
  return plan;
}

void saveLaunchSettings(QSettings& s, const LaunchSettings& l) {
  s.beginGroup("launch");
  s.setValue("data", static_cast<int>(l.data));
  s.setValue("data_path", l.dataPath);
  s.setValue("tokenizer_type", l.tokenizerType);
  s.setValue("tokenizer_model", l.tokenizerModel);
  s.setValue("vocab_file", l.vocabFile);
  s.setValue("merge_file", l.mergeFile);
  s.setValue("tags", l.tags);
  s.setValue("database", l.database);
  s.setValue("extra_flags", l.extraFlags);
  s.setValue("save_checkpoints", l.saveCheckpoints);
  s.setValue("target", launch::target_name(l.target));
  s.setValue("hostfile", l.hostfile);
  s.setValue("network", launch::network_name(l.network));
  s.setValue("network_interface", l.networkInterface);
  s.setValue("partition", l.partition);
  s.setValue("account", l.account);
  s.setValue("time_limit", l.timeLimit);
  s.setValue("output_dir", l.outputDir);
  s.setValue("launcher", launch::launcher_name(l.launcher));
  s.setValue("cpus_per_task", l.cpusPerTask);
  s.endGroup();
}

LaunchSettings loadLaunchSettings(QSettings& s) {
  LaunchSettings l;
  s.beginGroup("launch");
  const int data = s.value("data", static_cast<int>(l.data)).toInt();
  if (data >= 0 && data <= static_cast<int>(DataSource::kMock))
    l.data = static_cast<DataSource>(data);
  l.dataPath = s.value("data_path").toString();
  l.tokenizerType = s.value("tokenizer_type", l.tokenizerType).toString();
  l.tokenizerModel = s.value("tokenizer_model").toString();
  l.vocabFile = s.value("vocab_file").toString();
  l.mergeFile = s.value("merge_file").toString();
  l.tags = s.value("tags").toStringList();
  l.database = s.value("database").toString();
  l.extraFlags = s.value("extra_flags").toString();
  l.saveCheckpoints = s.value("save_checkpoints", false).toBool();
  l.target = launch::parse_target(s.value("target").toString().toStdString()).value_or(l.target);
  l.hostfile = s.value("hostfile").toString();
  l.network =
      launch::parse_network(s.value("network").toString().toStdString()).value_or(l.network);
  l.networkInterface = s.value("network_interface").toString();
  l.partition = s.value("partition").toString();
  l.account = s.value("account").toString();
  l.timeLimit = s.value("time_limit").toString();
  l.outputDir = s.value("output_dir").toString();
  l.launcher =
      launch::parse_launcher(s.value("launcher").toString().toStdString()).value_or(l.launcher);
  l.cpusPerTask = std::max(s.value("cpus_per_task", 0).toInt(), 0);
  s.endGroup();
  return l;
}

void saveTheme(QSettings& s, Theme theme) {
  s.setValue("view/theme", themeName(theme));
}

Theme loadTheme(QSettings& s) {
  return themeFromName(s.value("view/theme").toString());
}

void saveCpuGflops(QSettings& s, double gflops) {
  s.setValue(cpuKey(), gflops);
}

double loadCpuGflops(QSettings& s) {
  return s.value(cpuKey(), 0.0).toDouble();
}

}  // namespace lattice::ui
