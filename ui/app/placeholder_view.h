// A view that part 2 and later issues fill (Dashboard, History, Playground): its name, what
// it will show, and a line of context (the run the Dashboard would open on).
#pragma once

#include <QWidget>

class QLabel;

namespace lattice::ui {

class PlaceholderView : public QWidget {
  Q_OBJECT

 public:
  PlaceholderView(const QString& title, const QString& comingText, QWidget* parent = nullptr);
  void setContext(const QString& text);

 private:
  QLabel* context_;
};

}  // namespace lattice::ui
