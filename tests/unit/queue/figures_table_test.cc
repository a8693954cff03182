// FiguresTable: the stats snapshot's per-queue figures in shared chunks. Against a plain
// std::map after every round of random sets and erasures: the same entries in the same order,
// find agrees, and a round copies only the chunks its changes fall in.
#include "queue/stats/figures_table.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace deferq::queue {
namespace {

using Changes = std::map<std::string, std::optional<QueueFigures>>;

QueueFigures Figures(int64_t ready) {
  QueueFigures f;
  f.v[QueueFigures::kReady] = ready;
  return f;
}

std::string Tag(int i) {
  char buf[32];
  snprintf(buf, sizeof(buf), "default/q%06d", i);
  return buf;
}

void ExpectSame(const FiguresTable& table, const std::map<std::string, QueueFigures>& want) {
  ASSERT_EQ(table.size(), want.size());
  ASSERT_EQ(table.empty(), want.empty());
  auto w = want.begin();
  size_t n = 0;
  for (const auto& [tag, f] : table) {
    ASSERT_NE(w, want.end());
    EXPECT_EQ(tag, w->first);
    EXPECT_EQ(f, w->second);
    ++w;
    ++n;
  }
  EXPECT_EQ(n, want.size());
  for (const auto& [tag, f] : want) {
    auto it = table.find(tag);
    ASSERT_NE(it, table.end()) << tag;
    EXPECT_EQ(it->first, tag);
    EXPECT_EQ(it->second, f);
  }
  EXPECT_EQ(table.find("default/absent"), table.end());
  EXPECT_EQ(table.find(""), table.end());
  EXPECT_EQ(table.find("zzz"), table.end());
}

TEST(FiguresTableTest, EmptyTableIteratesNothingAndFindsNothing) {
  const FiguresTable empty;
  EXPECT_EQ(empty.begin(), empty.end());
  EXPECT_EQ(empty.find("default/q"), empty.end());
  EXPECT_EQ(empty.size(), 0u);
  // Erasing from an empty table leaves it empty.
  const FiguresTable still = empty.Apply({{"default/q", std::nullopt}});
  EXPECT_TRUE(still.empty());
  EXPECT_EQ(still.chunks(), 0u);
}

TEST(FiguresTableTest, ManyQueuesAreSplitIntoBoundedChunksInNameOrder) {
  Changes add;
  std::map<std::string, QueueFigures> want;
  for (int i = 0; i < 10000; ++i) {
    add[Tag(i)] = Figures(i);
    want[Tag(i)] = Figures(i);
  }
  const FiguresTable table = FiguresTable().Apply(add);
  ExpectSame(table, want);
  EXPECT_GE(table.chunks(), 10000 / FiguresTable::kMaxChunk);
  EXPECT_LE(table.chunks(), 2 * 10000 / FiguresTable::kMaxChunk + 1);
}

TEST(FiguresTableTest, ARoundSharesEveryChunkItsChangesDoNotFallIn) {
  Changes add;
  for (int i = 0; i < 10000; ++i) add[Tag(i)] = Figures(i);
  const FiguresTable before = FiguresTable().Apply(add);
  // Three queues change, one goes, none comes: at most four chunks are new.
  const FiguresTable after = before.Apply({{Tag(5), Figures(-1)},
                                           {Tag(5000), Figures(-2)},
                                           {Tag(5001), std::nullopt},
                                           {Tag(9999), Figures(-3)}});
  EXPECT_EQ(after.size(), 9999u);
  EXPECT_EQ(after.find(Tag(5))->second, Figures(-1));
  EXPECT_EQ(after.find(Tag(5001)), after.end());
  EXPECT_EQ(before.find(Tag(5))->second, Figures(5));  // the old table is untouched
  EXPECT_NE(before.find(Tag(5001)), before.end());
  // Entries are shared by address where their chunk was not copied.
  size_t shared = 0;
  for (const auto& [tag, f] : after) {
    auto it = before.find(tag);
    if (it != before.end() && &it->second == &f) ++shared;
  }
  EXPECT_GE(shared, 9999u - 3 * FiguresTable::kMaxChunk);
  // No change at all: every chunk shared.
  const FiguresTable same = after.Apply({});
  size_t same_shared = 0;
  for (const auto& [tag, f] : same) same_shared += &after.find(tag)->second == &f ? 1 : 0;
  EXPECT_EQ(same_shared, after.size());
}

TEST(FiguresTableTest, RandomRoundsMatchAPlainMap) {
  std::mt19937 rng(12345);
  FiguresTable table;
  std::map<std::string, QueueFigures> want;
  for (int round = 0; round < 150; ++round) {
    Changes changes;
    // Some rounds touch many names (a full read), most a few; erasures as often as sets, so
    // chunks grow, split, shrink and empty.
    const int n = round % 10 == 0 ? 1500 : static_cast<int>(rng() % 40);
    const int span = round < 50 ? 3000 : 800;
    for (int k = 0; k < n; ++k) {
      const std::string tag = Tag(static_cast<int>(rng() % span));
      if (rng() % 2 == 0) {
        changes[tag] = Figures(round * 1000 + k);
      } else {
        changes[tag] = std::nullopt;
      }
    }
    for (const auto& [tag, f] : changes) {
      if (f.has_value()) {
        want[tag] = *f;
      } else {
        want.erase(tag);
      }
    }
    table = table.Apply(changes);
    ExpectSame(table, want);
    if (::testing::Test::HasFatalFailure()) return;
    // Chunks stay bounded and few: never over the bound, and never a run of small ones.
    EXPECT_LE(table.chunks(), want.size() / (FiguresTable::kMaxChunk / 4) * 2 + 2) << round;
  }
}

}  // namespace
}  // namespace deferq::queue
