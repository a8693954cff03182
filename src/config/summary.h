// The effective configuration as the startup log shows it: every setting after defaults, file
// and command line, with no secret in it (URL passwords are written "***"; the admin password
// is never read here, only the name of its environment variable and whether it is set).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace deferq {

// "redis://user:***@host:port/db": the password of a URL's user info replaced by "***" (a user
// info without ':' is taken for a password, as redis-cli's -u does). Other text is unchanged.
std::string MaskUrlPassword(std::string_view url);

// Log lines (without newlines): one for [server], [auth] and [defaults], then one per pool.
std::vector<std::string> DescribeConfig(const Config& config);

}  // namespace deferq
