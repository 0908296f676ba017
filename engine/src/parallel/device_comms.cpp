#include "parallel/device_comms.h"

#include "device/device.h"

namespace lattice {

Result<DeviceComms> make_device_comms(Device& device, const ProcessGroups& g) {
  DeviceComms comms;
  auto over = [&device](Comm& group, std::unique_ptr<Comm>& out) -> Status {
    if (group.size() == 1) return Status::ok();
    Result<std::unique_ptr<Comm>> made = device.make_comm(group);  // named as the group
    if (!made) return made.status();
    out = std::move(*made);
    return Status::ok();
  };
  if (Status s = over(*g.tp, comms.tp); !s) return s;
  // The dense gradients' group: DP x CP (the same ranks as DP when CP is 1).
  if (Status s = over(*g.data_context, comms.dp); !s) return s;
  if (g.layout.cp > 1)
    if (Status s = over(*g.cp, comms.cp); !s) return s;
  if (g.layout.pp > 1) {
    comms.pipeline.resize(g.layout.vpp > 1 ? 4 : 2);
    for (std::unique_ptr<Comm>& channel : comms.pipeline)
      if (Status s = over(*g.pp, channel); !s) return s;
  }
  if (g.in_embedding_group())
    if (Status s = over(*g.embedding, comms.embedding); !s) return s;
  // Expert parallelism (or an expert TP of its own): the MoE layers' token all-to-all, then the
  // experts' gradient sum.
  if (g.layout.expert_grid()) {
    if (Status s = over(*g.expert, comms.expert); !s) return s;
    if (Status s = over(*g.expert_data, comms.expert_data); !s) return s;
  }
  // An expert TP strictly between 1 and TP: the route weights' gradient is summed over the
  // expert-TP group (Note [expert tensor parallelism e] in model/gpt_moe.cpp).
  if (g.layout.etp > 1 && g.layout.etp < g.layout.tp)
    if (Status s = over(*g.expert_tensor, comms.expert_tensor); !s) return s;
  return comms;
}

}  // namespace lattice
