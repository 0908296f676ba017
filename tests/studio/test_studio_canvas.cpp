// The layout canvas draws every device with Megatron's coordinates (rank = tp + TP (dp + DP pp)),
// outlines each TP group, flags TP groups that cross nodes, highlights a device's TP, PP and DP
// groups (and with CP and EP its CP, EP and expert-DP groups), and folds identical nodes so 1024
// devices stay a few dozen boxes. With LATTICE_STUDIO_SCREENSHOTS=DIR the 5D layout's hovered
// panel is saved there.
#include <QLabel>
#include <QSignalSpy>
#include <QtTest>

#include "plan/layout_canvas.h"
#include "plan/layout_geometry.h"
#include "plan/layout_panel.h"
#include "plan/plan_model.h"
#include "plan/text_format.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

ParallelLayout makeLayout(int tp, int pp, int dp, int layers = 4) {
  ParallelLayout l;
  l.tp = tp, l.pp = pp, l.dp = dp;
  l.world = tp * pp * dp;
  l.etp = tp, l.edp = dp;  // no experts (lattice/layout.h)
  l.num_layers = layers;
  return l;
}

const DeviceItem* itemOfRank(const LayoutCanvas& canvas, int rank) {
  for (const DeviceItem* d : canvas.deviceItems())
    if (d->tile().rank == rank) return d;
  return nullptr;
}

}  // namespace

class TestStudioCanvas : public QObject {
  Q_OBJECT

 private slots:
  void tp2pp2OnEightDevicesDrawsEightDevicesWithTheirCoordinatesAndGroups() {
    PlanModel model;  // the demo model: 4 layers, 4 heads, global batch 16 of micro 8
    model.edit("8 devices, TP 2, PP 2", [](Plan& p) {
      p.cluster.devices_per_node = 8;
      p.options.model.tensor_model_parallel_size = 2;
      p.options.parallel.pipeline_model_parallel_size = 2;
      p.options.micro_batch_size = 4;
    });
    QVERIFY2(model.isValid(),
             qPrintable(model.isValid() ? QString() : model.analysis().errors[0].message));
    LayoutPanel panel(&model);
    const LayoutCanvas& canvas = *panel.canvas();
    QCOMPARE(canvas.deviceItems().size(), 8);
    // Megatron's order: tp fastest, then dp, then pp.
    const int expected[8][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                                {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};  // tp, dp, pp
    for (int rank = 0; rank < 8; rank++) {
      const DeviceItem* d = itemOfRank(canvas, rank);
      QVERIFY2(d, qPrintable(QString("no tile for rank %1").arg(rank)));
      const auto& c = d->tile().coord;
      QVERIFY2(d->tile().hasCoord, "tiles of a valid plan carry coordinates");
      QVERIFY2(c.tp == expected[rank][0] && c.dp == expected[rank][1] && c.pp == expected[rank][2],
               qPrintable(QString("rank %1 drawn as (tp %2, dp %3, pp %4)")
                              .arg(rank)
                              .arg(c.tp)
                              .arg(c.dp)
                              .arg(c.pp)));
    }
    // One outline per TP group [0,1] [2,3] [4,5] [6,7], none across a node.
    const CanvasGeometry& g = canvas.geometry();
    QCOMPARE(g.outlines.size(), size_t{4});
    for (size_t i = 0; i < g.outlines.size(); i++) {
      QCOMPARE(g.outlines[i].firstRank, static_cast<int>(2 * i));
      QVERIFY(!g.outlines[i].crossesNodes);
    }
  }

  void selectingADeviceHighlightsItsGroups() {
    PlanModel model;
    model.edit("8 devices, TP 2, PP 2", [](Plan& p) {
      p.cluster.devices_per_node = 8;
      p.options.model.tensor_model_parallel_size = 2;
      p.options.parallel.pipeline_model_parallel_size = 2;
      p.options.micro_batch_size = 4;
    });
    LayoutPanel panel(&model);
    LayoutCanvas& canvas = *panel.canvas();
    canvas.selectRank(5);  // tp 1, dp 0, pp 1
    auto role = [&](int rank) { return itemOfRank(canvas, rank)->role(); };
    QCOMPARE(role(5), TileRole::kSelf);
    QCOMPARE(role(4), TileRole::kTensorGroup);    // TP group [4, 5]
    QCOMPARE(role(1), TileRole::kPipelineGroup);  // PP group [1, 5]
    QCOMPARE(role(7), TileRole::kDataGroup);      // DP group [5, 7]
    for (int other : {0, 2, 3, 6}) QCOMPARE(role(other), TileRole::kDimmed);
    const QString text = panel.describe(itemOfRank(canvas, 5)->tile(), false);
    QVERIFY2(text.contains("TP group [4, 5]") && text.contains("PP group [1, 5]") &&
                 text.contains("DP group [5, 7]") && text.contains("memory:"),
             qPrintable(text));
    canvas.selectRank(-1);
    QCOMPARE(role(5), TileRole::kNone);
  }

  // A vision tower (--vision-model-type clip) runs on the first pipeline stage: those devices
  // carry a "ViT" tag, the legend names it, a stage-0 device's description gives the tower's
  // parameters from the planner; without the tower no device is tagged.
  void aVisionTowerTagsTheFirstStagesDevices() {
    PlanModel model;
    model.edit("8 devices, TP 2, PP 2, vision tower", [](Plan& p) {
      p.cluster.devices_per_node = 8;
      p.options.model.tensor_model_parallel_size = 2;
      p.options.parallel.pipeline_model_parallel_size = 2;
      p.options.micro_batch_size = 4;
      p.options.vision_model_type = "clip";
    });
    QVERIFY2(model.isValid(),
             qPrintable(model.isValid() ? QString() : model.analysis().errors[0].message));
    LayoutPanel panel(&model);
    panel.resize(1000, 500);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    const LayoutCanvas& canvas = *panel.canvas();
    QVERIFY(canvas.visionTower());
    int tagged = 0;
    for (const DeviceItem* d : canvas.deviceItems()) {
      QVERIFY2(d->showsVision() == (d->tile().coord.pp == 0),
               qPrintable(QString("rank %1 (pp %2) tagged %3")
                              .arg(d->tile().rank)
                              .arg(d->tile().coord.pp)
                              .arg(d->showsVision())));
      tagged += d->showsVision();
    }
    QCOMPARE(tagged, 4);
    bool legend = false;
    for (const QLabel* l : panel.findChildren<QLabel*>())
      legend = legend || l->text().contains("vision tower (stage 0)");
    QVERIFY2(legend, "no legend entry for the vision tower");
    const int64_t parameters = model.analysis().memory->vision.parameters;
    QCOMPARE(parameters, estimate_vision(model.plan().options).parameters);
    const QString first = panel.describe(itemOfRank(canvas, 0)->tile(), false);
    QVERIFY2(first.contains(QString("vision tower (ViT + projector): %1 parameters")
                                .arg(humanCount(static_cast<double>(parameters)))),
             qPrintable(first));
    QVERIFY2(!panel.describe(itemOfRank(canvas, 4)->tile(), false).contains("vision"),
             "a pp 1 device has no tower");

    // LATTICE_STUDIO_SCREENSHOTS=DIR: the panel with the tower, for docs/vision.md.
    const QString shots = qEnvironmentVariable("LATTICE_STUDIO_SCREENSHOTS");
    if (!shots.isEmpty()) QVERIFY(panel.grab().save(shots + "/studio-plan-canvas-vision.png"));

    model.edit("no vision tower", [](Plan& p) { p.options.vision_model_type.clear(); });
    QVERIFY(!panel.canvas()->visionTower());
    for (const DeviceItem* d : panel.canvas()->deviceItems()) QVERIFY(!d->showsVision());
  }

  void hoveringADeviceWithTheMouseHighlightsItsGroups() {
    PlanModel model;
    model.edit("8 devices, TP 2, PP 2", [](Plan& p) {
      p.cluster.devices_per_node = 8;
      p.options.model.tensor_model_parallel_size = 2;
      p.options.parallel.pipeline_model_parallel_size = 2;
      p.options.micro_batch_size = 4;
    });
    LayoutPanel panel(&model);
    panel.resize(1000, 500);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    LayoutCanvas* canvas = panel.canvas();
    QSignalSpy focus(canvas, &LayoutCanvas::focusChanged);
    const QPoint at = canvas->mapFromScene(itemOfRank(*canvas, 6)->tile().rect.center());
    QTest::mouseMove(canvas->viewport(), at);
    QTRY_COMPARE(itemOfRank(*canvas, 6)->role(), TileRole::kSelf);
    QCOMPARE(itemOfRank(*canvas, 7)->role(), TileRole::kTensorGroup);
    QCOMPARE(itemOfRank(*canvas, 2)->role(), TileRole::kPipelineGroup);
    QCOMPARE(itemOfRank(*canvas, 4)->role(), TileRole::kDataGroup);
    QVERIFY(!focus.isEmpty());
    auto* info = panel.findChild<QLabel*>("device-info");
    QVERIFY2(info->text().startsWith("Rank 6 on node 0"), qPrintable(info->text()));
  }

  // TP 2 x CP 2 x DP 4 x PP 2 on 4 nodes of 8, EP 4 over 4 experts: the expert grid is
  // ETP 2 x EP 4 x expert DP 2 x PP 2. Hovering rank 0 highlights each of its groups in the
  // order TP, CP, EP, DP, PP, expert DP (a tile in two groups gets the first, and a dot for the
  // other), and the description lists the engine's six groups of the hovered rank.
  void aFiveAxisLayoutHighlightsAndNamesEveryGroupOfTheHoveredDevice() {
    PlanModel model;
    model.edit("32 devices, TP 2, CP 2, PP 2, EP 4", [](Plan& p) {
      p.cluster.nodes = 4;
      p.cluster.devices_per_node = 8;
      p.options.model.tensor_model_parallel_size = 2;
      p.options.model.num_experts = 4;
      p.options.parallel.context_parallel_size = 2;
      p.options.parallel.pipeline_model_parallel_size = 2;
      p.options.parallel.expert_model_parallel_size = 4;
      p.options.micro_batch_size = 4;
    });
    QVERIFY2(model.isValid(),
             qPrintable(model.isValid() ? QString() : model.analysis().errors[0].message));
    const ParallelLayout& l = *model.analysis().layout;
    QCOMPARE(l.dp, 4);
    QCOMPARE(l.edp, 2);
    LayoutPanel panel(&model);
    panel.resize(1200, 700);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    LayoutCanvas* canvas = panel.canvas();
    QCOMPARE(canvas->deviceItems().size(), 32);
    const QPoint at = canvas->mapFromScene(itemOfRank(*canvas, 0)->tile().rect.center());
    QTest::mouseMove(canvas->viewport(), at);
    auto role = [&](int rank) { return itemOfRank(*canvas, rank)->role(); };
    auto also = [&](int rank, TileRole r) {
      return (itemOfRank(*canvas, rank)->alsoRoles() & (1u << static_cast<int>(r))) != 0;
    };
    QTRY_COMPARE(role(0), TileRole::kSelf);
    QCOMPARE(role(1), TileRole::kTensorGroup);   // TP [0, 1]
    QCOMPARE(role(2), TileRole::kContextGroup);  // CP [0, 2], also EP
    QVERIFY(also(2, TileRole::kExpertGroup));
    QCOMPARE(role(4), TileRole::kExpertGroup);  // EP [0, 2, 4, 6], also DP
    QVERIFY(also(4, TileRole::kDataGroup));
    QCOMPARE(role(6), TileRole::kExpertGroup);
    QCOMPARE(role(8), TileRole::kDataGroup);  // DP [0, 4, 8, 12], also expert DP [0, 8]
    QVERIFY(also(8, TileRole::kExpertDataGroup));
    QCOMPARE(role(12), TileRole::kDataGroup);
    QCOMPARE(role(16), TileRole::kPipelineGroup);  // PP [0, 16]
    for (int other : {3, 5, 7, 9, 10, 17, 31}) QCOMPARE(role(other), TileRole::kDimmed);

    // The description of rank 13 (tp 1, cp 0, dp 3, pp 0) names the engine's groups.
    const int rank = 13;
    const QString text = panel.describe(itemOfRank(*canvas, rank)->tile(), false);
    auto groupOf = [rank](const std::vector<std::vector<int>>& groups) {
      for (const auto& g : groups)
        if (std::find(g.begin(), g.end(), rank) != g.end()) {
          QStringList items;
          for (int r : g) items << QString::number(r);
          return "[" + items.join(", ") + "]";
        }
      return QString("none");
    };
    const std::pair<QString, QString> expected[] = {
        {"TP group", groupOf(l.tensor_groups())},
        {"CP group", groupOf(l.context_groups())},
        {"EP group", groupOf(l.expert_groups())},
        {"DP group", groupOf(l.data_groups())},
        {"PP group", groupOf(l.pipeline_groups())},
        {"expert-DP group", groupOf(l.expert_data_groups())}};
    for (const auto& [name, ranks] : expected)
      QVERIFY2(text.contains(name + " " + ranks),
               qPrintable(QString("no \"%1 %2\" in: %3").arg(name, ranks, text)));
    QVERIFY2(text.contains("tp 1, cp 0, dp 3, pp 0"), qPrintable(text));

    // LATTICE_STUDIO_SCREENSHOTS=DIR: the panel with rank 0 hovered, for docs/studio.md.
    const QString shots = qEnvironmentVariable("LATTICE_STUDIO_SCREENSHOTS");
    if (!shots.isEmpty()) {
      QTest::mouseMove(canvas->viewport(), at);
      QTRY_COMPARE(role(0), TileRole::kSelf);
      QVERIFY(panel.grab().save(shots + "/studio-plan-canvas-5d.png"));
    }
  }

  void aTpGroupAcrossTwoNodesGetsAWarningBadge() {
    // 2 nodes x 3 devices, TP 2: the group [2, 3] has rank 2 on node 0 and rank 3 on node 1.
    const CanvasGeometry g = canvasGeometry(makeLayout(2, 1, 3), 2, 3, false);
    QCOMPARE(g.outlines.size(), size_t{4});  // [0,1], [2] on node 0, [3] on node 1, [4,5]
    int crossing = 0;
    for (const CanvasOutline& o : g.outlines)
      if (o.crossesNodes) {
        crossing++;
        QCOMPARE(o.firstRank, 2);
      }
    QCOMPARE(crossing, 2);  // its piece on each node
  }

  void identicalNodesFoldSo1024DevicesStayLegible() {
    // GPT-3 175B's layout: TP 8 within a node, PP 16, DP 8 on 128 nodes of 8.
    const CanvasGeometry folded = canvasGeometry(makeLayout(8, 16, 8, 96), 128, 8, true);
    QVERIFY(folded.folded);
    QCOMPARE(folded.nodes.size(), size_t{16});  // one stack per pipeline stage
    QCOMPARE(folded.tiles.size(), size_t{128});
    for (const CanvasTile& t : folded.tiles) {
      QCOMPARE(t.folded, 8);
      QCOMPARE(t.dpLast - t.coord.dp, 7);
    }
    const CanvasGeometry flat = canvasGeometry(makeLayout(8, 16, 8, 96), 128, 8, false);
    QCOMPARE(flat.tiles.size(), size_t{1024});
    QCOMPARE(flat.outlines.size(), size_t{128});
  }

  void the1024DeviceCanvasBuildsUnfoldedToo() {
    PlanModel model;
    model.edit("1024 devices", [](Plan& p) {
      p.cluster.nodes = 128;
      p.cluster.devices_per_node = 8;
      p.options.model.num_layers = 96;
      p.options.model.num_attention_heads = 8;
      p.options.model.tensor_model_parallel_size = 8;
      p.options.parallel.pipeline_model_parallel_size = 16;
      p.options.micro_batch_size = 1;
      p.options.global_batch_size = 128;
    });
    QVERIFY2(model.isValid(),
             qPrintable(model.isValid() ? QString() : model.analysis().errors[0].message));
    LayoutPanel panel(&model);
    QCOMPARE(panel.canvas()->deviceItems().size(), 128);  // folded by default
    panel.canvas()->setFolding(false);
    QCOMPARE(panel.canvas()->deviceItems().size(), 1024);
    qInfo("1024-device scene rebuilt in %.1f ms (bench_studio_canvas measures the redraw)",
          panel.canvas()->lastRebuildMs());
  }
};

QTEST_MAIN(TestStudioCanvas)
#include "test_studio_canvas.moc"
