// Builds against the installed tree only: writes a checkpoint and reads a page back.
#include <halite/checkpoint_reader.h>
#include <halite/checkpoint_writer.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto w = halite::CheckpointWriter::Create(argv[1], {});
  if (!w) return 1;
  auto r = (*w)->AddRegion("ram", 0, 8 * 4096);
  std::vector<uint8_t> page(4096, 0x42);
  if (!r || !(*w)->PutPage(*r, 3, page).ok() || !(*w)->Finish()) return 1;
  auto rd = halite::CheckpointReader::Open(argv[1]);
  if (!rd) return 1;
  std::vector<uint8_t> back(4096);
  if (!(*rd)->ReadPage(3, back).ok() || back != page) return 1;
  std::printf("consumer: OK\n");
  return 0;
}
