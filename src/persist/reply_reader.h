// The hiredis reader deferq reads upstream Redis replies with: hiredis's own reply objects, with
// a bound on the element count an array header may announce.
//
// hiredis 0.14 allocates an array's element table as soon as it reads the "*N" header, before
// any element has arrived, and accepts any N up to INT_MAX: one corrupt or hostile reply line
// ("*737137832") would make deferq allocate 5.9 GB. No reply deferq asks for comes near the
// bound (the largest is a registry SMEMBERS; a CONSUME COUNT 1000 is 6001 elements).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct redisReader;
struct redisReply;

namespace deferq::persist {

// The error a command answers when Redis's reply is not what the script's header promises.
inline constexpr std::string_view kUnexpectedReply = "ERR unexpected reply from storage";

// Elements an upstream array reply may announce; a larger header is a protocol error.
inline constexpr size_t kMaxReplyElements = size_t{1} << 20;

// A reader like redisReaderCreate()'s, whose array headers above kMaxReplyElements fail the
// read (redisReaderGetReply returns REDIS_ERR). Free it with redisReaderFree.
redisReader* NewReplyReader();

// An integer reply, or a string reply holding one (a score), as *out.
bool ReplyInteger(const redisReply* r, int64_t* out);

// A due index read (ZRANGEBYSCORE ... WITHSCORES, or the library's cluster_due): the flat array
// member, score, member, score... appended to *out as (tag, due ms); a pair of another shape is
// left out.
void AppendDueEntries(const redisReply* flat, std::vector<std::pair<std::string, int64_t>>* out);

}  // namespace deferq::persist
