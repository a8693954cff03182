// The bottom room: a loop's io_uring and its provided-buffer ring, as the rooms above drive them.
// net's event loop owns the ring (it is an IoRing); persist's upstream connections and net's
// listeners submit their own connect/recv/send operations on their thread's ring and receive the
// completions through CompletionHandler. Nothing here knows a connection, a command or Redis.
#pragma once

#include <liburing.h>

#include <cstdint>

#include "base/check.h"
#include "io/buffer_ring.h"

namespace deferq::io {

// Receives the completions of operations tagged with ExternalTag(this).
class CompletionHandler {
 public:
  virtual void OnCompletion(const io_uring_cqe& cqe) = 0;

 protected:
  ~CompletionHandler() = default;
};

// Objects are at least 8-byte aligned, so the low three bits of their address are free: 7 marks
// an external handler (client-connection tags never end in 7).
inline constexpr uint64_t kExternalTagBits = 7;
static_assert(alignof(CompletionHandler) > kExternalTagBits, "the tag bits must be free");
inline uint64_t ExternalTag(CompletionHandler* h) {
  DQ_DCHECK((reinterpret_cast<uint64_t>(h) & kExternalTagBits) == 0);
  return reinterpret_cast<uint64_t>(h) | kExternalTagBits;
}

class IoRing {
 public:
  io_uring* ring() { return &ring_; }
  ProvidedBufferRing& buffers() { return buffers_; }
  // A free submission entry; submits what is queued when the submission queue is full.
  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }
  int64_t now_ms() const { return now_ms_; }    // monotonic, updated once per loop iteration
  int64_t wall_ms() const { return wall_ms_; }  // unix time, updated once per loop iteration

 protected:
  io_uring ring_{};
  ProvidedBufferRing buffers_;
  int64_t now_ms_ = 0;
  int64_t wall_ms_ = 0;
};

}  // namespace deferq::io
