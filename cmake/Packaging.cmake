# Debian packages built from the tree with CPack's DEB generator (`cpack -G DEB` in the build directory; README,
# "Packages"). One package per install component:
#   lib   -> libhalite<SOVERSION>  the shared library (Debian names a library package after its SONAME) and its
#                                   image server daemon, PREFIX/libexec/halite1/halite-image-server
#   dev   -> libhalite-dev         headers (the C API's halite_c.h among them), libhalite.so, halite.pc, CMake config
#   tools -> halite-tools          hlt-save, hlt-restore (`serve` runs the library's daemon) and the systemd units
#   python -> python3-halite       the Python bindings (python/)
# Depends of the packages holding binaries come from dpkg-shlibdeps (CPACK_DEBIAN_PACKAGE_SHLIBDEPS).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME halite)
set(CPACK_PACKAGE_VENDOR "libhalite")
set(CPACK_PACKAGE_CONTACT "libhalite developers <libhalite@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# The summary line of every package (CPack 3.25 has no per-component one); each package's own description follows.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "VM checkpoints with locality blocks and lazy restore")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # RelWithDebInfo binaries: the packages ship them stripped
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # NAME_VERSION-RELEASE_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(HALITE_DEB_VERSION "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")

set(HALITE_LIB_PACKAGE "libhalite${HALITE_SOVERSION}")
set(CPACK_DEBIAN_LIB_PACKAGE_NAME ${HALITE_LIB_PACKAGE})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# A shlibs file, so that packages linking libhalite get their Depends from it (CPack 3.25 has no per-component
# form of these; only the package holding a shared library gets the file). CPack adds the ldconfig calls itself.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_COMPONENT_LIB_DESCRIPTION "libhalite: VM checkpoints with locality blocks and lazy restore (shared library)
The checkpoint format's reader and writer, the lazy restore engine (userfaultfd), storage backends (files,
s3://, rados://), the C API, and the host image server daemon (halite-image-server) that restores with shared
memory start.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libhalite-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# halite.pc's Requires.private and haliteConfig.cmake's find_dependency() must resolve for a consumer to build.
set(HALITE_DEV_DEPENDS
  "${HALITE_LIB_PACKAGE} (= ${HALITE_DEB_VERSION}), pkg-config, libzstd-dev, libxxhash-dev, libsodium-dev, libssl-dev, libfmt-dev")
if(URING_FOUND)
  string(APPEND HALITE_DEV_DEPENDS ", liburing-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ${HALITE_DEV_DEPENDS})
set(CPACK_COMPONENT_DEV_DESCRIPTION "libhalite: development files
Headers (C++ API under halite/, the C API halite/halite_c.h), libhalite.so, the pkg-config file halite.pc and
the CMake package (find_package(halite)).")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME halite-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION admin)
# The tools link libhalite statically, but their image server is the library package's daemon (hlt-restore serve
# and --memory shared run PREFIX/libexec/halite1/halite-image-server), given flags of the same version.
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${HALITE_LIB_PACKAGE} (= ${HALITE_DEB_VERSION})")
# What the tools run at run time, beyond the libraries dpkg-shlibdeps finds: QEMU (hlt-restore qemu launches it),
# qemu-img (disk overlays of libvirt restores), fusermount3 and /etc/fuse.conf (the image server, unless root).
set(CPACK_DEBIAN_TOOLS_PACKAGE_RECOMMENDS "qemu-system-x86, qemu-utils, fuse3")
set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS "libvirt-daemon-system, xen-utils-common")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "libhalite: hlt-save, hlt-restore and the host image server
hlt-save saves QEMU, libvirt and Xen guests and raw memory images into checkpoints; hlt-restore restores them
lazily, serves them to clones (`hlt-restore serve`: the library's image server daemon) and inspects them. systemd units:
halite-image-server@.service (one image server per checkpoint) and halite-restore@.service (a supervised
libvirt restore).")

set(CPACK_COMPONENTS_ALL lib dev tools)
# python3-halite: the Python bindings (python/, package `halite`), pure Python over the C API with cffi's ABI mode:
# Architecture all, no shared objects (so no dpkg-shlibdeps figures); it loads libhalite.so.N by SONAME, hence the
# library package (and cffi) in its Depends.
if(HALITE_WITH_PYTHON)
  list(APPEND CPACK_COMPONENTS_ALL python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-halite)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "${HALITE_LIB_PACKAGE} (>= ${HALITE_DEB_VERSION}), python3 (>= 3.9), python3-cffi")
  set(CPACK_COMPONENT_PYTHON_DESCRIPTION "libhalite: Python bindings (package halite)
Read, verify and write checkpoints, keys of encrypted checkpoints and lazy restore into the process's memory from
Python, through the C API of libhalite with cffi; typed, errors as one exception class per error code.")
endif()

include(CPack)
