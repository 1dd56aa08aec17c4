# The fuzz targets, shared by fuzz/CMakeLists.txt (libFuzzer build) and tests/hardening/CMakeLists.txt (the
# plain replay under ctest). Each target is fuzz/<name>.cc defining LLVMFuzzerTestOneInput and linking only
# halite and its internal headers. HALITE_FUZZ_VECTOR_TARGETS also get the format test vectors as seeds.
set(HALITE_FUZZ_TARGETS
  checkpoint_read_fuzz
  header_decode_fuzz
  footer_decode_fuzz
  index_decode_fuzz
  block_decode_fuzz
  hint_files_fuzz
  writer_roundtrip_fuzz
)
set(HALITE_FUZZ_VECTOR_TARGETS checkpoint_read_fuzz)

# Integration targets, wired in when their source and their library exist: NAME|SOURCE|LIBRARY|SEED_DIR
# (paths relative to the source root; SEED_DIR may be empty).
set(HALITE_FUZZ_INTEGRATION_TARGETS
  "qemu_stream_fuzz|qemu-integration/fuzz/qemu_stream_fuzz.cc|halite_qemu|"
  "qmp_framer_fuzz|qemu-integration/fuzz/qmp_framer_fuzz.cc|halite_qemu|qemu-integration/fuzz/qmp-seeds"
  "xen_stream_fuzz|xen-integration/fuzz/xen_stream_fuzz.cc|halite_xen|xen-integration/test-vectors"
  "libvirt_blobs_fuzz|libvirt-integration/fuzz/libvirt_blobs_fuzz.cc|halite_libvirt|libvirt-integration/fuzz/seeds"
)
