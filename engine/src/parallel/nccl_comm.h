// NcclComm, the communicator over NCCL for device buffers (comm.h): the private face of
// nccl_comm.cpp, the one file that includes <nccl.h>. Every pointer handed to an NcclComm is
// a device pointer of the rank's current device. Non-goals: host buffers (use the bootstrap
// MpiComm), tags (NCCL matches point-to-point messages between a pair in issue order; the
// tag argument is ignored).
//
// Streams: operations run on the communicator's own stream. The caller makes its buffers
// ready first (synchronises the compute stream that wrote them); blocking calls return when
// the operation has completed on the device, async calls when it is enqueued, and their
// request's wait() synchronises with it. The stream-ordered members (comm.h) are the
// exception: they queue on the cudaStream_t of a CUDA device's stream (tensor and sequence
// parallelism's collectives and the pipeline's messages, ordered with compute) and refuse a
// stream without one (a CPU device's); the CUDA device's synchronize() watches them
// (watched_stream_wait below).
// In place: reduce_scatter's recv may be this rank's block of send (NCCL's in-place rule;
// comm.h does not promise it for every Comm), and all_gather's send this rank's block of recv.
#pragma once

#include <memory>
#include <string>

#include "lattice/comm.h"

struct CUstream_st;  // cudaStream_t names a CUstream_st*; no CUDA header needed here

namespace lattice {

// A communicator over the ranks of `bootstrap` (a CPU communicator: MpiComm, or LocalComm
// for one rank). Rank 0 of bootstrap makes the ncclUniqueId and broadcasts it through
// bootstrap; NcclComm keeps bootstrap for split() and abort(). The device must be selected
// first (select_device_for_rank). Collective over bootstrap. A failure on any rank before
// NCCL's own initialisation makes every rank return an error (none waits for the failed one);
// a failure inside ncclCommInitRank ends the job through bootstrap's abort().
Result<std::unique_ptr<Comm>> make_nccl_comm(std::unique_ptr<Comm> bootstrap);

// Waits on the host until everything queued on `stream` (a cudaStream_t of this process's
// device) has run, as NcclComm's blocking calls wait (Note [collective timeout] on the GPU,
// nccl_comm.cpp): cudaStreamQuery paced as every wait, and every 100 ms each NcclComm alive in
// this process (a process drives one device, so they are its device's) is asked for an
// asynchronous error and /proc for a dead peer. Either, or a wait past the communication
// timeout while an NcclComm exists, ends the job through that communicator's abort, the message
// naming `what` ("the synchronisation of the compute stream on NVIDIA H200, device 0") and the
// groups. Without any NcclComm it only waits: there is no peer to hang on. Returns CUDA's error
// for the stream, if any. For CudaDevice::synchronize (cuda_device.cpp), so that a hang in a
// stream-ordered collective or message ends the job as a hang in a blocking call does.
Status watched_stream_wait(CUstream_st* stream, const std::string& what);

// cudaSetDevice(local rank % devices) for this process (device/local_rank.h); returns the
// device chosen, or an error naming the local rank and the device count.
Result<int> select_device_for_rank();

}  // namespace lattice
