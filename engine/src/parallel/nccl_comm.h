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
// stream without one (a CPU device's). The free *_on_stream functions below wrap a raw
// cudaStream_t and call those members; they go in step 6 of docs/one-engine.md.
// In place: reduce_scatter's recv may be this rank's block of send (NCCL's in-place rule;
// comm.h does not promise it for every Comm), and all_gather's send this rank's block of recv.
#pragma once

#include <memory>

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

// Queues an in-place all-reduce of data (count elements, a device pointer) over `nccl`, a
// communicator that make_nccl_comm made, on `stream` (a cudaStream_t) instead of the
// communicator's own stream: work queued on `stream` before it has written data, work queued
// after it sees the result, and the host never waits (Megatron's tensor-parallel reductions
// on the compute stream). Returns when the operation is queued; a failure of the operation
// itself surfaces when `stream` is synchronised. Collective over `nccl`: every rank queues
// the same reductions in the same order. Not thread-safe with other calls on `nccl`.
// Calls nccl.all_reduce(..., stream) (comm.h): an error (invalid_argument) when `stream` is null
// (the legacy default stream) or `nccl` is a CPU communicator.
Status all_reduce_on_stream(Comm& nccl, void* data, size_t count, DType type, ReduceOp op,
                            CUstream_st* stream);

// Queue an all-gather (recv (count * size) = every rank's send (count), in rank order) or a
// reduce-scatter (recv (count) = this rank's block of the sum of every rank's send
// (count * size)) over `nccl` on `stream`, as all_reduce_on_stream: ordered with the work on
// `stream`, the host never waits (sequence parallelism's row exchanges). In place as NCCL
// allows (see the top of this file). Collective over `nccl`, the same calls in the same order
// on every rank; not thread-safe with other calls on `nccl`. They call the members, with the
// errors of all_reduce_on_stream.
Status all_gather_on_stream(Comm& nccl, const void* send, void* recv, size_t count, DType type,
                            CUstream_st* stream);
Status reduce_scatter_on_stream(Comm& nccl, const void* send, void* recv, size_t count, DType type,
                                CUstream_st* stream);

// Queue a send of data (count elements, a device pointer) to `peer`, or a receive from it,
// over `nccl` on `stream` instead of the communicator's own stream, as all_reduce_on_stream:
// they start when the work queued before them on `stream` has run, and the work queued after
// them waits for them. Ordering contract: NCCL matches the point-to-point operations between
// a pair of ranks on one communicator in issue order, and a send does not complete before its
// receive is posted, so two ranks that each send to the other first on one stream deadlock;
// the caller orders them (gpu_pipeline.h keeps one communicator and stream per direction).
// Not thread-safe with other calls on `nccl`. They call the members, with the errors of
// all_reduce_on_stream.
Status send_on_stream(Comm& nccl, const void* data, size_t count, DType type, int peer,
                      CUstream_st* stream);
Status recv_on_stream(Comm& nccl, void* data, size_t count, DType type, int peer,
                      CUstream_st* stream);

// cudaSetDevice(local rank % devices) for this process (device/local_rank.h); returns the
// device chosen, or an error naming the local rank and the device count.
Result<int> select_device_for_rank();

}  // namespace lattice
