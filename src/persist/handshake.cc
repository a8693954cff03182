#include "persist/handshake.h"

#include <hiredis/hiredis.h>

#include <charconv>

#include "persist/scripts.h"
#include "proto/request_writer.h"

namespace deferq::persist {

using proto::AppendCommand;

namespace {

// The oldest Redis deferq accepts (docs/operations.md, failures): Redis Functions and the Lua of
// the scripts need 7.0.
constexpr int kMinMajor = 7;
constexpr int kMinMinor = 0;

std::string_view Text(const redisReply& r) { return std::string_view(r.str, r.len); }

// For commands whose only failure is an error reply (AUTH, SELECT).
std::function<SetupVerdict(const redisReply&)> RefuseOnError(std::string what) {
  return [what = std::move(what)](const redisReply& r) {
    if (r.type != REDIS_REPLY_ERROR) return SetupVerdict{};
    return SetupVerdict{SetupVerdict::kRefuse, what + " failed: " + std::string(Text(r))};
  };
}

// The value of `field:` in an INFO reply, or an empty view.
std::string_view InfoField(std::string_view info, std::string_view field) {
  size_t at = 0;
  while (at < info.size()) {
    size_t end = info.find("\r\n", at);
    if (end == std::string_view::npos) end = info.size();
    const std::string_view line = info.substr(at, end - at);
    if (line.size() > field.size() && line.starts_with(field) && line[field.size()] == ':') {
      return line.substr(field.size() + 1);
    }
    at = end + 2;
  }
  return {};
}

}  // namespace

SetupVerdict CheckEvictionPolicy(const redisReply& r) {
  // CONFIG GET answers [name, value]; an error (CONFIG renamed away, as on some managed Redis)
  // leaves the policy unknown: a warning, since refusing would make such a pool unusable.
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 || r.element[1]->type != REDIS_REPLY_STRING) {
    return {SetupVerdict::kWarn,
            "cannot read maxmemory-policy (CONFIG disabled?); make sure it is noeviction"};
  }
  const std::string_view policy = Text(*r.element[1]);
  if (policy == "noeviction") return {};
  // An evicting Redis deletes keys under memory pressure: acknowledged jobs would vanish.
  return {SetupVerdict::kRefuse,
          "maxmemory-policy is " + std::string(policy) + ", deferq needs noeviction"};
}

SetupVerdict CheckRedisVersion(const redisReply& r) {
  if (r.type != REDIS_REPLY_STRING && r.type != REDIS_REPLY_STATUS) {
    return {SetupVerdict::kWarn, "cannot read the Redis version (INFO server failed)"};
  }
  // Valkey reports its Redis compatibility level here too (redis_version:7.2.4).
  const std::string_view version = InfoField(Text(r), "redis_version");
  int major = 0;
  int minor = 0;
  const char* end = version.data() + version.size();
  auto m = std::from_chars(version.data(), end, major);
  const bool ok = m.ec == std::errc() && m.ptr != end && *m.ptr == '.' &&
                  std::from_chars(m.ptr + 1, end, minor).ec == std::errc();
  if (!ok) return {SetupVerdict::kWarn, "cannot read the Redis version from INFO server"};
  if (major > kMinMajor || (major == kMinMajor && minor >= kMinMinor)) return {};
  return {SetupVerdict::kRefuse, "Redis " + std::string(version) + " is older than " +
                                     std::to_string(kMinMajor) + "." + std::to_string(kMinMinor) +
                                     ", which deferq needs"};
}

SetupVerdict CheckPersistence(const redisReply& r) {
  // While Redis loads its dataset after a restart it answers INFO with aof_enabled:0 even when
  // AOF is on, and refuses most commands (-LOADING): not ready yet, so not a warning either.
  if (r.type == REDIS_REPLY_STRING && InfoField(Text(r), "loading") == "1") {
    return {SetupVerdict::kRefuse, "Redis is loading its dataset into memory"};
  }
  if (r.type == REDIS_REPLY_STRING && InfoField(Text(r), "aof_enabled") == "0") {
    return {SetupVerdict::kWarn,
            "AOF is off: jobs published since the last RDB save are lost if Redis crashes "
            "(appendonly yes keeps them)"};
  }
  return {};
}

SetupVerdict CheckLibraryPresent(const redisReply& r) {
  // FUNCTION LIST LIBRARYNAME deferq_<version> lists it when it is loaded: the library's name
  // carries the version of every script's source, so a library of that name is this code.
  SetupVerdict v;
  v.library_present = r.type == REDIS_REPLY_ARRAY && r.elements > 0;
  return v;
}

const std::string& HealthRequest() {
  static const std::string request = [] {
    std::string r;
    AppendCommand(&r, {"INFO", "memory", "stats"});
    return r;
  }();
  return request;
}

std::string WriteRefusal(const redisReply& r, int64_t* evicted_keys) {
  if (r.type != REDIS_REPLY_STRING) return {};
  const std::string_view info = Text(r);
  const std::string_view policy = InfoField(info, "maxmemory_policy");
  const std::string_view evicted_text = InfoField(info, "evicted_keys");
  int64_t evicted = -1;
  if (!evicted_text.empty()) {
    std::from_chars(evicted_text.data(), evicted_text.data() + evicted_text.size(), evicted);
  }
  const int64_t before = *evicted_keys;
  *evicted_keys = evicted;
  if (!policy.empty() && policy != "noeviction") {
    return "maxmemory-policy is " + std::string(policy) +
           ", deferq needs noeviction; writes are refused until it is noeviction again";
  }
  // CONFIG RESETSTAT sets the count back to 0: only growth is an eviction.
  if (before >= 0 && evicted > before) {
    return "Redis evicted " + std::to_string(evicted - before) +
           " key(s) (evicted_keys grew): jobs may have been lost; writes are refused until "
           "maxmemory-policy is noeviction and no key is evicted";
  }
  return {};
}

Handshake BuildHandshake(const RedisUrl& url) {
  Handshake steps;
  auto add = [&steps](std::initializer_list<std::string_view> args, auto check,
                      bool after_checks = false) {
    SetupStep step;
    AppendCommand(&step.request, args);
    step.check = std::move(check);
    step.after_checks = after_checks;
    steps.push_back(std::move(step));
  };
  // AUTH and SELECT first: everything after them runs as that user, in that database.
  if (!url.password.empty()) {
    if (url.user.empty()) {
      add({"AUTH", url.password}, RefuseOnError("AUTH"));
    } else {
      add({"AUTH", url.user, url.password}, RefuseOnError("AUTH"));
    }
  }
  if (url.db != 0) add({"SELECT", std::to_string(url.db)}, RefuseOnError("SELECT"));
  add({"INFO", "server"}, CheckRedisVersion);
  add({"CONFIG", "GET", "maxmemory-policy"}, CheckEvictionPolicy);
  add({"INFO", "persistence"}, CheckPersistence);
  // The storage library (one FUNCTION LOAD REPLACE: deferq_<version>), so that no FCALL ever
  // meets a Redis without its functions, fresh, restarted or failed over; loaded only when the
  // pool lacks it (every load is ~90 KB appended to the AOF, and a full Redis refuses it while it
  // would serve the library it has). Only once the checks above passed; Redis < 7.0 has been
  // refused by then.
  const std::string library = "deferq_" + std::string(GetLibrary().version);
  add({"FUNCTION", "LIST", "LIBRARYNAME", library}, CheckLibraryPresent);
  auto loaded = [](const redisReply& r) {
    const std::string want = "deferq_" + std::string(GetLibrary().version);
    if (r.type == REDIS_REPLY_STRING && Text(r) == want) return SetupVerdict{};
    const std::string got = r.type == REDIS_REPLY_ERROR || r.type == REDIS_REPLY_STRING
                                ? std::string(Text(r))
                                : "an unexpected reply";
    return SetupVerdict{SetupVerdict::kRefuse, "FUNCTION LOAD of the library answered " + got};
  };
  add({"FUNCTION", "LOAD", "REPLACE", GetLibrary().body}, loaded, /*after_checks=*/true);
  steps.back().loads_library = true;
  return steps;
}

}  // namespace deferq::persist
