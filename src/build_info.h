// Facts about this build that --version and INFO server print.
#pragma once

#include <string>

namespace deferq {

inline constexpr const char* kVersion = DEFERQ_VERSION;

// "mimalloc 2.0.9" when mimalloc serves this process's malloc (checked by asking mimalloc whether
// a pointer from plain malloc lies in its heap), else "libc malloc (mimalloc 2.0.9 linked, not
// in use)"; "libc malloc (built without mimalloc)" in a -Dmimalloc=false (sanitizer) build.
std::string AllocatorDescription();

}  // namespace deferq
