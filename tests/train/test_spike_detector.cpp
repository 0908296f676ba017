// SpikeDetector (lattice/instability.h): the z-score against the window's mean and population
// standard deviation, the warm-up of half a window, spikes kept out of the window, non-finite
// values, and the run store's keys read back.
#include <QtTest/QtTest>

#include <cmath>

#include "lattice/instability.h"

using namespace lattice;

class SpikeDetectorTest : public QObject {
  Q_OBJECT
 private slots:
  void the_z_score_is_against_the_windows_mean_and_std() {
    SpikeDetector d(4, 3.0);
    // Window 1, 3, 1, 3: mean 2, population std 1.
    QVERIFY(d.check(1, 1, 10).empty());
    QVERIFY(d.check(2, 3, 11).empty());
    QVERIFY(d.check(3, 1, 10.5).empty());
    QVERIFY(d.check(4, 3, 9.5).empty());
    QCOMPARE(d.window_size(), 4);
    // 5 = mean + 3 std: not over the threshold; it enters the window (1 drops out).
    QVERIFY(d.check(5, 5, 10).empty());
    // Window 3, 1, 3, 5: mean 3, std sqrt(2); 3 + 3.1 * sqrt(2) = 7.384.
    const std::vector<InstabilityEvent> e = d.check(6, 3 + 3.1 * std::sqrt(2.0), 10);
    QCOMPARE(e.size(), size_t{1});
    QCOMPARE(e[0].kind, InstabilityEvent::kLossSpike);
    QCOMPARE(e[0].iteration, int64_t{6});
    QCOMPARE(e[0].mean, 3.0);
    QVERIFY(std::abs(e[0].std - std::sqrt(2.0)) < 1e-12);
    QVERIFY(std::abs(e[0].z - 3.1) < 1e-12);
    QCOMPARE(e[0].window, 4);
    QCOMPARE(QString::fromStdString(describe(e[0])),
             QString("loss spike at iteration 6: 7.384 against 3 ± 1.4 over the last 4 (z 3.1)"));
  }

  void a_fall_is_not_a_spike() {
    SpikeDetector d(4, 3.0);
    for (int i = 1; i <= 4; i++) QVERIFY(d.check(i, 5 + i % 2, 1 + 0.1 * (i % 2)).empty());
    QVERIFY(d.check(5, -100, 0.0).empty());
  }

  void nothing_is_judged_before_half_a_window() {
    SpikeDetector d(6, 3.0);
    QVERIFY(d.check(1, 1, 1).empty());
    QVERIFY(d.check(2, 2, 2).empty());
    QVERIFY(d.check(3, 1000, 1000).empty());  // 2 values: warming up, and it enters
    QCOMPARE(d.window_size(), 3);
    // Now 3 values (1, 2, 1000): judged.
    SpikeDetector e(6, 3.0);
    e.check(1, 1, 1);
    e.check(2, 2, 2);
    e.check(3, 1, 1);
    QCOMPARE(e.check(4, 1000, 1).size(), size_t{1});
  }

  void a_spike_does_not_enter_the_window() {
    SpikeDetector d(4, 3.0);
    for (int i = 1; i <= 4; i++) d.check(i, 2 + (i % 2 ? 1 : -1), 1 + (i % 2 ? 0.1 : -0.1));
    std::vector<InstabilityEvent> e = d.check(5, 1.0, 50.0);  // grad-norm spike only
    QCOMPARE(e.size(), size_t{1});
    QCOMPARE(e[0].kind, InstabilityEvent::kGradNormSpike);
    QCOMPARE(d.window_size(), 4);
    // The same spike again is judged by the same band (it did not widen it).
    e = d.check(6, 1.0, 50.0);
    QCOMPARE(e.size(), size_t{1});
    QCOMPARE(e[0].mean, 1.0);
    QVERIFY(std::abs(e[0].std - 0.1) < 1e-12);
    // Both at once: two events, loss first.
    e = d.check(7, 100.0, 50.0);
    QCOMPARE(e.size(), size_t{2});
    QCOMPARE(e[0].kind, InstabilityEvent::kLossSpike);
    QCOMPARE(e[1].kind, InstabilityEvent::kGradNormSpike);
  }

  void non_finite_values_are_caught_from_the_first_iteration() {
    SpikeDetector d(50, 6.0);
    std::vector<InstabilityEvent> e = d.check(1, 5.0, NAN);
    QCOMPARE(e.size(), size_t{1});
    QCOMPARE(e[0].kind, InstabilityEvent::kNonFinite);
    QVERIFY(std::isnan(e[0].value));
    e = d.check(2, INFINITY, 1.0);
    QCOMPARE(e.size(), size_t{1});
    QVERIFY(std::isinf(e[0].value));
    QCOMPARE(d.window_size(), 0);
  }

  void the_store_keys_read_back() {
    InstabilityEvent spike{InstabilityEvent::kLossSpike, 37, 9.8, 3.1, 0.2, 33.5, 50,
                           SpikeAction::kStop};
    InstabilityEvent nan{InstabilityEvent::kNonFinite, 12, NAN, 0, 0, 0, 0, SpikeAction::kSkip};
    std::map<std::string, std::vector<std::pair<int64_t, double>>> series;
    for (const InstabilityEvent& e : {spike, nan})
      for (const auto& [key, value] : instability_values(e)) {
        QVERIFY(std::find(instability_keys().begin(), instability_keys().end(), key) !=
                instability_keys().end());
        series[key].push_back({e.iteration, value});
      }
    const std::vector<InstabilityEvent> back = instability_events(series);
    QCOMPARE(back.size(), size_t{2});
    QCOMPARE(back[0].iteration, int64_t{12});
    QCOMPARE(back[0].kind, InstabilityEvent::kNonFinite);
    QCOMPARE(back[0].action, SpikeAction::kSkip);
    QCOMPARE(back[1].iteration, int64_t{37});
    QCOMPARE(back[1].kind, InstabilityEvent::kLossSpike);
    QCOMPARE(back[1].z, 33.5);
    QCOMPARE(back[1].mean, 3.1);
    QCOMPARE(back[1].std, 0.2);
    QCOMPARE(back[1].window, 50);
    QCOMPARE(back[1].action, SpikeAction::kStop);
    QCOMPARE(QString::fromStdString(describe(back[1])),
             QString("loss spike at iteration 37: 9.8 against 3.1 ± 0.2 over the last 50 (z 33.5)"));
  }
};

QTEST_GUILESS_MAIN(SpikeDetectorTest)
#include "test_spike_detector.moc"
