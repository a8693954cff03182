#include "queue/stats/figures_table.h"

#include <algorithm>
#include <utility>

namespace deferq::queue {

FiguresTable::const_iterator FiguresTable::begin() const {
  if (chunks_.empty()) return end();
  return const_iterator(&chunks_, 0, chunks_[0]->begin());
}

size_t FiguresTable::ChunkOf(const std::string& tag) const {
  // The first chunk whose first name is > tag; the one before it holds tag's place.
  auto after = std::upper_bound(chunks_.begin(), chunks_.end(), tag,
                                [](const std::string& t, const std::shared_ptr<const Chunk>& c) {
                                  return t < c->begin()->first;
                                });
  return after == chunks_.begin() ? 0 : static_cast<size_t>(after - chunks_.begin()) - 1;
}

FiguresTable::const_iterator FiguresTable::find(const std::string& tag) const {
  if (chunks_.empty()) return end();
  const size_t c = ChunkOf(tag);
  auto it = chunks_[c]->find(tag);
  if (it == chunks_[c]->end()) return end();
  return const_iterator(&chunks_, c, it);
}

FiguresTable FiguresTable::Apply(
    const std::map<std::string, std::optional<QueueFigures>>& changes) const {
  FiguresTable out;
  out.chunks_.reserve(chunks_.size() + 1);
  // Changes come in name order, so the chunks they fall in do too: each chunk is copied at most
  // once, when its first change comes, and the chunks between are taken over as they are.
  size_t next = 0;              // this table's first chunk not yet handled
  std::shared_ptr<Chunk> copy;  // the copy of the chunk being changed, if any
  auto flush = [&out](std::shared_ptr<Chunk>& c) {
    if (c == nullptr) return;
    // A chunk grown past the bound is split into even pieces of about half of it each.
    if (c->size() > kMaxChunk) {
      const size_t pieces = (c->size() + kMaxChunk / 2 - 1) / (kMaxChunk / 2);
      auto it = c->begin();
      for (size_t p = 0; p < pieces; ++p) {
        const size_t n = c->size() * (p + 1) / pieces - c->size() * p / pieces;
        auto part = std::make_shared<Chunk>();
        for (size_t i = 0; i < n; ++i) part->insert(part->end(), *it++);
        out.chunks_.push_back(std::move(part));
      }
    } else if (c->size() < kMaxChunk / 4 && !out.chunks_.empty() &&
               out.chunks_.back()->size() + c->size() <= kMaxChunk) {
      // A chunk shrunk by erasures joins the one before it: the chunks stay few.
      auto merged = std::make_shared<Chunk>(*out.chunks_.back());
      merged->insert(c->begin(), c->end());
      out.chunks_.back() = std::move(merged);
    } else if (!c->empty()) {
      out.chunks_.push_back(std::move(c));
    }
    c.reset();
  };
  size_t copy_of = 0;  // which chunk `copy` is of
  for (const auto& [tag, figures] : changes) {
    const size_t c = chunks_.empty() ? 0 : ChunkOf(tag);
    if (copy == nullptr || c != copy_of) {
      flush(copy);
      while (next < c) out.chunks_.push_back(chunks_[next++]);
      // An empty table: the first entry starts its first chunk.
      copy = c < chunks_.size() ? std::make_shared<Chunk>(*chunks_[c]) : std::make_shared<Chunk>();
      copy_of = c;
      next = c + 1;
    }
    if (figures.has_value()) {
      (*copy)[tag] = *figures;
    } else {
      copy->erase(tag);
    }
  }
  flush(copy);
  while (next < chunks_.size()) out.chunks_.push_back(chunks_[next++]);
  for (const auto& c : out.chunks_) out.size_ += c->size();
  return out;
}

}  // namespace deferq::queue
