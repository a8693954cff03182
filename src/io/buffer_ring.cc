#include "io/buffer_ring.h"

#include <sys/mman.h>

#include <cstring>

namespace deferq::io {

ProvidedBufferRing::~ProvidedBufferRing() {
  if (registered_) io_uring_unregister_buf_ring(ring_, group_);
  if (br_ != nullptr) munmap(br_, ring_bytes_);
  if (base_ != nullptr) munmap(base_, base_bytes_);
}

bool ProvidedBufferRing::Init(io_uring* ring, uint16_t group, uint32_t count, uint32_t size,
                              std::string* error) {
  ring_ = ring;
  group_ = group;
  count_ = count;
  size_ = size;
  // The ring itself must be page aligned: mmap gives that.
  ring_bytes_ = count * sizeof(io_uring_buf);
  void* mem =
      mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    *error = std::string("mmap of the buffer ring failed: ") + strerror(errno);
    return false;
  }
  br_ = static_cast<io_uring_buf_ring*>(mem);
  base_bytes_ = static_cast<size_t>(count) * size;
  mem = mmap(nullptr, base_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    *error = std::string("mmap of receive buffers failed: ") + strerror(errno);
    return false;
  }
  base_ = static_cast<char*>(mem);

  io_uring_buf_ring_init(br_);
  io_uring_buf_reg reg;
  memset(&reg, 0, sizeof(reg));
  reg.ring_addr = reinterpret_cast<uint64_t>(br_);
  reg.ring_entries = count;
  reg.bgid = group;
  int ret = io_uring_register_buf_ring(ring, &reg, 0);
  if (ret < 0) {
    *error = std::string("io_uring_register_buf_ring failed: ") + strerror(-ret);
    return false;
  }
  registered_ = true;
  const int mask = io_uring_buf_ring_mask(count);
  for (uint32_t i = 0; i < count; ++i) {
    io_uring_buf_ring_add(br_, base_ + static_cast<size_t>(i) * size, size,
                          static_cast<uint16_t>(i), mask, static_cast<int>(i));
  }
  io_uring_buf_ring_advance(br_, static_cast<int>(count));
  return true;
}

}  // namespace deferq::io
