#include "config/build_info.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#if DEFERQ_MIMALLOC
#include <mimalloc.h>
#endif

namespace deferq {

std::string AllocatorDescription() {
#if !DEFERQ_MIMALLOC
  return "libc malloc (built without mimalloc)";
#else
  const int v = mi_version();  // e.g. 209 for 2.0.9
  std::string version =
      std::to_string(v / 100) + "." + std::to_string((v / 10) % 10) + "." + std::to_string(v % 10);
  // A block from the C library's malloc symbol lies in mimalloc's heap only if mimalloc has
  // interposed malloc for the whole process.
  void* probe = std::malloc(64);
  const bool in_use = mi_is_in_heap_region(probe);
  std::free(probe);
  if (in_use) return "mimalloc " + version;
  return "libc malloc (mimalloc " + version + " linked, not in use)";
#endif
}

uint64_t ResidentBytes() {
  // "size resident shared ..." in pages, as Redis's zmalloc_get_rss reads it.
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(buf, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  m.rss = ResidentBytes();
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) == 0)
    m.rss_peak = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  if (m.rss_peak < m.rss) m.rss_peak = m.rss;
  // What deferq holds is its resident set: mimalloc's committed bytes count arena pages never
  // touched (Linux commits lazily) and its per-allocation figures are compiled out of its
  // release library; glibc's mallinfo2 walks arenas in a way that broke glibc's thread-exit
  // bookkeeping under ThreadSanitizer (an assertion in __malloc_arena_thread_freeres).
  m.used = m.rss;
  m.used_peak = m.rss_peak;
  return m;
}

}  // namespace deferq
