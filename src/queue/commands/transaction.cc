// MULTI / EXEC / DISCARD / WATCH (see transaction.h).
#include "queue/commands/transaction.h"

#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "queue/context/client_port.h"

namespace deferq::queue {

namespace {

// The commands of one EXEC and their replies. Commands that wait for Redis defer their reply to
// this ClientPort instead of the connection's: each reply lands in the slot of its command's
// index (as Envoy's FragmentedRequest collects its fragments), and the EXEC reply is written
// once the last one is in.
//
// Commands start in order, each as soon as the one before it has *started*: single-script
// commands reach Redis in that order over the connection's pinned upstream connection. A
// multi_step command (several round trips) would let the commands after it overtake its later
// steps, so it starts only when everything before it has finished, and what follows waits for it.
//
// Owned by CmdExec while EXEC runs; when some reply is still owed at the end of EXEC, it owns
// itself (Detach) and deletes itself when the EXEC reply is written or its client is gone.
class ExecRun final : public ClientPort {
 public:
  ExecRun(CommandContext& ctx, std::vector<Transaction::Queued> commands)
      : session_(ctx.session),
        server_(ctx.server),
        loop_(ctx.loop),
        instance_(ctx.instance),
        dispatch_(ctx.dispatch),
        has_port_(ctx.client != nullptr) {
    DQ_CHECK(dispatch_ != nullptr);
    steps_.reserve(commands.size());
    for (Transaction::Queued& q : commands) {
      Step& step = steps_.emplace_back();
      step.args = std::move(q.args);
      step.multi_step = q.multi_step;
    }
  }

  // Starts commands from the next one on, until all have started or one must wait.
  void Run() {
    in_run_ = true;
    multi_step_in_flight_ = false;
    while (next_ < steps_.size()) {
      const bool alone = steps_[next_].multi_step;
      if (alone && outstanding_ > 0) break;  // starts when the replies before it are in
      RunOne(next_++);
      if (alone && outstanding_ > 0) {
        multi_step_in_flight_ = true;  // the next ones wait for its reply
        break;
      }
    }
    in_run_ = false;
  }

  bool all_done() const { return next_ == steps_.size() && outstanding_ == 0; }
  // Whether a command of this EXEC may still send to Redis: until then no later command of the
  // connection may run (it could overtake it). Single-script commands have sent when they start.
  bool may_still_send() const { return next_ < steps_.size() || multi_step_in_flight_; }

  // The EXEC reply: the array of every command's reply, in order.
  void WriteReply(proto::ReplyWriter& out) const {
    out.ArrayHeader(steps_.size());
    for (const Step& f : steps_) out.buffer()->append(f.data);
  }

  // EXEC itself is over but replies are still owed: the EXEC reply goes to `ticket` of the
  // connection's `port` when they are in. From here on the run owns itself.
  void Detach(ClientPort* port, ReplyTicket ticket) { owed_ = {port, ticket}; }

  ReplyTicket Defer(bool /*blocking*/) override {
    // Only the command being run defers; inside EXEC nothing blocks (CONSUME acts as TIMEOUT 0).
    DQ_CHECK(in_run_ && running_ < steps_.size() && !steps_[running_].deferred);
    Step& f = steps_[running_];
    f.deferred = true;
    f.resp = session_.resp;  // the protocol in force when the command ran
    ++outstanding_;
    // Only while a command runs, so for a connected client: its session is there.
    return ReplyTicket{0, 0, running_, session_.id};
  }

  proto::ReplyWriter* Begin(const ReplyTicket& ticket) override {
    if (!Connected(ticket)) {
      // The caller writes nothing and does not call Finish: this reply is settled here.
      OneSettled();
      return nullptr;
    }
    DQ_CHECK(ticket.seq < steps_.size() && steps_[ticket.seq].deferred);
    Step& f = steps_[ticket.seq];
    writer_ = proto::ReplyWriter(&f.data, f.resp);
    return &writer_;
  }

  void Finish(const ReplyTicket&) override { OneSettled(); }

  bool Connected(const ReplyTicket&) const override {
    // Before Detach, EXEC is running for a connected client.
    return owed_.port == nullptr || owed_.port->Connected(owed_.ticket);
  }

 private:
  // One queued command: its arguments, then its reply.
  struct Step {
    std::vector<std::string> args;
    std::string data;  // the command's reply, RESP as its writer wrote it
    int resp = 2;
    bool deferred = false;
    bool multi_step = false;  // started alone (CommandSpec::multi_step)
  };

  void RunOne(size_t i) {
    Step& f = steps_[i];
    f.resp = session_.resp;
    proto::ReplyWriter writer(&f.data, session_.resp);
    CommandContext ctx{.session = session_,
                       .reply = writer,
                       .server = server_,
                       .loop = loop_,
                       .instance = instance_,
                       .client = has_port_ ? this : nullptr,
                       .in_exec = true};
    const std::vector<std::string_view> args(f.args.begin(), f.args.end());
    running_ = i;
    dispatch_(ctx, Args(args.data(), args.size()));
  }

  // A deferred reply was written (or will never be: its client left).
  void OneSettled() {
    DQ_CHECK(outstanding_ > 0);
    --outstanding_;
    // Inside Run (a reply that came at once, e.g. TRYAGAIN from a pool that is down), Run and
    // CmdExec look at the state when the command returns.
    if (in_run_ || outstanding_ > 0) return;
    if (!Connected(owed_.ticket)) {
      // The client left during EXEC: commands not started yet never run.
      delete this;
      return;
    }
    if (next_ < steps_.size()) Run();
    if (!all_done()) return;
    if (proto::ReplyWriter* out = owed_.port->Begin(owed_.ticket)) {
      WriteReply(*out);
      owed_.port->Finish(owed_.ticket);
    }
    delete this;
  }

  Session& session_;  // valid while the client is connected (checked before each use)
  ServerContext& server_;
  Loop* const loop_;
  Instance* const instance_;
  void (*const dispatch_)(CommandContext& ctx, Args args);
  const bool has_port_;      // the connection can take deferred replies (so can its EXEC)
  std::vector<Step> steps_;  // one per command; filled once, so references stay valid
  size_t next_ = 0;          // the next command to start
  size_t running_ = 0;       // the command being started (Defer's slot)
  size_t outstanding_ = 0;   // deferred replies not written yet
  bool in_run_ = false;
  bool multi_step_in_flight_ = false;  // Run stopped after starting a multi_step command
  struct Owed {
    ClientPort* port = nullptr;
    ReplyTicket ticket;
  } owed_;  // after Detach: where the EXEC reply is owed
  proto::ReplyWriter writer_{nullptr, 2};
};

}  // namespace

void CmdMulti(CommandContext& ctx, Args) {
  Transaction& tx = ctx.session.multi;
  // As Redis: refused, but the transaction that is open stays intact.
  if (tx.active) return ctx.reply.Error("ERR MULTI calls can not be nested");
  tx.Clear();
  tx.active = true;
  ctx.reply.Ok();
}

void CmdDiscard(CommandContext& ctx, Args) {
  Transaction& tx = ctx.session.multi;
  if (!tx.active) return ctx.reply.Error("ERR DISCARD without MULTI");
  tx.Clear();
  ctx.reply.Ok();
}

void CmdWatch(CommandContext& ctx, Args) {
  // deferq has no keys to watch; a client relying on WATCH must not think it got its check.
  ctx.reply.Error("ERR WATCH is not supported by deferq");
}

void CmdExec(CommandContext& ctx, Args) {
  Transaction& tx = ctx.session.multi;
  if (!tx.active) return ctx.reply.Error("ERR EXEC without MULTI");
  if (tx.failed) {
    tx.Clear();
    return ctx.reply.Error("EXECABORT Transaction discarded because of previous errors.");
  }
  std::vector<Transaction::Queued> commands = std::move(tx.commands);
  tx.Clear();
  auto run = std::make_unique<ExecRun>(ctx, std::move(commands));
  run->Run();
  if (run->all_done()) {
    // Everything answered at once (no Redis round trip, or errors only).
    run->WriteReply(ctx.reply);
    return;
  }
  // While a command of it may still send to Redis, the connection reads nothing further (like a
  // blocked client), so no later command of it can run before them.
  const ReplyTicket ticket = ctx.client->Defer(/*blocking=*/run->may_still_send());
  run.release()->Detach(ctx.client, ticket);
}

void QueueCommand(CommandContext& ctx, const CommandSpec& spec, Args args) {
  Transaction& tx = ctx.session.multi;
  if (spec.check != nullptr && !spec.check(ctx, args)) {
    tx.failed = true;
    return;
  }
  size_t bytes = 0;
  for (std::string_view a : args) bytes += a.size();
  if (tx.commands.size() >= kMaxQueuedCommands ||
      tx.bytes + bytes > ctx.server.config().max_output_buffer) {
    tx.failed = true;
    return ctx.reply.Error("ERR transaction too large");
  }
  // A doomed transaction never runs: its commands are checked and acknowledged, not kept.
  if (!tx.failed) {
    tx.commands.push_back({std::vector<std::string>(args.begin(), args.end()), spec.multi_step});
    tx.bytes += bytes;
  }
  ctx.reply.Simple("QUEUED");
}

}  // namespace deferq::queue
