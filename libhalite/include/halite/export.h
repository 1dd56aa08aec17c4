/* HALITE_EXPORT marks the public API. libhalite.so is built with -fvisibility=hidden, so what lacks the mark
 * (the format codec, zstd/xxHash/liburing glue, the engine's internals) is not exported and cannot be linked
 * against by accident. C and C++ (halite_c.h uses it too). */
#ifndef HALITE_EXPORT_H_
#define HALITE_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define HALITE_EXPORT __attribute__((visibility("default")))
/* For the private implementation classes nested in exported ones (which would otherwise inherit the export). */
#define HALITE_HIDDEN __attribute__((visibility("hidden")))
#else
#define HALITE_EXPORT
#define HALITE_HIDDEN
#endif

#endif /* HALITE_EXPORT_H_ */
