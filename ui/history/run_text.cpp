// Text of a run's fields for the History view.
#include "history/run_text.h"

#include <QDateTime>
#include <QLocale>
#include <cmath>

namespace lattice::ui {

QString runStatusText(storage::RunStatus status) {
  return QString::fromLatin1(storage::run_status_name(status));
}

QString runLayoutText(const storage::Layout& l) {
  return QStringLiteral("%1×%2×%3").arg(l.tp).arg(l.pp).arg(l.dp);
}

QString runStartText(const storage::RunInfo& run) {
  if (!run.started_at) return QStringLiteral("-");
  return QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(*run.started_at * 1000))
      .toString(QStringLiteral("yyyy-MM-dd HH:mm"));
}

std::optional<double> runDurationSeconds(const storage::RunInfo& run, double now) {
  if (!run.started_at) return std::nullopt;
  double end = now;
  if (run.ended_at) {
    end = *run.ended_at;
  } else if (run.status == storage::RunStatus::kCrashed && run.heartbeat_at) {
    end = *run.heartbeat_at;  // a crashed run stopped at its last sign of life
  }
  return std::max(0.0, end - *run.started_at);
}

QString durationText(double seconds) {
  const long long s = std::llround(seconds);
  if (s < 60) return QStringLiteral("%1 s").arg(s);
  if (s < 3600) return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
  return QStringLiteral("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60, 2, 10, QChar('0'));
}

std::optional<double> latestMetric(const storage::RunInfo& run, const char* key) {
  auto it = run.latest.find(key);
  if (it == run.latest.end()) return std::nullopt;
  return it->second;
}

QString lossText(std::optional<double> loss) {
  if (!loss) return QStringLiteral("-");
  if (std::isnan(*loss)) return QStringLiteral("nan");
  return QString::number(*loss, 'f', 4);
}

QString tokensText(std::optional<double> tokens) {
  if (!tokens) return QStringLiteral("-");
  if (!std::isfinite(*tokens)) return QStringLiteral("nan");
  return QLocale().toString(*tokens, 'f', *tokens < 100 ? 1 : 0);
}

}  // namespace lattice::ui
