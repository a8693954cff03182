// Loading deferq's configuration: the TOML file (docs/configuration.md), the command line, and
// the cross-key checks that tie them together. Precedence: command-line flags override the file;
// the file overrides the defaults (config.h).
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace deferq {

// What the command line asks for.
enum class CliAction { kRun, kCheckConfig, kHelp, kVersion };

// Loads TOML text into cfg (on top of what cfg already holds). source_name is used in errors.
// On error returns false and sets *error to "FILE:LINE: key 'a.b': what is wrong".
bool LoadConfigString(const std::string& text, const std::string& source_name, Config* cfg,
                      std::string* error);
bool LoadConfigFile(const std::string& path, Config* cfg, std::string* error);

// Parses argv (argv[0] is the program name): loads --config FILE first, then applies the other
// flags on top. Fills in the default pool when none is configured and validates the result.
// On error returns false with *error naming the flag or the file, line and key.
bool ParseCommandLine(int argc, const char* const* argv, Config* cfg, CliAction* action,
                      std::string* error);

// The query-buffer limit in force: max_query_buffer, raised to hold one command with a bulk string
// of max_bulk_len.
uint64_t QueryBufferLimit(const Config& cfg);

// Cross-key checks (max_bulk_len >= max_payload + 1 KiB, pool URLs parse, threads >= 0, ...).
bool ValidateConfig(const Config& cfg, std::string* error);

// The --help text.
std::string UsageText();

}  // namespace deferq
