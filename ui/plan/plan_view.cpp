// PlanView: splitters around the form, the canvas and the cost panel.
#include "plan/plan_view.h"

#include <QDataStream>
#include <QHBoxLayout>
#include <QIODevice>
#include <QSplitter>

#include "plan/calibrate_dialog.h"
#include "plan/cost_panel.h"
#include "plan/layout_panel.h"
#include "plan/plan_form.h"
#include "plan/plan_model.h"
#include "plan/suggest_dialog.h"

namespace lattice::ui {

PlanView::PlanView(PlanModel* model, QWidget* parent)
    : QWidget(parent),
      model_(model),
      form_(new PlanForm(model)),
      layout_(new LayoutPanel(model)),
      cost_(new CostPanel(model)) {
  auto* box = new QHBoxLayout(this);
  box->setContentsMargins(6, 6, 6, 6);
  columns_ = new QSplitter(Qt::Horizontal, this);
  right_ = new QSplitter(Qt::Vertical, columns_);
  columns_->addWidget(form_);
  columns_->addWidget(right_);
  right_->addWidget(layout_);
  right_->addWidget(cost_);
  columns_->setStretchFactor(0, 0);
  columns_->setStretchFactor(1, 1);
  right_->setStretchFactor(0, 3);
  right_->setStretchFactor(1, 2);
  columns_->setChildrenCollapsible(false);
  right_->setChildrenCollapsible(false);
  columns_->setSizes({std::max(form_->minimumWidth(), 400), 860});
  box->addWidget(columns_);
  connect(cost_, &CostPanel::suggestRequested, this, &PlanView::openSuggest);
  connect(cost_, &CostPanel::calibrateRequested, this, &PlanView::openCalibrate);
}

QByteArray PlanView::saveState() const {
  QByteArray state;
  QDataStream out(&state, QIODevice::WriteOnly);
  out << columns_->saveState() << right_->saveState();
  return state;
}

void PlanView::restoreState(const QByteArray& state) {
  QDataStream in(state);
  QByteArray columns, right;
  in >> columns >> right;
  if (in.status() != QDataStream::Ok) return;
  columns_->restoreState(columns);
  right_->restoreState(right);
}

void PlanView::openSuggest() {
  auto* dialog = new SuggestDialog(model_, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->open();
  dialog->search();
}

void PlanView::setLaunchContext(const LaunchEnvironment& environment,
                                std::function<LaunchSettings()> settings) {
  environment_ = environment;
  launchSettings_ = std::move(settings);
}

void PlanView::openCalibrate() {
  auto* dialog = new CalibrateDialog(model_, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  if (environment_) {
    dialog->setEnvironment(*environment_);
    dialog->setDatabase(environment_->defaultDatabase);
  }
  if (launchSettings_) {
    const LaunchSettings launch = launchSettings_();
    dialog->setLaunchSettings(launch);
    if (!launch.database.trimmed().isEmpty()) dialog->setDatabase(launch.database.trimmed());
  }
  connect(dialog, &CalibrateDialog::suggestRequested, this, &PlanView::openSuggest);
  dialog->open();
}

}  // namespace lattice::ui
