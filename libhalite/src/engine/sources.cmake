# The lazy restore engine and its userfaultfd sink (included from libhalite/CMakeLists.txt).
# Only src/engine/userfaultfd.cc includes <linux/userfaultfd.h>.
target_sources(halite_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/event_timeline.cc
  ${CMAKE_CURRENT_LIST_DIR}/restore_engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/streamed_fault.cc
  ${CMAKE_CURRENT_LIST_DIR}/host_pages.cc
  ${CMAKE_CURRENT_LIST_DIR}/background_loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/loader_batch.cc
  ${CMAKE_CURRENT_LIST_DIR}/preload_batches.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_stats.cc
  ${CMAKE_CURRENT_LIST_DIR}/userfaultfd.cc
  ${CMAKE_CURRENT_LIST_DIR}/userfaultfd_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/lazy_memory.cc
)
