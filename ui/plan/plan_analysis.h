// Everything the Plan view shows about a plan, derived in one place: validation errors (each
// mapped to the flag it concerns), the layout, the memory and step-time estimates.
// Pure function of the plan; cheap enough to run on every edit (no file or device access).
#pragma once

#include <QString>
#include <optional>
#include <string>
#include <vector>

#include "lattice/calibration.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "plan/plan.h"

namespace lattice::ui {

// The field a validation message concerns: the first flag it names ("tensor-model-parallel-size"
// for "--tensor-model-parallel-size 3 does not divide --num-attention-heads 16"), "world" for
// the world size (the cluster's nodes x devices), "precision" for --bf16/--fp16/--fp64, or ""
// when it names none.
QString fieldOfMessage(const std::string& message);

struct FieldError {
  QString field;  // fieldOfMessage()
  QString message;
};

struct PlanAnalysis {
  std::vector<FieldError> errors;  // every broken rule, in the engine's order
  std::optional<ParallelLayout> layout;
  std::optional<MemoryEstimate> memory;
  std::optional<StepEstimate> step;
  ClusterSpec cluster;         // what the estimates use: calibrated where a calibration applies
  ClusterSpec defaultCluster;  // the same with the planner's default rates
  bool calibrated = false;     // a calibration of this device replaced the defaults
  bool fits = false;           // the most loaded rank fits the usable device memory
  int64_t parameters = 0;

  bool valid() const { return errors.empty(); }
  QStringList messagesFor(const QString& field) const;
};

// `cpuGflops`: this machine's measured SGEMM rate, 0 when not measured yet.
// `calibration`: fitted rates (lattice/calibration.h), applied when its device key is the
// plan's device's; null or another device's: the defaults.
PlanAnalysis analyzePlan(const Plan& plan, double cpuGflops,
                         const Calibration* calibration = nullptr);

}  // namespace lattice::ui
