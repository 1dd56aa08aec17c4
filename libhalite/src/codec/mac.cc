#include "codec/mac.h"

#include <sodium.h>

#include <cerrno>
#include <mutex>
#include <optional>

namespace halite::codec {
namespace {

std::mutex init_mu;
int (*init_fn)() = sodium_init;
std::optional<Status> init_result;  // under init_mu

}  // namespace

Status InitMac() {
  std::lock_guard<std::mutex> lock(init_mu);
  if (!init_result) {
    errno = 0;
    // 0: initialised now, 1: already initialised (by us or by the program), -1: failed.
    const int rc = init_fn();
    if (rc < 0) {
      const int e = errno;
      init_result = Status::IoError("libsodium: sodium_init() failed (returned " + std::to_string(rc) +
                                        "): cannot compute or check checkpoint MACs",
                                    e);
    } else {
      init_result = Status::Ok();
    }
  }
  return *init_result;
}

void Mac(const MacKey& key, std::string_view tag, std::span<const std::span<const uint8_t>> parts,
         std::span<uint8_t> out) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, key.data(), key.size(), out.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(tag.data()), tag.size());
  for (auto p : parts) crypto_generichash_update(&st, p.data(), p.size());
  crypto_generichash_final(&st, out.data(), out.size());
}

bool MacEqual(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

void SetSodiumInitForTesting(int (*init)()) {
  std::lock_guard<std::mutex> lock(init_mu);
  init_fn = init ? init : sodium_init;
  init_result.reset();
}

}  // namespace halite::codec
