// ParallelPlot and ParallelPanel: painting, hit-testing and choosing the axes.
#include "history/parallel_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QSet>
#include <QVBoxLayout>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "plan/text_format.h"

namespace lattice::ui {

namespace {

constexpr int kColourBins = 32;  // lines are drawn per colour bin: one pen per bin, not per run
constexpr double kHitPixels = 5;
constexpr std::size_t kManyLines = 500;
constexpr std::size_t kMaxTicks =
    12;  // a numeric axis names each value up to this many  // Note "many lines" (paintLines)

// Blue (0) through grey to red (1): low loss reads cool, high loss hot.
QColor ramp(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const QColor low(0x2c, 0x6f, 0xbb), mid(0x9a, 0x9a, 0x9a), high(0xd6, 0x27, 0x28);
  const QColor& a = t < 0.5 ? low : mid;
  const QColor& b = t < 0.5 ? mid : high;
  const double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  return QColor::fromRgbF(a.redF() + u * (b.redF() - a.redF()),
                          a.greenF() + u * (b.greenF() - a.greenF()),
                          a.blueF() + u * (b.blueF() - a.blueF()));
}

QString numberText(double v) {
  if (v != 0 && (std::fabs(v) < 1e-3 || std::fabs(v) >= 1e6)) return QString::number(v, 'e', 2);
  return QString::number(v, 'g', 5);
}

// A metric as JSON number text (exact), nullopt when missing or NaN.
std::optional<std::string> metricText(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return std::nullopt;
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, *v);
  return std::string(buf, result.ptr);
}

}  // namespace

// ---- ParallelPlot ---------------------------------------------------------------------------

ParallelPlot::ParallelPlot(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("historyParallelPlot"));
  setMouseTracking(true);
  setMinimumHeight(160);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

void ParallelPlot::setModel(storage::ParallelCoordinates model, QList<qint64> runs,
                            QStringList names, int colourAxis) {
  model_ = std::move(model);
  runs_ = std::move(runs);
  names_ = std::move(names);
  colourAxis_ = colourAxis;
  highlighted_ = -1;
  ticks_.assign(model_.axes.size(), {});
  for (std::size_t a = 0; a < model_.axes.size(); ++a) {
    if (model_.axes[a].categorical) continue;
    std::set<double> distinct;
    for (const std::vector<double>& line : model_.lines) {
      if (!std::isnan(line[a])) distinct.insert(line[a]);
      if (distinct.size() > kMaxTicks) break;
    }
    if (distinct.size() > 2 && distinct.size() <= kMaxTicks)
      ticks_[a].assign(distinct.begin(), distinct.end());
  }
  lines_ = {};
  update();
}

QRectF ParallelPlot::plotArea() const {
  return QRectF(60, 40, std::max(10, width() - 120), std::max(10, height() - 68));
}

double ParallelPlot::axisX(int axis) const {
  const QRectF area = plotArea();
  const int n = static_cast<int>(model_.axes.size());
  return n <= 1 ? area.center().x() : area.left() + area.width() * axis / (n - 1);
}

QPointF ParallelPlot::pointOf(int line, int axis) const {
  const QRectF area = plotArea();
  const double pos = model_.lines[line][axis];
  return {axisX(axis), area.bottom() - pos * area.height()};
}

QColor ParallelPlot::lineColour(int line) const {
  if (colourAxis_ < 0) return palette().color(QPalette::Highlight);
  const double pos = model_.lines[line][colourAxis_];
  if (std::isnan(pos)) return palette().color(QPalette::PlaceholderText);
  return ramp(std::round(pos * (kColourBins - 1)) / (kColourBins - 1));
}

void ParallelPlot::paintLines() {
  const qreal dpr = devicePixelRatioF();
  lines_ = QImage(size() * dpr, QImage::Format_ARGB32_Premultiplied);
  lines_.setDevicePixelRatio(dpr);
  lines_.fill(Qt::transparent);
  // One list of segments per colour: thousands of runs become a few dozen draw calls.
  QVector<QVector<QLineF>> bins(kColourBins + 1);
  const int axes = static_cast<int>(model_.axes.size());
  for (int l = 0; l < static_cast<int>(model_.lines.size()); ++l) {
    int bin = kColourBins;  // missing colour value
    if (colourAxis_ >= 0 && !std::isnan(model_.lines[l][colourAxis_]))
      bin = static_cast<int>(std::round(model_.lines[l][colourAxis_] * (kColourBins - 1)));
    if (colourAxis_ < 0) bin = 0;
    for (int a = 0; a + 1 < axes; ++a) {
      if (std::isnan(model_.lines[l][a]) || std::isnan(model_.lines[l][a + 1])) continue;
      bins[bin] << QLineF(pointOf(l, a), pointOf(l, a + 1));
    }
  }
  QPainter p(&lines_);
  // Note "many lines": past kManyLines runs the lines are 1-pixel, aliased and opaque, which
  // the raster engine draws 20x faster than translucent ones (0.19 s against 3.5 s for
  // 100,000 segments on a 2-core machine); a wider pen is stroked segment by segment, seconds
  // more. Opaque lines hide those under them, so the bins are drawn from the highest value
  // down: the lowest (the best loss) lie on top, runs without the value at the bottom.
  const bool many = model_.lines.size() > kManyLines;
  p.setRenderHint(QPainter::Antialiasing, !many);
  for (int i = 0; i <= kColourBins; ++i) {
    const int b = many ? (i == 0 ? kColourBins : kColourBins - i) : i;
    if (bins[b].isEmpty()) continue;
    QColor c = b == kColourBins  ? palette().color(QPalette::PlaceholderText)
               : colourAxis_ < 0 ? palette().color(QPalette::Highlight)
                                 : ramp(static_cast<double>(b) / (kColourBins - 1));
    if (!many) c.setAlphaF(0.85);
    p.setPen(QPen(c, many ? 1.0 : 1.4));
    p.drawLines(bins[b]);
  }
}

void ParallelPlot::paintAxes(QPainter& p) const {
  const QRectF area = plotArea();
  const QColor text = palette().color(QPalette::Text);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  const QFontMetricsF fm(small);
  for (int a = 0; a < static_cast<int>(model_.axes.size()); ++a) {
    const storage::ParallelAxis& axis = model_.axes[a];
    const double x = axisX(a);
    p.setPen(QPen(text, 1));
    p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
    QFont bold = font();
    bold.setBold(true);
    p.setFont(bold);
    const QString name = QString::fromStdString(axis.name);
    const double w = QFontMetricsF(bold).horizontalAdvance(name);
    p.drawText(QPointF(std::clamp(x - w / 2, 2.0, width() - w - 2), area.top() - 22), name);
    p.setFont(small);
    auto label = [&](double pos, const QString& s) {
      const double y = area.bottom() - pos * area.height();
      p.drawLine(QPointF(x - 3, y), QPointF(x + 3, y));
      p.drawText(QPointF(x + 5, y + fm.ascent() / 2 - 1), fm.elidedText(s, Qt::ElideRight, 110));
    };
    if (axis.categorical) {
      const int n = static_cast<int>(axis.categories.size());
      const int every = std::max(1, n / 12);  // at most a dozen names per axis
      for (int i = 0; i < n; i += every) {
        label(n > 1 ? static_cast<double>(i) / (n - 1) : 0.5,
              QString::fromStdString(storage::setting_text(axis.categories[i])));
      }
    } else if (axis.low == axis.high) {
      label(0.5, numberText(axis.low));
    } else if (!ticks_[a].empty()) {
      // Each value back from its position: the inverse of parallel_coordinates' scaling.
      const double low = axis.log_scale ? std::log10(axis.low) : axis.low;
      const double high = axis.log_scale ? std::log10(axis.high) : axis.high;
      for (double pos : ticks_[a]) {
        const double v = low + pos * (high - low);
        label(pos, numberText(axis.log_scale ? std::pow(10.0, v) : v));
      }
      if (axis.log_scale) {
        p.drawText(QPointF(x - fm.horizontalAdvance("log") / 2, area.bottom() + fm.height() + 4),
                   QStringLiteral("log"));
      }
    } else {
      label(0, numberText(axis.low));
      label(1, numberText(axis.high));
      if (axis.log_scale) {
        p.drawText(QPointF(x - fm.horizontalAdvance("log") / 2, area.bottom() + fm.height() + 4),
                   QStringLiteral("log"));
      }
    }
  }
}

void ParallelPlot::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  if (model_.axes.empty() || model_.lines.empty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("No runs to draw"));
    return;
  }
  if (lines_.size() != size() * devicePixelRatioF()) paintLines();
  p.drawImage(QPointF(0, 0), lines_);
  if (highlighted_ >= 0 && highlighted_ < static_cast<int>(model_.lines.size())) {
    p.setRenderHint(QPainter::Antialiasing);
    p.setPen(QPen(palette().color(QPalette::Text), 2.6));
    for (int a = 0; a + 1 < static_cast<int>(model_.axes.size()); ++a) {
      if (std::isnan(model_.lines[highlighted_][a]) ||
          std::isnan(model_.lines[highlighted_][a + 1]))
        continue;
      p.drawLine(pointOf(highlighted_, a), pointOf(highlighted_, a + 1));
    }
  }
  paintAxes(p);
}

void ParallelPlot::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  lines_ = {};
}

int ParallelPlot::lineAt(const QPointF& point) const {
  const int axes = static_cast<int>(model_.axes.size());
  if (axes == 0) return -1;
  int a = 0;
  while (a + 1 < axes && axisX(a + 1) < point.x()) ++a;
  const int b = std::min(a + 1, axes - 1);
  const double x0 = axisX(a), x1 = axisX(b);
  if (point.x() < x0 - kHitPixels || point.x() > x1 + kHitPixels) return -1;
  const double t = x1 > x0 ? std::clamp((point.x() - x0) / (x1 - x0), 0.0, 1.0) : 0;
  int best = -1;
  double bestDistance = kHitPixels;
  for (int l = 0; l < static_cast<int>(model_.lines.size()); ++l) {
    if (std::isnan(model_.lines[l][a]) || std::isnan(model_.lines[l][b])) continue;
    const double y = pointOf(l, a).y() + t * (pointOf(l, b).y() - pointOf(l, a).y());
    const double d = std::fabs(y - point.y());
    if (d <= bestDistance) best = l, bestDistance = d;
  }
  return best;
}

void ParallelPlot::setHighlighted(int line) {
  if (line == highlighted_) return;
  highlighted_ = line;
  update();
}

void ParallelPlot::mouseMoveEvent(QMouseEvent* event) {
  const int line = lineAt(event->position());
  setToolTip(line >= 0 ? names_.value(line) : QString());
  emit hovered(line);
}

void ParallelPlot::mousePressEvent(QMouseEvent* event) {
  const int line = lineAt(event->position());
  if (line >= 0) emit clicked(runs_.value(line));
}

void ParallelPlot::leaveEvent(QEvent*) {
  emit hovered(-1);
}

// ---- ParallelPanel --------------------------------------------------------------------------

ParallelPanel::ParallelPanel(QWidget* parent) : QWidget(parent) {
  colour_ = new QComboBox(this);
  colour_->setObjectName(QStringLiteral("historyParallelColour"));
  colour_->setToolTip(tr("Colour the lines by this axis: blue low, red high"));
  colour_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  hover_ = new QLabel(this);
  hover_->setObjectName(QStringLiteral("historyParallelHover"));
  hover_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  plot_ = new ParallelPlot(this);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Colour by"), this));
  controls->addWidget(colour_);
  controls->addWidget(hover_, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 4, 0, 0);
  layout->addLayout(controls);
  layout->addWidget(plot_, 1);
  connect(colour_, &QComboBox::currentIndexChanged, this, [this] { rebuild(); });
  connect(plot_, &ParallelPlot::hovered, this, [this](int line) {
    plot_->setHighlighted(line);
    hover_->setText(hoverText());
  });
  connect(plot_, &ParallelPlot::clicked, this, &ParallelPanel::runClicked);
}

void ParallelPanel::setRuns(std::vector<SweepRun> runs) {
  const quint64 signature = sweepSignature(runs);
  if (signature == signature_ && !runs_.empty()) return;
  signature_ = signature;
  runs_ = std::move(runs);
  rebuild();
}

void ParallelPanel::setColourBy(const QString& axisName) {
  colour_->setCurrentIndex(std::max(colour_->findText(axisName), 0));
}

QString ParallelPanel::colourBy() const {
  return colour_->currentText();
}

QString ParallelPanel::hoverText() const {
  const int line = plot_->highlighted();
  if (line < 0 || line >= static_cast<int>(runs_.size())) return {};
  const SweepRun& r = runs_[line];
  return tr("run %1 · %2").arg(r.id).arg(r.name);
}

void ParallelPanel::rebuild() {
  // Settings: those that differ, the fewest distinct values first (a swept lr before a
  // per-run output directory), at most kMaxSettingAxes, then in name order.
  QStringList differing = differingSettings(runs_, {QStringLiteral("run-name")});
  std::vector<std::pair<qsizetype, QString>> ranked;
  for (const QString& s : differing) {
    QSet<QString> distinct;
    const std::string key = s.toStdString();
    for (const SweepRun& r : runs_) {
      const std::optional<std::string> v = settingOf(r, key);
      distinct.insert(v ? QString::fromStdString(*v) : QString());
      if (distinct.size() > 64) break;
    }
    ranked.push_back({distinct.size(), s});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (ranked.size() > kMaxSettingAxes) ranked.resize(kMaxSettingAxes);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });

  std::vector<storage::AxisColumn> columns;
  for (const auto& [count, s] : ranked) {
    storage::AxisColumn c{s.toStdString(), {}};
    c.values.reserve(runs_.size());
    for (const SweepRun& r : runs_) c.values.push_back(settingOf(r, c.name));
    columns.push_back(std::move(c));
  }
  const int settingAxes = static_cast<int>(columns.size());
  const std::pair<const char*, std::optional<double> SweepRun::*> metrics[] = {
      {"final loss", &SweepRun::loss},
      {"final val loss", &SweepRun::validation},
      {"tokens/s", &SweepRun::tokens}};
  for (const auto& [name, member] : metrics) {
    storage::AxisColumn c{name, {}};
    bool any = false;
    for (const SweepRun& r : runs_) {
      c.values.push_back(metricText(r.*member));
      any = any || c.values.back().has_value();
    }
    if (any) columns.push_back(std::move(c));
  }
  // The colour choices are the metric axes; the first (final loss) by default.
  QStringList colourChoices;
  for (std::size_t a = settingAxes; a < columns.size(); ++a)
    colourChoices << QString::fromStdString(columns[a].name);
  QStringList shown;
  for (int i = 0; i < colour_->count(); ++i) shown << colour_->itemText(i);
  if (shown != colourChoices) {
    const QString chosen = colour_->currentText();
    const QSignalBlocker block(colour_);
    colour_->clear();
    colour_->addItems(colourChoices);
    colour_->setCurrentIndex(std::max(colour_->findText(chosen), 0));
  }
  int colourAxis = -1;
  for (std::size_t a = 0; a < columns.size(); ++a)
    if (QString::fromStdString(columns[a].name) == colour_->currentText())
      colourAxis = static_cast<int>(a);
  QList<qint64> ids;
  QStringList names;
  for (const SweepRun& r : runs_) ids << r.id, names << tr("run %1 · %2").arg(r.id).arg(r.name);
  plot_->setModel(storage::parallel_coordinates(columns), ids, names, colourAxis);
  hover_->setText(tr("%1 · hover a line to name its run, click to select it")
                      .arg(plural(static_cast<long long>(runs_.size()), "run", "runs")));
}

}  // namespace lattice::ui
