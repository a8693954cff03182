// SHA-1, only to name Lua scripts for EVALSHA (Redis identifies cached scripts by it).
#pragma once

#include <string>
#include <string_view>

namespace deferq::persist {

// Lower-case hex digest (40 characters), as SCRIPT LOAD returns it.
std::string Sha1Hex(std::string_view data);

}  // namespace deferq::persist
