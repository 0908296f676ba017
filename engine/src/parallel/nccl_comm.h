// NcclComm, the communicator over NCCL for device buffers (comm.h): the private face of
// nccl_comm.cpp, the one file that includes <nccl.h>. Every pointer handed to an NcclComm is
// a device pointer of the rank's current device. Non-goals: host buffers (use the bootstrap
// MpiComm), tags (NCCL matches point-to-point messages between a pair in issue order; the
// tag argument is ignored).
//
// Streams: operations run on the communicator's own stream. The caller makes its buffers
// ready first (synchronises the compute stream that wrote them); blocking calls return when
// the operation has completed on the device, async calls when it is enqueued, and their
// request's wait() synchronises with it.
#pragma once

#include <memory>

#include "lattice/comm.h"

namespace lattice {

// A communicator over the ranks of `bootstrap` (a CPU communicator: MpiComm, or LocalComm
// for one rank). Rank 0 of bootstrap makes the ncclUniqueId and broadcasts it through
// bootstrap; NcclComm keeps bootstrap for split() and abort(). The device must be selected
// first (select_device_for_rank). Collective over bootstrap.
Result<std::unique_ptr<Comm>> make_nccl_comm(std::unique_ptr<Comm> bootstrap);

// cudaSetDevice(local rank % devices) for this process (device/local_rank.h); returns the
// device chosen, or an error naming the local rank and the device count.
Result<int> select_device_for_rank();

}  // namespace lattice
