// hlt-save rekey: a checkpoint re-sealed under another key, its compressed content untouched (checkpoint_rekey.h).
#include "halite/checkpoint_rekey.h"

#include <chrono>
#include <filesystem>

#include "codec/aead.h"
#include "codec/hashing.h"
#include "format/encryption_codec.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/checkpoint_location.h"
#include "reader/reader_impl.h"

namespace halite {

class CheckpointRekeyer {
 public:
  CheckpointRekeyer(const CheckpointReader& input, const RekeyOptions& options)
      : in_(*input.impl_), input_(input), options_(options) {}

  Result<RekeySummary> Run(const std::string& output);

 private:
  Status Prepare(const std::string& output);
  Status WriteBlocks();
  Status WriteBlobs();
  Status ResealSkippable();
  Result<std::string> PathHint(const std::string& output) const;

  const CheckpointReader::Impl& in_;
  const CheckpointReader& input_;
  const RekeyOptions& options_;
  std::unique_ptr<AppendSink> sink_;
  std::shared_ptr<const format::FileCipher> cipher_;
  format::IndexModel model_;
  format::Header header_;
  uint64_t seed_ = 0;
};

namespace {

FileId NewFileId() {
  FileId id;
  codec::RandomBytes(id);
  if (id == FileId{}) id[0] = 1;
  return id;
}

std::string Directory(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

}  // namespace

// Format-spec 12: the PARENT path hint is relative to the directory of the file that holds it.
Result<std::string> CheckpointRekeyer::PathHint(const std::string& output) const {
  const std::string& hint = in_.model_.parent->path_hint;
  if (Directory(output) == Directory(in_.file_->name())) return hint;
  if (IsObjectStoreUri(output) || IsObjectStoreUri(input_.parent()->name())) {
    return Status::InvalidArgument(output + ": a rekeyed child stays beside its input on an object store (same bucket "
                                            "or pool and key prefix), so that its parent stays where it names it");
  }
  namespace fs = std::filesystem;
  std::error_code ec1, ec2;
  const fs::path out_dir = fs::absolute(fs::path(output), ec1).parent_path().lexically_normal();
  const fs::path parent = fs::absolute(fs::path(input_.parent()->name()), ec2).lexically_normal();
  if (ec1 || ec2) return Status::IoError("cannot make the parent's path relative to " + output);
  std::string relative = parent.lexically_relative(out_dir).generic_string();
  if (!format::IsValidPathHint(relative)) {
    return Status::InvalidArgument(input_.parent()->name() + ": its path relative to " + out_dir.generic_string() +
                                   " cannot be a path hint");
  }
  return relative;
}

Status CheckpointRekeyer::Prepare(const std::string& output) {
  const Cipher cipher = options_.cipher == Cipher::kAuto ? AutoCipher() : options_.cipher;
  header_.file_id = NewFileId();
  header_.flags = format::kHeaderEncrypted;
  HLT_ASSIGN_OR_RETURN(header_.key_id, ComputeKeyId(options_.key));
  HLT_ASSIGN_OR_RETURN(cipher_, format::FileCipher::Derive(options_.key, header_.file_id, uint32_t(cipher)));
  seed_ = format::FileSeed(header_.file_id);
  // The input's index as its key's holder reads it: sealed sections opened. Payload entries are replaced below.
  model_ = in_.model_;
  model_.mac = {};
  model_.encryption = {true, uint32_t(cipher), {}};
  model_.blocks.clear();
  model_.blobs.clear();
  if (model_.parent) {
    HLT_ASSIGN_OR_RETURN(model_.parent->path_hint, PathHint(output));
  }
  header_.minor = format::MinimumMinorVersion(model_);
  HLT_ASSIGN_OR_RETURN(sink_, CreateCheckpointSink(output, options_.sink));
  auto hb = format::EncodeHeader(header_);
  return sink_->Append(hb);
}

Status CheckpointRekeyer::WriteBlocks() {
  const auto& blocks = in_.model_.blocks;
  for (uint32_t b = 0; b < blocks.size(); ++b) {
    HLT_ASSIGN_OR_RETURN(CheckpointReader::Impl::BlockContent content, in_.ReadBlockContent(b));
    BlockInfo info = blocks[b];
    std::vector<uint8_t> sealed = format::SealBlock(*cipher_, b, info, content.bytes, content.frames);
    codec::Wipe(content.bytes);
    info.offset = sink_->position();
    info.stored_length = uint32_t(sealed.size());
    info.checksum = codec::Xxh3_64(sealed, format::BlockSeed(seed_, b));
    HLT_RETURN_IF_ERROR(sink_->Append(sealed));
    model_.blocks.push_back(info);
    if (options_.progress) options_.progress(b + 1, blocks.size());
  }
  return Status::Ok();
}

Status CheckpointRekeyer::WriteBlobs() {
  for (uint32_t i = 0; i < in_.model_.blobs.size(); ++i) {
    HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> content, in_.ReadBlobContent(i));
    BlobInfo info = in_.model_.blobs[i];
    info.stored_length = content.size() + format::kSealTagSize;
    std::vector<uint8_t> sealed(info.stored_length);
    cipher_->Seal(format::BlobUnitAd(i, info), content, sealed);
    codec::Wipe(content);
    info.offset = sink_->position();
    info.checksum = codec::Xxh3_64(sealed, format::BlobSeed(seed_, i));
    HLT_RETURN_IF_ERROR(sink_->Append(sealed));
    model_.blobs.push_back(std::move(info));
  }
  return Status::Ok();
}

// A skippable section this library does not know, sealed by the input's writer: opened with the old key, sealed
// with the new one (13.4: its associated data names only its type, flags and length).
Status CheckpointRekeyer::ResealSkippable() {
  for (format::SkippableSection& s : model_.skippable_sections) {
    if (!(s.flags & format::kSectionFlagSealed)) continue;
    if (!in_.cipher_ || s.body.size() < format::kSealTagSize) {
      return Status::Corrupt(in_.file_->name() + ": a SEALED skippable section in a file that cannot have one");
    }
    std::vector<uint8_t> plain(s.body.size() - format::kSealTagSize);
    if (!in_.cipher_->Open(format::SectionUnitAd(s.type, s.flags, s.body.size()), s.body, plain)) {
      return Status::AuthFailed(in_.file_->name() + ": sealed skippable section " + std::to_string(s.type) +
                                ": authentication failed");
    }
    cipher_->Seal(format::SectionUnitAd(s.type, s.flags, s.body.size()), plain, s.body);
  }
  return Status::Ok();
}

Result<RekeySummary> CheckpointRekeyer::Run(const std::string& output) {
  const auto t0 = std::chrono::steady_clock::now();
  HLT_RETURN_IF_ERROR(Prepare(output));
  HLT_RETURN_IF_ERROR(WriteBlocks());
  HLT_RETURN_IF_ERROR(WriteBlobs());
  HLT_RETURN_IF_ERROR(ResealSkippable());
  const format::SectionSealer seal = [this](uint32_t type, uint32_t flags, std::span<const uint8_t> plain) {
    std::vector<uint8_t> sealed(plain.size() + format::kSealTagSize);
    cipher_->Seal(format::SectionUnitAd(type, flags, sealed.size()), plain, sealed);
    return sealed;
  };
  std::vector<uint8_t> index = format::EncodeIndex(model_, &seal);
  const auto hb = format::EncodeHeader(header_);
  const format::IndexTag tag = format::ComputeIndexTag(*cipher_, hb, index);
  const auto section = format::EncodeEncryptionSection(model_.encryption.cipher, tag);
  index.insert(index.end(), section.begin(), section.end());
  format::Footer footer;
  footer.index_offset = sink_->position();
  footer.index_length = index.size();
  footer.file_size = footer.index_offset + index.size() + format::kFooterSize;
  footer.file_id = header_.file_id;
  footer.index_checksum = codec::Xxh3_64(index, seed_);
  HLT_RETURN_IF_ERROR(sink_->Append(index));
  HLT_RETURN_IF_ERROR(sink_->Append(format::EncodeFooter(footer)));
  HLT_RETURN_IF_ERROR(sink_->Commit());
  RekeySummary sum;
  sum.blocks = model_.blocks.size();
  sum.blobs = model_.blobs.size();
  sum.file_bytes = footer.file_size;
  sum.file_id = header_.file_id;
  sum.key_id = header_.key_id;
  sum.cipher = static_cast<Cipher>(model_.encryption.cipher);
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

Result<RekeySummary> RekeyCheckpoint(const std::string& input, const std::string& output,
                                     const RekeyOptions& options) {
  if (input == output) return Status::InvalidArgument(output + ": the output must differ from the input");
  ReaderOptions reader = options.reader;
  reader.open_without_key = false;
  HLT_ASSIGN_OR_RETURN(auto opened, CheckpointReader::Open(input, reader));
  return CheckpointRekeyer(*opened, options).Run(output);
}

}  // namespace halite
