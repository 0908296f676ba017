// Note [device collectives through host memory]: a communicator for a device's buffers that
// moves them through host memory over a host communicator (MpiComm). Each operation copies its
// device inputs into host buffers, runs the host communicator's operation on them, and copies
// the results back. Every call returns with its data back on the device: the stream-ordered
// calls first synchronise their stream, then copy and communicate on the host, so nothing
// overlaps. A fallback, not a fast path:
// - ranks that share a GPU, which NCCL refuses ("Duplicate GPU detected" since NCCL 2.5); a
//   GPU check on a machine with one GPU runs TP, CP and EP 2 so;
// - the CPU, where the copies are memcpy: the tests run whole layouts through it there, so
//   every operation the engine calls on a device communicator is exercised in CI.
// LATTICE_DEVICE_COMM=host selects it for every device communicator of a run (Device::
// make_comm); unset or "auto" keeps the device's own (a CPU split of the group, NcclComm).
// Only isend and irecv stay asynchronous (the ring's two-way shift needs both in flight);
// the other async calls complete before they return.
#pragma once

#include <memory>
#include <string>

#include "lattice/comm.h"

namespace lattice {

class Device;

// A communicator over the ranks of `group` (a host communicator: split, so that it has a
// message space of its own) for `device`'s buffers, named as `group`. Collective over group.
// Errors: the split, or the device could not make a stream for the copies.
Result<std::unique_ptr<Comm>> make_staged_comm(Device& device, Comm& group);

// Whether LATTICE_DEVICE_COMM asks for make_staged_comm: "host" yes, unset or "auto" no.
// Any other value is an error naming the variable, the value and the two it takes.
Result<bool> device_comm_through_host();

}  // namespace lattice
