#include "build_info.h"

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

}  // namespace deferq
