// SFT samples (data/sft_dataset.h, Note [SFT samples]): one conversation per sample truncated or
// padded with its mask, --sft-packing's greedy packs with per-token positions that restart at
// each conversation and a cleared mask at each packed start, the split over conversations, the
// micro-batch fill's ignored targets (train/data_feed.h), and the errors for a missing or
// mismatched loss mask.
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include "common/masked_sample.h"
#include "data/sft_dataset.h"
#include "lattice/kernels.h"
#include "train/data_feed.h"

using namespace lattice;
using lattice::testing::MaskedSample;
using lattice::testing::read_masked;

namespace {

struct Conversation {
  std::vector<int32_t> tokens, mask;
};

// Conversation c has `lengths[c]` tokens 100 c + t; its first two tokens are masked (a prompt).
std::vector<Conversation> conversations(const std::vector<int>& lengths) {
  std::vector<Conversation> out;
  for (size_t c = 0; c < lengths.size(); c++) {
    Conversation v;
    for (int t = 0; t < lengths[c]; t++) {
      v.tokens.push_back(static_cast<int32_t>(100 * c + t));
      v.mask.push_back(t >= 2 ? 1 : 0);
    }
    out.push_back(std::move(v));
  }
  return out;
}

bool write(const std::string& prefix, const std::vector<Conversation>& convs, bool mask_too,
           int shorten_mask_of = -1) {
  auto tokens = IndexedDatasetBuilder::create(prefix, TokenDtype::kU16);
  if (!tokens) return false;
  for (const Conversation& c : convs) {
    if (!(*tokens)->add_sequence(c.tokens)) return false;
    (*tokens)->end_document();
  }
  if (!(*tokens)->finish()) return false;
  if (!mask_too) return true;
  auto mask = IndexedDatasetBuilder::create(loss_mask_prefix(prefix), TokenDtype::kU8);
  if (!mask) return false;
  for (size_t c = 0; c < convs.size(); c++) {
    std::vector<int32_t> m = convs[c].mask;
    if (static_cast<int>(c) == shorten_mask_of) m.pop_back();
    if (!(*mask)->add_sequence(m)) return false;
    (*mask)->end_document();
  }
  return static_cast<bool>((*mask)->finish());
}

}  // namespace

class SftDatasetTest : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::string prefix(const char* name) const { return dir_.filePath(name).toStdString(); }

 private slots:
  void one_conversation_per_sample_is_truncated_or_padded() {
    QVERIFY(write(prefix("one"), conversations({5, 12, 9}), true));
    SftDatasetOptions o;
    o.seq_length = 8;  // samples of 9 tokens
    auto splits = build_sft_splits({{1.0, prefix("one")}}, "100,0,0", 7, 0, 0, o);
    QVERIFY2(splits.is_ok(), splits.is_ok() ? "" : splits.status().message().c_str());
    const SampleSource& s = *splits->train;
    QVERIFY(s.has_loss_mask());
    QCOMPARE(s.size(), int64_t{7});
    // Sample 0: conversation 0 (5 tokens) and 4 padding tokens (id 0, masked, positions on).
    MaskedSample a = read_masked(s, 0);
    QCOMPARE(a.tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 0, 0, 0}));
    QCOMPARE(a.mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 0, 0, 0}));
    QCOMPARE(a.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
    // Sample 1: conversation 1 truncated to its first 9 tokens.
    MaskedSample b = read_masked(s, 1);
    QCOMPARE(b.tokens, (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107, 108}));
    QCOMPARE(b.mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 1, 1, 1}));
    // In order, no shuffle, epochs repeat: sample 3 is conversation 0 again, 5 is 2.
    QCOMPARE(read_masked(s, 3).tokens, a.tokens);
    QCOMPARE(read_masked(s, 5).tokens[0], 200);
  }

  void packing_restarts_positions_and_masks_each_conversation_start() {
    QVERIFY(write(prefix("pack"), conversations({4, 3, 6, 12, 2}), true));
    SftDatasetOptions o;
    o.seq_length = 8;
    o.packing = true;
    auto built = build_sft_splits({{1.0, prefix("pack")}}, "100,0,0", 1, 0, 0, o);
    QVERIFY(built.is_ok());
    const SampleSource& s = *built->train;
    // Packs of at most 9 tokens, greedily in order: {0, 1} (7), {2} (6), {3} (12 -> 9), {4}.
    QCOMPARE(s.size(), int64_t{4});
    MaskedSample p = read_masked(s, 0);
    QCOMPARE(p.tokens, (std::vector<int32_t>{0, 1, 2, 3, 100, 101, 102, 0, 0}));
    QCOMPARE(p.positions, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3, 4}));
    // Conversation 1's first token (masked anyway here) is no target of conversation 0's last.
    QCOMPARE(p.mask, (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1, 0, 0}));
    QCOMPARE(read_masked(s, 1).tokens[0], 200);
    MaskedSample t = read_masked(s, 2);
    QCOMPARE(t.tokens.back(), 308);  // truncated
    QCOMPARE(t.positions.back(), 8);
    QCOMPARE(read_masked(s, 3).tokens[0], 400);
  }

  void a_packed_start_that_is_a_target_is_cleared() {
    std::vector<Conversation> convs = conversations({3, 3});
    convs[1].mask = {1, 1, 1};  // would make conversation 0's last token predict it
    QVERIFY(write(prefix("start"), convs, true));
    SftDatasetOptions o;
    o.seq_length = 7;
    o.packing = true;
    auto built = build_sft_splits({{1.0, prefix("start")}}, "100,0,0", 1, 0, 0, o);
    QVERIFY(built.is_ok());
    MaskedSample p = read_masked(*built->train, 0);
    QCOMPARE(p.mask, (std::vector<uint8_t>{0, 0, 1, 0, 1, 1, 0, 0}));
  }

  void the_fill_ignores_masked_targets_and_returns_positions() {
    QVERIFY(write(prefix("fill"), conversations({5, 4, 3, 7}), true));
    SftDatasetOptions o;
    o.seq_length = 6;
    o.packing = true;
    auto built = build_sft_splits({{1.0, prefix("fill")}}, "100,0,0", 4, 0, 0, o);
    QVERIFY(built.is_ok());
    const SampleSource& s = *built->train;  // packs {0}, {1, 2}, {3}
    const int B = 1, T = 6;
    std::vector<int32_t> sample(T + 1), inputs(T), targets(T), positions(T);
    QVERIFY(fill_micro_batch(s, 0, 1, B, 1, 0, 500, sample, inputs.data(), targets.data(),
                             positions.data()));
    const int32_t x = kernels::kIgnoreIndex;
    QCOMPARE(inputs, (std::vector<int32_t>{100, 101, 102, 103, 200, 201}));
    QCOMPARE(targets, (std::vector<int32_t>{x, 102, 103, x, x, 202}));
    QCOMPARE(positions, (std::vector<int32_t>{0, 1, 2, 3, 0, 1}));
    // The count of targets of micro-batches 0..2: 3 + 3 + 5.
    QCOMPARE(count_targets(s, 0, 3, B, 1, 0), int64_t{11});
  }

  void the_split_is_over_conversations() {
    QVERIFY(write(prefix("split"), conversations({3, 3, 3, 3, 3, 3, 3, 3, 3, 3}), true));
    SftDatasetOptions o;
    o.seq_length = 4;
    auto built = build_sft_splits({{1.0, prefix("split")}}, "80,20,0", 9, 2, 0, o);
    QVERIFY(built.is_ok());
    QVERIFY(!built->test);
    QCOMPARE(read_masked(*built->train, 7).tokens[0], 700);
    QCOMPARE(read_masked(*built->train, 8).tokens[0], 0);  // the train split is conversations 0..7
    QCOMPARE(read_masked(*built->valid, 0).tokens[0], 800);
    QCOMPARE(read_masked(*built->valid, 1).tokens[0], 900);
  }

  void a_missing_mask_names_the_file_and_its_maker() {
    QVERIFY(write(prefix("bare"), conversations({3, 4}), false));
    SftDatasetOptions o;
    o.seq_length = 4;
    auto built = build_sft_splits({{1.0, prefix("bare")}}, "100,0,0", 1, 0, 0, o);
    QVERIFY(!built.is_ok());
    const std::string m = built.status().message();
    QVERIFY2(m.find(prefix("bare") + "_loss_mask.idx is missing") != std::string::npos &&
                 m.find("lattice data preprocess") != std::string::npos,
             m.c_str());
  }

  void a_mask_of_another_length_names_the_conversation() {
    QVERIFY(write(prefix("short"), conversations({3, 4, 5}), true, 1));
    SftDatasetOptions o;
    o.seq_length = 4;
    auto built = build_sft_splits({{1.0, prefix("short")}}, "100,0,0", 1, 0, 0, o);
    QVERIFY(!built.is_ok());
    const std::string m = built.status().message();
    QVERIFY2(m.find("conversation 1 of") != std::string::npos &&
                 m.find("has 4 tokens but its loss mask") != std::string::npos,
             m.c_str());
  }
};

QTEST_GUILESS_MAIN(SftDatasetTest)
#include "test_sft_dataset.moc"
