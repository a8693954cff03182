#include "queue/tenancy/tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

namespace deferq::queue {

namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string NewToken() {
  unsigned char raw[kTokenBytes];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return {};
  return Hex(raw, sizeof(raw));
}

std::string DigestHex(std::string_view secret) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(secret.data(), secret.size(), md, &len, EVP_sha256(), nullptr) != 1) return {};
  return Hex(md, len);
}

bool DigestEquals(std::string_view a, std::string_view b) {
  // Digests have a fixed length, so comparing lengths first reveals nothing.
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace deferq::queue
