// The storage call of a PUBLISH, shared by PUBLISH and CALL (queue/delivery/calls.h): a parsed
// request made into publish.lua's arguments (docs/storage.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "persist/upstream_connection.h"
#include "queue/commands/job_requests.h"

namespace deferq::queue {

struct PreparedPublish {
  std::string key;      // canonical key K (generated, or of the ID given)
  std::string id_text;  // the id the client sees
  std::vector<std::string> argv;
  bool ready_now = false;             // ready at once (else delayed: its pump is told its due ms)
  std::function<void()> not_applied;  // gives the rate limiter's admission back (may be empty)
};

// Draws the id, encodes the record (notify: a requester waits for the job, CALL) and tells the
// pump of a delayed job's due ms. req.q becomes the shard that holds the job on a sharded queue.
PreparedPublish PreparePublish(CommandContext& ctx, PublishRequest& req, bool notify);
// publish.lua's status: 1 created, 2 replaced, 0 a live job (or kept outcome) holds the id.
int64_t PublishStatus(persist::ReplyView r);

}  // namespace deferq::queue
