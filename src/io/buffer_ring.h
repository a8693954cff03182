// A provided-buffer ring (io_uring "ring mapped" buffers) for multishot recv: the kernel picks a
// free buffer for each completion, so idle connections hold no receive memory at all.
// liburing 2.3 has no io_uring_setup_buf_ring, so the ring is mapped and registered by hand.
#pragma once

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace deferq::io {

class ProvidedBufferRing {
 public:
  ProvidedBufferRing() = default;
  ~ProvidedBufferRing();
  ProvidedBufferRing(const ProvidedBufferRing&) = delete;
  ProvidedBufferRing& operator=(const ProvidedBufferRing&) = delete;

  // count must be a power of two <= 32768. Registers the ring as buffer group `group`.
  bool Init(io_uring* ring, uint16_t group, uint32_t count, uint32_t size, std::string* error);

  uint16_t group() const { return group_; }
  const char* Buffer(uint16_t bid) const { return base_ + static_cast<size_t>(bid) * size_; }
  // Hands buffer `bid` back to the kernel once its bytes have been consumed.
  void Recycle(uint16_t bid) {
    io_uring_buf_ring_add(br_, base_ + static_cast<size_t>(bid) * size_, size_, bid,
                          io_uring_buf_ring_mask(count_), 0);
    io_uring_buf_ring_advance(br_, 1);
  }

 private:
  io_uring* ring_ = nullptr;
  io_uring_buf_ring* br_ = nullptr;
  size_t ring_bytes_ = 0;
  char* base_ = nullptr;
  size_t base_bytes_ = 0;
  uint32_t count_ = 0;
  uint32_t size_ = 0;
  uint16_t group_ = 0;
  bool registered_ = false;
};

}  // namespace deferq::io
