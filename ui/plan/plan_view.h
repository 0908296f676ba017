// The Plan view: the form on the left; the layout canvas above the cost panel on the right.
#pragma once

#include <QByteArray>
#include <QWidget>
#include <functional>
#include <optional>

#include "launch/launch_command.h"

class QSplitter;

namespace lattice::ui {

class CostPanel;
class LayoutPanel;
class PlanForm;
class PlanModel;

class PlanView : public QWidget {
  Q_OBJECT

 public:
  explicit PlanView(PlanModel* model, QWidget* parent = nullptr);

  LayoutPanel* layoutPanel() const { return layout_; }
  CostPanel* costPanel() const { return cost_; }
  PlanForm* form() const { return form_; }

  // What Calibrate's probe launches with: this machine's environment and the Launch view's
  // settings (its cluster target, its database), read when the dialog opens. Unset: detected,
  // and this machine only.
  void setLaunchContext(const LaunchEnvironment& environment,
                        std::function<LaunchSettings()> settings);

  // Splitter positions, for QSettings.
  QByteArray saveState() const;
  void restoreState(const QByteArray& state);

 public slots:
  void openSuggest();
  void openCalibrate();

 private:
  PlanModel* model_;
  PlanForm* form_;
  LayoutPanel* layout_;
  CostPanel* cost_;
  QSplitter* columns_;
  QSplitter* right_;
  std::optional<LaunchEnvironment> environment_;
  std::function<LaunchSettings()> launchSettings_;
};

}  // namespace lattice::ui
