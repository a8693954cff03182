#include "io/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <utility>

namespace deferq::io {

namespace {

// Every reason OpenSSL queued on this thread, oldest first, and the queue left empty.
std::string DrainErrors() {
  std::string out;
  char buf[256];
  while (unsigned long e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof(buf));
    // "error:0A000086:SSL routines::certificate verify failed": the reason is after the last ':'.
    std::string_view text(buf);
    const size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) text.remove_prefix(colon + 1);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out;
}

bool LoadCertificate(SSL_CTX* ctx, const TlsFiles& files, std::string* error) {
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    *error = "cannot load the TLS certificate " + files.cert_file + ": " + DrainErrors();
    return false;
  }
  const std::string& key = files.key_file.empty() ? files.cert_file : files.key_file;
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    *error = "cannot load the TLS key " + key + ": " + DrainErrors();
    return false;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    *error = "the TLS key " + key + " does not match the certificate " + files.cert_file + ": " +
             DrainErrors();
    return false;
  }
  return true;
}

SSL_CTX* NewContext(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               (server ? SSL_OP_CIPHER_SERVER_PREFERENCE : 0));
  // An idle connection gives its read and write buffers back (~34 KB each otherwise): 10,000
  // consumers blocked over TLS should not cost 680 MB.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  return ctx;
}

}  // namespace

std::shared_ptr<TlsContext> TlsContext::ForServer(const TlsFiles& files, std::string* error) {
  ERR_clear_error();
  SSL_CTX* ctx = NewContext(true);
  if (ctx == nullptr) {
    *error = "cannot create a TLS context: " + DrainErrors();
    return nullptr;
  }
  std::shared_ptr<TlsContext> out(new TlsContext(ctx, true));
  if (files.cert_file.empty()) {
    *error = "a TLS listener needs a certificate (tls.cert_file)";
    return nullptr;
  }
  if (!LoadCertificate(ctx, files, error)) return nullptr;
  static const unsigned char kSessionContext[] = "deferq";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  if (!files.ca_file.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.ca_file.c_str());
    if (names == nullptr ||
        SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1) {
      if (names != nullptr) sk_X509_NAME_pop_free(names, X509_NAME_free);
      *error = "cannot load the TLS client CA file " + files.ca_file + ": " + DrainErrors();
      return nullptr;
    }
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return out;
}

std::shared_ptr<TlsContext> TlsContext::ForClient(const TlsFiles& files, std::string* error) {
  ERR_clear_error();
  SSL_CTX* ctx = NewContext(false);
  if (ctx == nullptr) {
    *error = "cannot create a TLS context: " + DrainErrors();
    return nullptr;
  }
  std::shared_ptr<TlsContext> out(new TlsContext(ctx, false));
  const bool loaded = files.ca_file.empty()
                          ? SSL_CTX_set_default_verify_paths(ctx) == 1
                          : SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) == 1;
  if (!loaded) {
    *error = "cannot load the TLS CA file " +
             (files.ca_file.empty() ? std::string("(the system's)") : files.ca_file) + ": " +
             DrainErrors();
    return nullptr;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!files.cert_file.empty() && !LoadCertificate(ctx, files, error)) return nullptr;
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsStream::TlsStream(std::shared_ptr<TlsContext> context, std::string_view peer_name)
    : context_(std::move(context)) {
  ssl_ = SSL_new(context_->get());
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  if (ssl_ == nullptr || in_ == nullptr || out_ == nullptr) {
    if (in_ != nullptr) BIO_free(in_);
    if (out_ != nullptr) BIO_free(out_);
    in_ = out_ = nullptr;
    failed_ = true;
    error_ = "cannot create a TLS session: " + DrainErrors();
    return;
  }
  // A memory BIO that runs dry reads as "retry later", not as end of file.
  BIO_set_mem_eof_return(in_, -1);
  SSL_set_bio(ssl_, in_, out_);  // the session owns both now
  if (context_->server()) {
    SSL_set_accept_state(ssl_);
    return;
  }
  SSL_set_connect_state(ssl_);
  if (!peer_name.empty()) {
    const std::string name(peer_name);
    unsigned char addr[16];
    const bool ip =
        inet_pton(AF_INET, name.c_str(), addr) == 1 || inet_pton(AF_INET6, name.c_str(), addr) == 1;
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl_, name.c_str());
      SSL_set1_host(ssl_, name.c_str());
    }
  }
  std::string none;
  Pump(&none);  // the client hello
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

bool TlsStream::Fail(int ret, std::string_view during) {
  failed_ = true;
  const int code = SSL_get_error(ssl_, ret);
  std::string why = DrainErrors();
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    if (!why.empty()) why += "; ";
    why += "certificate: ";
    why += X509_verify_cert_error_string(verify);
  }
  if (why.empty()) {
    why = code == SSL_ERROR_SYSCALL ? "the peer ended the connection"
                                    : "error " + std::to_string(code);
  }
  error_ = std::string(during) + ": " + why;
  return false;
}

bool TlsStream::Pump(std::string* plain) {
  if (failed_) return false;
  if (!established_) {
    const int r = SSL_do_handshake(ssl_);
    if (r != 1) {
      const int code = SSL_get_error(ssl_, r);
      if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) return true;
      return Fail(r, "TLS handshake failed");
    }
    established_ = true;
    if (!waiting_.empty()) {
      std::string w;
      w.swap(waiting_);
      if (!Write(w)) return false;
    }
  }
  // The error queue is empty here: every failure drains it (Fail), and clearing it per call is
  // a measurable share of a small request's cost in OpenSSL 3.
  char buf[16 * 1024];  // one record at most; a string resized by 16 KiB would zero-fill it
  for (;;) {
    size_t got = 0;
    const int r = SSL_read_ex(ssl_, buf, sizeof(buf), &got);
    if (r == 1) {
      plain->append(buf, got);
      continue;
    }
    const int code = SSL_get_error(ssl_, r);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) return true;
    if (code == SSL_ERROR_ZERO_RETURN) {
      peer_closed_ = true;
      return true;
    }
    return Fail(r, "TLS read failed");
  }
}

bool TlsStream::Receive(const char* data, size_t n, std::string* plain) {
  if (failed_) return false;
  if (n > 0 && BIO_write(in_, data, static_cast<int>(n)) != static_cast<int>(n)) {
    failed_ = true;
    error_ = "TLS: out of memory";
    return false;
  }
  return Pump(plain);
}

bool TlsStream::Write(std::string_view plain) {
  if (failed_) return false;
  if (plain.empty()) return true;
  if (!established_) {
    waiting_.append(plain);
    return true;
  }
  size_t written = 0;
  const int r = SSL_write_ex(ssl_, plain.data(), plain.size(), &written);
  if (r != 1) return Fail(r, "TLS write failed");
  return true;
}

size_t TlsStream::TakeOutput(std::string* out) {
  if (out_ == nullptr) return 0;
  const size_t pending = BIO_ctrl_pending(out_);
  if (pending == 0) return 0;
  const size_t old = out->size();
  out->resize(old + pending);
  const int got = BIO_read(out_, out->data() + old, static_cast<int>(pending));
  out->resize(old + static_cast<size_t>(got > 0 ? got : 0));
  return out->size() - old;
}

bool TlsStream::has_output() const { return out_ != nullptr && BIO_ctrl_pending(out_) > 0; }

void TlsStream::Close() {
  if (ssl_ == nullptr || failed_ || !established_) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

}  // namespace deferq::io
