// PlaceholderView: centred title and sentences.
#include "app/placeholder_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

namespace lattice::ui {

PlaceholderView::PlaceholderView(const QString& title, const QString& comingText, QWidget* parent)
    : QWidget(parent) {
  // A centred column of at most kWidth pixels: word-wrapped labels need a width to wrap to.
  constexpr int kWidth = 640;
  auto* column = new QWidget(this);
  column->setMaximumWidth(kWidth);
  auto* text = new QVBoxLayout(column);
  auto* heading = new QLabel(QStringLiteral("<h2>%1</h2>").arg(title.toHtmlEscaped()), column);
  heading->setAlignment(Qt::AlignCenter);
  auto* coming = new QLabel(comingText, column);
  coming->setWordWrap(true);
  coming->setAlignment(Qt::AlignCenter);
  context_ = new QLabel(column);
  context_->setWordWrap(true);
  context_->setAlignment(Qt::AlignCenter);
  context_->setForegroundRole(QPalette::PlaceholderText);
  context_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  text->addWidget(heading);
  text->addWidget(coming);
  text->addWidget(context_);
  auto* rows = new QVBoxLayout;
  rows->addStretch(1);
  rows->addWidget(column);
  rows->addStretch(2);
  auto* centre = new QHBoxLayout(this);
  centre->addStretch(1);
  centre->addLayout(rows, 4);
  centre->addStretch(1);
}

void PlaceholderView::setContext(const QString& text) {
  context_->setText(text);
}

}  // namespace lattice::ui
