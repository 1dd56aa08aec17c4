// Import: stream -> XenSaveImage (kept records, layout) + PageBatchSink (pages).
#include "halite/xen/xen_save_image.h"

namespace halite::xen {

XenImporter::XenImporter(XenSaveImage* image, PageBatchSink* sink, StreamFormat format) : image_(image), sink_(sink) {
  *image_ = XenSaveImage{};
  image_->format = format;
}

Status XenImporter::OnXlHeader(const XlHeader& h) {
  image_->xl_mandatory_flags = h.mandatory_flags;
  image_->xl_optional_flags = h.optional_flags;
  image_->xl_has_config = h.has_config;
  image_->config.assign(h.config.begin(), h.config.end());
  image_->xl_optional_tail.assign(h.optional_tail.begin(), h.optional_tail.end());
  return Status::Ok();
}

Status XenImporter::OnLibxlHeader(const LibxlHeader& h) {
  image_->libxl_options = h.options;
  return Status::Ok();
}

Status XenImporter::OnLibxlRecord(const LibxlRecord& r) {
  image_->libxl_records.push_back(KeptRecord{r.type, {r.body.begin(), r.body.end()}, 0});
  return Status::Ok();
}

Status XenImporter::OnLibxcHeaders(const LibxcHeaders& h) {
  image_->libxc = h;
  image_->libxc.offset = 0;  // a property of the input, not of the image
  return Status::Ok();
}

Status XenImporter::OnLibxcRecord(const LibxcRecord& r) {
  if (r.type == kLibxcVerify) {
    in_verify_copies_ = true;
    return Status::Ok();
  }
  // Positions count the batches we keep; the skipped verify copies all sit before the records that follow.
  uint32_t position = r.page_batches_before - static_cast<uint32_t>(stats_.verify_copy_batches);
  image_->libxc_records.push_back(KeptRecord{r.type, {r.body.begin(), r.body.end()}, position});
  return Status::Ok();
}

Status XenImporter::OnPageBatch(const PageBatch& b) {
  if (in_verify_copies_) {
    ++stats_.verify_copy_batches;
    return Status::Ok();
  }
  ++stats_.batches;
  for (const PageEntry& e : b.entries) {
    if (seen_.Insert(e.pfn)) ++stats_.resent_entries;
    if (e.data) {
      ++stats_.data_pages;
    } else if (e.type == PageType::kXtab) {
      ++stats_.xtab_entries;
    } else if (e.type == PageType::kXalloc) {
      ++stats_.xalloc_entries;
    } else {
      ++stats_.other_no_data_entries;
    }
  }
  image_->pages.AddBatch(b.entries);
  return sink_->OnPages(b);
}

Status XenImporter::OnStreamEnd() {
  // The checkpoint holds one copy per pfn, so the layout must name each pfn once too.
  if (stats_.resent_entries) image_->pages.DropSupersededEntries();
  return Status::Ok();
}

Result<XenSaveImage> ImportSaveStream(SequentialSource& source, PageBatchSink& sink, const ReadOptions& options,
                                      ImportStats* stats) {
  XenSaveImage image;
  XenImporter importer(&image, &sink, options.format);
  HLT_RETURN_IF_ERROR(ReadStream(source, importer, options));
  if (stats) *stats = importer.stats();
  return image;
}

}  // namespace halite::xen
