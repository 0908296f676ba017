// Validation (TrainOptions::validate + layout_errors, as `lattice plan` runs them) and the
// engine's estimates for a plan.
#include "plan/plan_analysis.h"

#include <QStringList>
#include <cctype>

namespace lattice::ui {

QString fieldOfMessage(const std::string& message) {
  if (message.rfind("world size", 0) == 0) return QStringLiteral("world");
  const size_t at = message.find("--");
  if (at == std::string::npos) return {};
  size_t end = at + 2;
  while (end < message.size() &&
         (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '-'))
    end++;
  const QString flag = QString::fromStdString(message.substr(at + 2, end - at - 2));
  if (flag == QLatin1String("bf16") || flag == QLatin1String("fp16") ||
      flag == QLatin1String("fp64"))
    return QStringLiteral("precision");
  return flag;
}

QStringList PlanAnalysis::messagesFor(const QString& field) const {
  QStringList out;
  for (const FieldError& e : errors)
    if (e.field == field) out << e.message;
  return out;
}

PlanAnalysis analyzePlan(const Plan& plan, double cpuGflops, const Calibration* calibration) {
  PlanAnalysis a;
  TrainOptions o = with_default_global_batch(plan.options, plan.cluster.world());
  std::vector<std::string> messages = o.validate(/*require_data=*/false);
  const std::vector<std::string> layout = layout_errors(o, plan.cluster.world());
  messages.insert(messages.end(), layout.begin(), layout.end());
  if (o.model.vocab_size <= 0)
    messages.push_back("--vocab-size is unknown: the files of --tokenizer-type " +
                       o.tokenizer.type + " cannot be read on this machine");
  for (const std::string& m : messages)
    a.errors.push_back({fieldOfMessage(m), QString::fromStdString(m)});

  a.defaultCluster = clusterSpec(plan.cluster, precisionOf(o), cpuGflops);
  a.calibrated = calibration && calibration->device_key == a.defaultCluster.device.key;
  a.cluster = a.calibrated ? apply_calibration(a.defaultCluster, *calibration) : a.defaultCluster;
  o = planned_options(o, a.cluster);  // the estimate's attention terms
  if (o.model.validate().empty() && o.model.vocab_size > 0) a.parameters = o.model.num_parameters();
  if (!a.valid()) return a;

  Result<ParallelLayout> made = make_layout(o, plan.cluster.world());
  if (!made) return a;  // layout_errors found nothing, so this does not happen
  a.layout = *made;
  a.memory = estimate_memory(o, *a.layout);
  a.step = estimate_step(o, *a.layout, a.cluster, *a.memory);
  a.fits = fits_in_memory(*a.memory, a.cluster);
  return a;
}

}  // namespace lattice::ui
