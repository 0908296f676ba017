# Run by cpack before it packages (CPACK_PROJECT_CONFIG_FILE, set in packaging.cmake).
# A build with LATTICE_NATIVE=ON uses this machine's instruction set (-march=native): the
# package then runs here but may stop with "Illegal instruction" on an older CPU.
if(CPACK_LATTICE_NATIVE)
  message(WARNING
    "lattice: this build tunes the kernels for this machine's CPU (LATTICE_NATIVE=ON); "
    "configure with -DLATTICE_NATIVE=OFF for a package to give to other machines")
endif()
