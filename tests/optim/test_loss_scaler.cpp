// The fp16 loss scaler follows Megatron's DynamicGradScaler step for step: skip on inf/NaN,
// back off after `hysteresis` bad steps, grow after `growth_interval` clean ones, never
// below min_scale; a static --loss-scale never moves.
#include <QtTest/QtTest>

#include "optim/loss_scaler.h"

using lattice::LossScaler;
using lattice::LossScalerOptions;

class LossScalerTest : public QObject {
  Q_OBJECT
 private slots:
  void starts_at_megatrons_default() {
    QCOMPARE(LossScaler().scale(), 4294967296.0);
    QCOMPARE(LossScaler().inverse_scale(), 1.0 / 4294967296.0);
  }

  void backs_off_only_after_hysteresis_bad_steps() {
    LossScalerOptions o;
    o.initial_scale = 1024, o.hysteresis = 2;
    LossScaler s(o);
    QVERIFY2(s.update(true), "a step with inf gradients must be skipped");
    QCOMPARE(s.scale(), 1024.0);  // first bad step: hysteresis absorbs it
    QVERIFY(s.update(true));
    QCOMPARE(s.scale(), 512.0);
    QVERIFY(s.update(true));  // the tracker stays exhausted: every further bad step halves
    QCOMPARE(s.scale(), 256.0);
    QCOMPARE(s.skipped_steps(), uint64_t{3});
  }

  void grows_after_an_unbroken_window_and_resets_hysteresis() {
    LossScalerOptions o;
    o.initial_scale = 8, o.growth_interval = 3, o.hysteresis = 2;
    LossScaler s(o);
    QVERIFY(!s.update(false));
    QVERIFY(!s.update(false));
    s.update(true);  // breaks the window (hysteresis 2 -> 1, no back-off)
    QCOMPARE(s.scale(), 8.0);
    for (int i = 0; i < 2; i++) s.update(false);
    QCOMPARE(s.scale(), 8.0);
    s.update(false);  // third clean step in a row
    QCOMPARE(s.scale(), 16.0);
    s.update(true);  // hysteresis was reset to 2 on growth: absorbed again
    QCOMPARE(s.scale(), 16.0);
  }

  void never_goes_below_min_scale() {
    LossScalerOptions o;
    o.initial_scale = 4, o.min_scale = 2, o.hysteresis = 1;
    LossScaler s(o);
    for (int i = 0; i < 5; i++) s.update(true);
    QCOMPARE(s.scale(), 2.0);
  }

  void static_scale_never_changes_but_still_skips() {
    LossScalerOptions o;
    o.static_scale = 128, o.growth_interval = 1;
    LossScaler s(o);
    QVERIFY(!s.update(false));
    QVERIFY(s.update(true));
    QCOMPARE(s.scale(), 128.0);
    QCOMPARE(s.skipped_steps(), uint64_t{1});
  }
};

QTEST_GUILESS_MAIN(LossScalerTest)
#include "test_loss_scaler.moc"
