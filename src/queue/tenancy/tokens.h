// Namespace tokens (docs/commands.md, connection and admin commands): random, shown once, stored
// and compared only as SHA-256 digests. OpenSSL's libcrypto provides the randomness (RAND_bytes),
// the hash and the constant-time comparison (CRYPTO_memcmp); nothing here is hand-written
// cryptography.
#pragma once

#include <string>
#include <string_view>

namespace deferq::queue {

// Random bytes in a new token: 192 bits, well over the 128 the spec asks for.
inline constexpr size_t kTokenBytes = 24;
// Hex characters of a digest's id as TOKEN LIST shows it (and TOKEN REVOKE accepts).
inline constexpr size_t kTokenIdLength = 16;

// A new token: kTokenBytes random bytes in lower-case hex (safe in redis:// URLs). Empty when
// the random generator failed (the caller answers an error; nothing is stored).
std::string NewToken();

// SHA-256 of `secret`, as 64 lower-case hex characters.
std::string DigestHex(std::string_view secret);

// Equality of two digests in time independent of where they differ (CRYPTO_memcmp).
bool DigestEquals(std::string_view a, std::string_view b);

}  // namespace deferq::queue
