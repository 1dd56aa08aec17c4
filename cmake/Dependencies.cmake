# Every third-party library comes from a Debian bookworm package (scripts/install-deps installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(URING IMPORTED_TARGET liburing)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
# AES-256-GCM of encrypted checkpoints (src/codec/aead.cc): OpenSSL's, 2.4x libsodium's here, and on any CPU.
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
# Object-store backends (optional): libcurl4-openssl-dev for s3://, librados-dev for rados://.
pkg_check_modules(CURL IMPORTED_TARGET libcurl)
find_path(RADOS_INCLUDE_DIR rados/librados.h)
find_library(RADOS_LIBRARY rados)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 2 REQUIRED)  # the tools' argument parser (libcli11-dev)
if(HALITE_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()
