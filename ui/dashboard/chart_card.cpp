// ChartCard: the card frame, the palette and the three export formats.
#include "dashboard/chart_card.h"

#include <qcustomplot.h>
#include <QEvent>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTextStream>
#include <QToolButton>
#include <QVBoxLayout>

namespace lattice::ui {

ChartCard::ChartCard(const QString& title, QWidget* parent)
    : QWidget(parent), plot_(new QCustomPlot(this)) {
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(2);
  auto* head = head_ = new QHBoxLayout;
  head->setSpacing(10);
  title_ = new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()), this);
  title_->setObjectName("chart-title");
  title_->setProperty("plainTitle", title);
  subtitle_ = new QLabel(this);
  subtitle_->setForegroundRole(QPalette::PlaceholderText);
  subtitle_->setTextFormat(Qt::PlainText);
  export_ = new QToolButton(this);
  export_->setText(tr("Export"));
  export_->setToolTip(tr("Save this chart as a picture or its data as CSV"));
  export_->setPopupMode(QToolButton::InstantPopup);
  export_->setAutoRaise(true);
  auto* menu = new QMenu(export_);
  menu->addAction(tr("PNG image…"), this, [this] { exportWithDialog("png"); });
  menu->addAction(tr("SVG image…"), this, [this] { exportWithDialog("svg"); });
  menu->addAction(tr("CSV data…"), this, [this] { exportWithDialog("csv"); });
  export_->setMenu(menu);
  head->addWidget(title_);
  head->addWidget(subtitle_, 1);
  head->addWidget(export_);
  column->addLayout(head);
  plot_->setMinimumHeight(150);
  column->addWidget(plot_, 1);
}

QString ChartCard::title() const {
  return title_->property("plainTitle").toString();
}

void ChartCard::setSubtitle(const QString& text) {
  subtitle_->setText(text);
}

void ChartCard::addHeaderWidget(QWidget* w) {
  head_->insertWidget(head_->indexOf(export_), w);
}

bool ChartCard::exportPng(const QString& path) const {
  return plot_->savePng(path);
}

bool ChartCard::exportSvg(const QString& path) const {
  QSvgGenerator svg;
  svg.setFileName(path);
  svg.setSize(plot_->size());
  svg.setViewBox(QRect(QPoint(0, 0), plot_->size()));
  svg.setTitle(title());
  QCPPainter painter;
  if (!painter.begin(&svg)) return false;
  plot_->toPainter(&painter, plot_->width(), plot_->height());
  painter.end();
  return QFile(path).size() > 0;
}

bool ChartCard::exportCsv(const QString& path) const {
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Text)) return false;
  QTextStream out(&file);
  writeCsv(out);
  out.flush();
  return file.commit();
}

void ChartCard::exportWithDialog(const QString& suffix) {
  QString base = title().toLower();
  base.replace(QRegularExpression("[^a-z0-9]+"), "-");
  const QString path =
      QFileDialog::getSaveFileName(this, tr("Export %1").arg(title()), base + "." + suffix,
                                   tr("%1 files (*.%2)").arg(suffix.toUpper(), suffix));
  if (path.isEmpty()) return;
  const bool ok = suffix == "png"   ? exportPng(path)
                  : suffix == "svg" ? exportSvg(path)
                                    : exportCsv(path);
  if (!ok) QMessageBox::warning(this, tr("Export"), tr("Could not write %1.").arg(path));
}

QColor ChartCard::runColor(int index, const QPalette& palette) {
  static const QColor light[] = {{0x1f, 0x77, 0xb4}, {0xd6, 0x27, 0x28}, {0x2c, 0xa0, 0x2c},
                                 {0xff, 0x7f, 0x0e}, {0x94, 0x67, 0xbd}, {0x8c, 0x56, 0x4b},
                                 {0xe3, 0x77, 0xc2}, {0x17, 0xbe, 0xcf}};
  QColor c = light[index % 8];
  if (palette.color(QPalette::Window).lightness() < 128) c = c.lighter(135);
  return c;
}

void ChartCard::applyPalette() {
  const QPalette& p = palette();
  const QColor text = p.color(QPalette::Text), base = p.color(QPalette::Base);
  QColor grid = p.color(QPalette::Mid);
  grid.setAlphaF(0.5);
  plot_->setBackground(base);
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis, plot_->xAxis2, plot_->yAxis2}) {
    axis->setBasePen(QPen(text));
    axis->setTickPen(QPen(text));
    axis->setSubTickPen(QPen(text));
    axis->setTickLabelColor(text);
    axis->setLabelColor(text);
    axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
  }
  QColor legendBack = base;
  legendBack.setAlphaF(0.8);
  plot_->legend->setBrush(legendBack);
  plot_->legend->setTextColor(text);
  plot_->legend->setBorderPen(Qt::NoPen);
}

void ChartCard::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {
    applyPalette();
    plot_->replot(QCustomPlot::rpQueuedReplot);
  }
}

}  // namespace lattice::ui
