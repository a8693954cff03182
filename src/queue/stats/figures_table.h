// The per-queue figures of a stats snapshot: "ns/queue" -> QueueFigures, in name order,
// immutable once built, shared by every reader of the snapshot.
//
// API:
//   FiguresTable         begin()/end() iterate (tag, figures) pairs in name order; find(tag);
//                        size(). Copying one copies pointers to its chunks, not its entries.
//   FiguresTable::Apply  a new table: this one with some entries set or erased. Only the chunks
//                        that hold a changed name are copied.
//
// Why chunks: the poller stores a new snapshot every 2 s. With 100,000 queues in the figures a
// snapshot rebuilt whole was 100,000 map nodes allocated and copied per round, a few queues
// changed or none (~3.5% of a core of an idle deferq). The entries live in chunks of at most
// kMaxChunk consecutive names; a round copies the chunks its changes fall in and shares the rest
// with the snapshot before it.
#pragma once

#include <cstddef>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "queue/model/queue_figures.h"

namespace deferq::queue {

class FiguresTable {
 public:
  using Chunk = std::map<std::string, QueueFigures>;
  using value_type = Chunk::value_type;
  // A chunk over this many entries is split in two when a change touches it.
  static constexpr size_t kMaxChunk = 512;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = FiguresTable::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;

    const_iterator() = default;
    reference operator*() const { return *it_; }
    pointer operator->() const { return &*it_; }
    const_iterator& operator++() {
      if (++it_ == (*chunks_)[chunk_]->end()) {
        ++chunk_;
        it_ = chunk_ < chunks_->size() ? (*chunks_)[chunk_]->begin() : Chunk::const_iterator();
      }
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator was = *this;
      ++*this;
      return was;
    }
    bool operator==(const const_iterator& o) const { return chunk_ == o.chunk_ && it_ == o.it_; }

   private:
    friend class FiguresTable;
    const_iterator(const std::vector<std::shared_ptr<const Chunk>>* chunks, size_t chunk,
                   Chunk::const_iterator it)
        : chunks_(chunks), chunk_(chunk), it_(it) {}
    const std::vector<std::shared_ptr<const Chunk>>* chunks_ = nullptr;
    size_t chunk_ = 0;  // chunks_->size() at the end
    Chunk::const_iterator it_{};
  };

  const_iterator begin() const;
  const_iterator end() const { return const_iterator(&chunks_, chunks_.size(), {}); }
  const_iterator find(const std::string& tag) const;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // How many chunks hold the entries (for tests).
  size_t chunks() const { return chunks_.size(); }

  // This table with `changes` made: a name mapped to figures is set, to nullopt erased (a name
  // that is not there: nothing). The chunks no change falls in are shared with this table.
  FiguresTable Apply(const std::map<std::string, std::optional<QueueFigures>>& changes) const;

 private:
  // The chunk `tag` belongs in: the last whose first name is <= tag (the first one when none).
  size_t ChunkOf(const std::string& tag) const;

  std::vector<std::shared_ptr<const Chunk>> chunks_;  // non-empty, in name order
  size_t size_ = 0;
};

}  // namespace deferq::queue
