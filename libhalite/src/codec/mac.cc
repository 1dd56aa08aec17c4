#include "codec/mac.h"

#include <sodium.h>

#include <mutex>

namespace halite::codec {

void Mac(const MacKey& key, std::string_view tag, std::span<const std::span<const uint8_t>> parts,
         std::span<uint8_t> out) {
  static std::once_flag init;
  std::call_once(init, [] { (void)sodium_init(); });
  crypto_generichash_state st;
  crypto_generichash_init(&st, key.data(), key.size(), out.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(tag.data()), tag.size());
  for (auto p : parts) crypto_generichash_update(&st, p.data(), p.size());
  crypto_generichash_final(&st, out.data(), out.size());
}

bool MacEqual(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace halite::codec
