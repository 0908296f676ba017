// One model chunk's trained state as the checkpoint code reads and writes it (checkpoint.h
// RankParts): its fp32 master weights and the moments of the pieces its AdamW owns, on any
// device. Note [checkpoint staging]: on a host-addressable device (the CPU) the views point into
// the device's own arenas and download() and upload() copy nothing; on another device (CUDA)
// they point into host copies, allocated when first asked for and freed with this object, which
// download() fills from the device and upload() writes back. upload() also rounds the master
// weights into a 16-bit run's compute copy. A chunk whose optimizer holds the master (a 16-bit
// run, Note [master weights in the optimizer] in optim/adamw.h) is staged on every device:
// download() gathers the master from every data-parallel rank's pieces over the frozen tensors'
// widened 16-bit values (a collective: every rank of the chunk's reducer calls it), and upload()
// writes the compute copy and this rank's pieces. Short-lived:
// the trainer makes one per chunk for a save or a load (host copies of a whole chunk exist only
// then).
#pragma once

#include <vector>

#include "checkpoint/checkpoint.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"

namespace lattice {

template <typename A>
class ChunkState {
 public:
  using G = accum_t<A>;  // master weights and moments (fp32; fp64 runs keep no checkpoint)

  // optimizer: the chunk's own, or null (weights only); reducer: the chunk's, required when the
  // optimizer holds the master. All must outlive this.
  ChunkState(GptModel<A>& model, AdamW<A>* optimizer, GradReducer<accum_t<A>>* reducer = nullptr);

  // Where a checkpoint reads or writes the chunk: the master arena (arena_size, layout order),
  // and the optimizer's pieces (empty without one, and for fp64). Stable for the object's life.
  G* params();
  std::vector<MomentPiece> moments();
  // The device's state into the views (what a save writes): the weights when `weights`, the
  // moments when `moments`. Waits; the device's error (or the master's gather's).
  Status download(bool weights, bool moments);
  // The views' state into the device (after a load wrote them), then the 16-bit copy. Waits.
  Status upload(bool moments);

 private:
  // The device's memory is not the host's: the moments are staged, and the weights too.
  bool device_staged() const;
  // The weights are staged: device_staged(), or the master lives in the optimizer's pieces.
  bool weights_staged() const;
  Device& device_;
  GptModel<A>& model_;
  AdamW<A>* optimizer_;
  GradReducer<G>* reducer_;
  // Host copies (staged only): the master arena and the packed moments.
  std::vector<G> params_, exp_avg_, exp_avg_sq_;
};

}  // namespace lattice
