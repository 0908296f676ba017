// What the Studio keeps between sessions in QSettings ("Lattice"/"lattice-studio"): the last
// plan (its flags as `lattice train --config` JSON, and the cluster), the launch settings, the
// theme, window geometry and state, and this machine's measured SGEMM rate. All keys live here.
#pragma once

#include <QSettings>
#include <optional>

#include "app/theme.h"
#include "launch/launch_command.h"
#include "plan/plan.h"

namespace lattice::ui {

void savePlan(QSettings& settings, const Plan& plan);
// Empty when there is none or it no longer parses (a flag renamed since).
std::optional<Plan> loadPlan(QSettings& settings);

void saveLaunchSettings(QSettings& settings, const LaunchSettings& launch);
LaunchSettings loadLaunchSettings(QSettings& settings);  // without a run name

void saveTheme(QSettings& settings, Theme theme);
Theme loadTheme(QSettings& settings);

// The SGEMM rate is per machine: keyed by the CPU count so a copied profile re-measures.
void saveCpuGflops(QSettings& settings, double gflops);
double loadCpuGflops(QSettings& settings);  // 0 when not measured on this machine

}  // namespace lattice::ui
