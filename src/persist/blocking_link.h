// A blocking connection to one Redis node, for the main thread's startup checks and Sentinel
// questions (never on a loop thread): connect with a deadline, TLS when asked, one command at a
// time, every read and write bounded by the same timeout. It replaces hiredis's redisContext,
// which (in 0.14) speaks no TLS.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "io/tls.h"
#include "persist/endpoint.h"

struct redisReader;
struct redisReply;

namespace deferq::persist {

// A reply owned by its holder.
struct ReplyDeleter {
  void operator()(redisReply* r) const;
};
using OwnedReply = std::unique_ptr<redisReply, ReplyDeleter>;

class BlockingLink {
 public:
  BlockingLink() = default;
  ~BlockingLink();
  BlockingLink(const BlockingLink&) = delete;
  BlockingLink& operator=(const BlockingLink&) = delete;

  // Connects to `ep` within timeout_ms; with `tls`, runs the TLS handshake too (`peer_name` is
  // the name the certificate must carry: the configured host). False with *error.
  bool Connect(const Endpoint& ep, int timeout_ms, std::shared_ptr<io::TlsContext> tls,
               std::string_view peer_name, std::string* error);
  // Sends one request (RESP, already formatted) and reads its reply; nullptr with *error when
  // the node did not answer in time, closed, or sent no valid RESP.
  OwnedReply Call(std::string_view request, std::string* error);
  OwnedReply Command(std::initializer_list<std::string_view> args, std::string* error);

 private:
  bool SendAll(std::string_view bytes, std::string* error);
  bool ReadSome(std::string* error);  // one recv, fed (decrypted) to the reader

  int fd_ = -1;
  redisReader* reader_ = nullptr;
  std::unique_ptr<io::TlsStream> tls_;
};

}  // namespace deferq::persist
