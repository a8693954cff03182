// TLS over the ring's own buffers (OpenSSL, Debian's libssl): a TlsStream is one connection's
// TLS state machine between two memory BIOs. The connection keeps doing its io_uring recv and
// send; it hands what it received to Receive() and sends what TakeOutput() gives it. No socket is
// ever given to OpenSSL, so no OpenSSL call blocks or touches the fd.
//
// Why not kTLS: the kernel's TLS needs the handshake done in user space anyway, the `tls` module
// loaded, and an OpenSSL built with ktls (Debian 12's is not); docs/operations.md "TLS" has the
// measurement that chose this path.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

struct ssl_ctx_st;
struct ssl_st;
struct bio_st;

namespace deferq::io {

// What a context is built from. Paths are PEM files.
struct TlsFiles {
  std::string cert_file;  // a certificate chain (server: required; client: optional)
  std::string key_file;   // its private key
  // Server: when set, clients must present a certificate signed by it. Client: the CAs the
  // server's certificate is checked against (empty: the system's).
  std::string ca_file;
};

// An SSL_CTX: TLS 1.2 or later only. Shared by every stream made from it; a certificate
// rotation builds a new context, and streams keep the one they were made with.
class TlsContext {
 public:
  // nullptr with *error ("cannot load the TLS certificate /x.pem: ...") when a file is missing,
  // unreadable or does not match.
  static std::shared_ptr<TlsContext> ForServer(const TlsFiles& files, std::string* error);
  static std::shared_ptr<TlsContext> ForClient(const TlsFiles& files, std::string* error);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool server() const { return server_; }
  ssl_ctx_st* get() const { return ctx_; }

 private:
  TlsContext(ssl_ctx_st* ctx, bool server) : ctx_(ctx), server_(server) {}
  ssl_ctx_st* ctx_;
  bool server_;
};

class TlsStream {
 public:
  // A server stream waits for the peer's hello; a client stream starts its own at once (take
  // its output and send it). `peer_name` (client only): the name sent as SNI and checked against
  // the server's certificate (an IP address is checked as one and sent as no SNI).
  explicit TlsStream(std::shared_ptr<TlsContext> context, std::string_view peer_name = {});
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Bytes received from the peer. Appends the plaintext they complete to *plain. False on a
  // failure (a refused certificate, a bad record, the peer's alert): error() says what, and the
  // connection should send TakeOutput() (the alert) and close.
  bool Receive(const char* data, size_t n, std::string* plain);
  // Plaintext to send; before the handshake is done it waits inside the stream. False on a
  // failure, as Receive.
  bool Write(std::string_view plain);
  // Appends to *out what must go to the peer (handshake, records, alerts) and returns its size.
  size_t TakeOutput(std::string* out);
  bool has_output() const;
  // Queues close_notify (TakeOutput carries it).
  void Close();

  bool established() const { return established_; }
  // The peer ended the session with close_notify.
  bool peer_closed() const { return peer_closed_; }
  const std::string& error() const { return error_; }

 private:
  bool Pump(std::string* plain);
  bool Fail(int ret, std::string_view during);

  std::shared_ptr<TlsContext> context_;
  ssl_st* ssl_ = nullptr;
  bio_st* in_ = nullptr;   // what the peer sent, for OpenSSL to read
  bio_st* out_ = nullptr;  // what OpenSSL wrote, for the peer
  std::string waiting_;    // plaintext written before the handshake was done
  bool established_ = false;
  bool peer_closed_ = false;
  bool failed_ = false;
  std::string error_;
};

}  // namespace deferq::io
