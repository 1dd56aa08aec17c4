// Small hand-built QEMU migration streams for tests and fuzz seeds. They are assembled byte by byte here, not
// with MigrationStreamWriter, so reader tests do not just check the writer against itself.
#ifndef HALITE_QEMU_TESTS_QEMU_TEST_STREAMS_H_
#define HALITE_QEMU_TESTS_QEMU_TEST_STREAMS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace halite::qemu::testing {

struct SampleStreamOptions {
  bool with_vmdesc = true;
  bool with_ram_end = true;        // false: like a background snapshot (no RAM END)
  bool scan_jump = false;          // send page 5 of block 0 first (a guest write during the save)
  bool capabilities_subsection = false;  // configuration lists x-ignore-shared (block list then has addresses)
};

// Two blocks, "pc.ram" (16 pages) and "pc.bios" (2 pages). Page p of block b holds SamplePageByte(b, p)
// everywhere, except that every 4th page of pc.ram is a ZERO record. CONTINUE is used within and across
// sections. Two device FULL sections follow, then EOF and (optionally) VMDESC.
std::string BuildSampleStream(const SampleStreamOptions& options = {});
uint8_t SamplePageByte(uint32_t block, uint64_t page);
bool SamplePageIsZero(uint32_t block, uint64_t page);
// The device state bytes BuildSampleStream puts between the RAM and EOF.
std::string SampleDeviceState();
std::string SampleVmdesc();

// A return path holding PONG 7, REQ_PAGES_ID pc.ram 0x3000+0x1000, REQ_PAGES 0x5000+0x1000, SHUT 0.
std::string BuildSampleReturnPath();

}  // namespace halite::qemu::testing

#endif  // HALITE_QEMU_TESTS_QEMU_TEST_STREAMS_H_
