#include "queue/model/job_id.h"

#include <chrono>
#include <cstring>

namespace deferq::queue {

namespace {

constexpr char kAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

// Crockford decoding, case-insensitive, with its aliases (I, L -> 1; O -> 0). -1 if invalid.
int DecodeChar(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  if (c == 'I' || c == 'L') return 1;
  if (c == 'O') return 0;
  for (int i = 0; i < 32; ++i) {
    if (kAlphabet[i] == c) return i;
  }
  return -1;
}

}  // namespace

IdGenerator::IdGenerator() {
  std::random_device rd;
  std::seed_seq seq{
      rd(), rd(), rd(), rd(),
      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
  rng_.seed(seq);
}

GeneratedId IdGenerator::Next(uint64_t ts_ms) {
  ts_ms &= (uint64_t{1} << 48) - 1;
  if (ts_ms == last_ts_) {
    // Same millisecond: increment the previous random part so ids stay distinct.
    for (int i = 9; i >= 0; --i) {
      if (++last_.random[i] != 0) break;
    }
    return last_;
  }
  GeneratedId id;
  id.ts_ms = ts_ms;
  const uint64_t a = rng_();
  const uint64_t b = rng_();
  memcpy(id.random, &a, 8);
  memcpy(id.random + 8, &b, 2);
  last_ts_ = ts_ms;
  last_ = id;
  return id;
}

std::string EncodeIdText(const GeneratedId& id) {
  std::string out(26, '0');
  uint64_t ts = id.ts_ms;
  for (int i = 9; i >= 0; --i) {
    out[i] = kAlphabet[ts & 31];
    ts >>= 5;
  }
  // 80 random bits -> 16 characters, 40 bits (5 bytes, 8 characters) at a time.
  for (int half = 0; half < 2; ++half) {
    uint64_t v = 0;
    for (int j = 0; j < 5; ++j) v = (v << 8) | id.random[half * 5 + j];
    for (int i = 7; i >= 0; --i) {
      out[10 + half * 8 + i] = kAlphabet[v & 31];
      v >>= 5;
    }
  }
  return out;
}

bool DecodeIdText(std::string_view text, GeneratedId* out) {
  if (text.size() != 26) return false;
  uint64_t ts = 0;
  for (int i = 0; i < 10; ++i) {
    const int d = DecodeChar(text[i]);
    if (d < 0) return false;
    ts = (ts << 5) | static_cast<uint64_t>(d);
  }
  // 10 characters hold 50 bits; a valid 48-bit timestamp starts with 0-7.
  if (ts >> 48) return false;
  GeneratedId id;
  id.ts_ms = ts;
  for (int half = 0; half < 2; ++half) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      const int d = DecodeChar(text[10 + half * 8 + i]);
      if (d < 0) return false;
      v = (v << 5) | static_cast<uint64_t>(d);
    }
    for (int j = 4; j >= 0; --j) {
      id.random[half * 5 + j] = static_cast<uint8_t>(v & 0xff);
      v >>= 8;
    }
  }
  *out = id;
  return true;
}

std::string CanonicalKey(const GeneratedId& id) {
  std::string k(16, '\0');
  for (int i = 0; i < 6; ++i) k[i] = static_cast<char>((id.ts_ms >> (8 * (5 - i))) & 0xff);
  memcpy(k.data() + 6, id.random, 10);
  return k;
}

std::string CanonicalKeyOfText(std::string_view text) {
  GeneratedId id;
  // Only the canonical spelling maps to the binary form, so that an id round-trips to exactly
  // the text the client used (aliases and lower case stay custom ids).
  // A timestamp whose first byte is '#' (the year 3200s) would make the key look custom: such
  // texts stay custom ids.
  if (DecodeIdText(text, &id) && EncodeIdText(id) == text && (id.ts_ms >> 40) != '#') {
    return CanonicalKey(id);
  }
  std::string k = "#";
  k.append(text);
  return k;
}

std::string IdTextOfKey(std::string_view key) {
  if (!key.empty() && key[0] == '#') return std::string(key.substr(1));
  if (key.size() != 16) return std::string(key);
  GeneratedId id;
  for (int i = 0; i < 6; ++i) id.ts_ms = (id.ts_ms << 8) | static_cast<uint8_t>(key[i]);
  memcpy(id.random, key.data() + 6, 10);
  return EncodeIdText(id);
}

std::string DerivableSecond(std::string_view key) {
  if (key.size() != 16 || key[0] == '#') return "";
  uint64_t ts = 0;
  for (int i = 0; i < 6; ++i) ts = (ts << 8) | static_cast<uint8_t>(key[i]);
  return std::to_string(ts / 1000);
}

}  // namespace deferq::queue
