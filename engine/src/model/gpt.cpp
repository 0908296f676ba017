// GptModel (gpt.h): construction, memory, weights, the public forward / backward and stage
// entry points, and the tensor-parallel and dropout helpers the passes (gpt_layer.cpp) call.
#include "model/gpt.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/host_memory.h"
#include "model/init_weights.h"
#include "parallel/context_split.h"

namespace lattice {

namespace {
template <typename A>
const char* compute_type_name() {
  if constexpr (std::is_same_v<A, double>) return "fp64";
  return std::is_same_v<A, float> ? "fp32" : std::is_same_v<A, bf16> ? "bf16" : "fp16";
}
}  // namespace

template <typename A>
void GptModel<A>::collect_op_times() {
  for (const TimedOp& t : timed_ops_) profiler_.add(t.op, device_.seconds(t.from, t.to));
  timed_ops_.clear();
}

template <typename A>
GptModel<A>::GptModel(const ModelConfig& config, const ModelShard& shard, int micro_batch,
                      Device& device, Ops<A>& ops, Comm* tp)
    : config_(config),
      layout_(config, shard),
      device_(device),
      ops_(ops),
      tp_(shard.tp_size > 1 ? tp : nullptr),
      blocks_(device),
      B_(micro_batch),
      T_(config.seq_length / std::max(1, shard.cp_size)),  // this CP rank's rows
      C_(config.hidden_size),
      F_(config.ffn()),
      NH_(config.num_attention_heads),
      L_(shard.num_layers(config)),
      Vp_(config.padded_vocab_size()),
      N_(micro_batch * (config.seq_length / std::max(1, shard.cp_size))),
      HS_(config.head_size()),
      KV_(config.kv_heads()),
      rms_norm_(config.rms_norm()),
      swiglu_(config.swiglu),
      eps_(config.norm_epsilon),
      t_(shard.tp_size),
      tp_rank_(shard.tp_rank),
      sp_(shard.sequence_parallel && shard.tp_size > 1),
      R_(sp_ ? N_ / shard.tp_size : N_),
      row0_(sp_ ? static_cast<size_t>(shard.tp_rank) * R_ : 0),
      Ct_(config.hidden_size / shard.tp_size),
      Ft_(config.ffn() / shard.tp_size),
      Ht_(config.num_attention_heads / shard.tp_size),
      Vt_(config.padded_vocab_size() / shard.tp_size),
      Gt_(config.kv_heads() / shard.tp_size),
      Wt_(static_cast<int>(config.qkv_width() / shard.tp_size)),
      up_(config.swiglu ? 2 * (config.ffn() / shard.tp_size) : config.ffn() / shard.tp_size),
      rotary_dim_(config.rope() ? config.rotary_dim() : 0) {
  cp_ = std::max(1, shard.cp_size);
  cp_rank_ = shard.cp_rank;
  ep_ = std::max(1, shard.ep_size);
  ep_rank_ = shard.ep_rank;
}

template <typename A>
LayerActivations<A> GptModel<A>::take_layer_acts(DeviceBlocks& from, bool moe) {
  using MC = MemoryCategory;
  // R rows of the residual stream and the LayerNorms (N / t with sequence parallelism), N of
  // the tensor-parallel layers' inputs and outputs.
  const size_t RC = static_cast<size_t>(R_) * C_, NF = static_cast<size_t>(N_) * Ft_;
  const size_t NCt = static_cast<size_t>(N_) * Ct_, NW = static_cast<size_t>(N_) * Wt_;
  LayerActivations<A> a{};
  a.ln1 = from.template take<A>(RC, MC::kActivations);
  if (!rms_norm_) a.ln1_mean = from.template take<G>(R_, MC::kActivations);
  a.ln1_rstd = from.template take<G>(R_, MC::kActivations);
  a.qkv = from.template take<A>(NW, MC::kActivations);
  a.atty = from.template take<A>(NCt, MC::kActivations);
  a.saved = from.template take<G>(attention_saved_elems(), MC::kActivations);
  a.res_mid = from.template take<A>(RC, MC::kActivations);
  a.ln2 = from.template take<A>(RC, MC::kActivations);
  if (!rms_norm_) a.ln2_mean = from.template take<G>(R_, MC::kActivations);
  a.ln2_rstd = from.template take<G>(R_, MC::kActivations);
  if (!moe) {
    a.fc1 = from.template take<A>(static_cast<size_t>(N_) * up_, MC::kActivations);
    a.gelu = from.template take<A>(NF, MC::kActivations);
    return a;
  }
  // Note [MoE layer] (gpt_moe.cpp): S = N k rows of expert width; at least a dense layer's.
  // Under expert parallelism this rank's experts hold Sl = expert_rows_ rows of every EP rank.
  const size_t S = static_cast<size_t>(N_) * k_, Nk = S, Sl = expert_rows_;
  a.fc1 =
      from.template take<A>(std::max(Sl * upm_, static_cast<size_t>(N_) * up_), MC::kActivations);
  a.gelu = from.template take<A>(std::max(Sl * Fm_, NF), MC::kActivations);
  a.router_probs = from.template take<G>(static_cast<size_t>(N_) * E_, MC::kActivations);
  a.route = from.template take<int32_t>(Nk, MC::kActivations);
  a.route_weight = from.template take<G>(Nk, MC::kActivations);
  a.route_slot = from.template take<int32_t>(Nk, MC::kActivations);
  a.slot_row = from.template take<int32_t>(S, MC::kActivations);
  a.tokens_per_expert = from.template take<int32_t>(E_, MC::kActivations);
  a.expert_counts = from.template take<int32_t>(E_, MC::kActivations);
  if (ep_ > 1)
    a.expert_counts_all =
        from.template take<int32_t>(static_cast<size_t>(ep_) * E_, MC::kActivations);
  // The counts the host reads (moe_host_counts): that buffer itself, or a host copy's home.
  if (device_.capabilities().host_addressable)
    a.expert_counts_host = ep_ > 1 ? a.expert_counts_all : a.expert_counts;
  else
    a.expert_counts_host = from.template take_host<int32_t>(static_cast<size_t>(ep_) * E_);
  a.expert_in = from.template take<A>(Sl * C_, MC::kActivations);
  a.expert_out = from.template take<A>(S * C_, MC::kActivations);
  return a;
}

template <typename A>
Status GptModel<A>::allocate() {
  using MC = MemoryCategory;
  if (t_ > 1 && !tp_)
    return Status::internal("GptModel: tensor parallelism without a tensor-parallel communicator");
  if (L_ < 1) return Status::internal("GptModel: a pipeline stage without layers");
  if (sp_ && N_ % t_ != 0)
    return Status::internal("GptModel: sequence parallelism needs the TP size to divide B*T");
  const size_t n = arena_size(), NC = static_cast<size_t>(N_) * C_,
               NF = static_cast<size_t>(N_) * Ft_;
  const size_t RC = static_cast<size_t>(R_) * C_;  // NC without sequence parallelism
  const size_t NCt = static_cast<size_t>(N_) * Ct_;
  if (master_kind_ == MasterWeights::kWhole) master_ = take<G>(n, MC::kWeights);
  grads_ = take<G>(grad_size(), MC::kGrads);  // Note [LoRA]: the trained tensors' alone
  if constexpr (std::is_same_v<A, G>) {
    compute_ = master_;
  } else {
    compute_ = take<A>(n, MC::kWeights);
  }
  if (cp_ > 1) cp_positions_ = take<int32_t>(N_, MC::kWeights);
  if (config_.moe()) {  // Note [MoE layer] (gpt_moe.cpp)
    if (!ops_.has_moe())
      return Status::invalid_argument("MoE layers (--num-experts) are not yet implemented on " +
                                      device_.describe() + " in " + compute_type_name<A>() +
                                      " compute: the CPU runs them in fp32 and fp64, CUDA "
                                      "in fp32, bf16 and fp16");
    // Note [expert tensor parallelism 1] (gpt_moe.cpp): whole experts on N / t rows; Note
    // [expert tensor parallelism e]: each expert-TP group's N etp / t rows.
    const ModelShard& shard = layout_.shard();
    etp_ = shard.expert_tp_size();
    etp_rank_ = shard.expert_tp_rank();
    moe_rows_split_ = shard.experts_whole();
    moe_grouped_ = etp_ > 1 && etp_ < t_;
    const int parts = shard.moe_row_parts();
    if (t_ % etp_ != 0 || N_ % parts != 0)  // the trainer refuses both first (expert_rules)
      return Status::invalid_argument(
          "--expert-tensor-parallel-size " + std::to_string(etp_) + " splits each micro-batch's " +
          std::to_string(N_) + " tokens over the " + std::to_string(t_) +
          " tensor-parallel ranks in groups of it, which must divide both");
    Nm_ = N_ / parts;
    moe_row0_ = static_cast<size_t>(tp_rank_ / etp_) * Nm_;
    if (config_.moe_ffn() % etp_ != 0)  // refused first too (expert_rules)
      return Status::invalid_argument("--expert-tensor-parallel-size " + std::to_string(etp_) +
                                      " does not divide the experts' width " +
                                      std::to_string(config_.moe_ffn()));
    if (moe_grouped_ && (!etp_comm_ || etp_comm_->size() != etp_))
      return Status::internal("GptModel: expert tensor parallelism " + std::to_string(etp_) +
                              " without its expert-tensor-parallel communicator");
    for (int l = 0; l < L_; l++) any_moe_ = any_moe_ || layout_.is_moe(l);
  }
  if (any_moe_) {
    E_ = config_.num_experts;
    k_ = config_.moe_router_topk;
    Fm_ = config_.moe_ffn() / etp_;  // this expert-TP rank's slice of each expert
    upm_ = swiglu_ ? 2 * Fm_ : Fm_;
    if (config_.moe_expert_capacity_factor > 0) {
      // Megatron's get_capacity over the N k routes; above N an expert cannot overflow.
      const double c = std::ceil(static_cast<double>(Nm_) * k_ / E_ *
                                 static_cast<double>(config_.moe_expert_capacity_factor));
      capacity_ = c > Nm_ ? 0 : static_cast<int>(c);
    }
    // Note [expert parallelism] (gpt_moe.cpp): this rank's experts, E / EP of them.
    if (ep_ > 1 && (E_ % ep_ != 0 || !ep_comm_ || ep_comm_->size() != ep_))
      return Status::internal("GptModel: expert parallelism " + std::to_string(ep_) +
                              " without its EP communicator or not dividing the " +
                              std::to_string(E_) + " experts");
    El_ = E_ / ep_;
    ep_first_ = El_ * ep_rank_;
    const size_t S = static_cast<size_t>(N_) * k_;
    expert_rows_ = S;  // at EP 1 the N k routes' rows, as the planner counts (expert_rows)
    if (ep_ > 1) {
      expert_rows_ = static_cast<size_t>(Nm_) * ep_ * std::min(k_, El_);
      if (capacity_ > 0) expert_rows_ = std::min(expert_rows_, static_cast<size_t>(E_) * capacity_);
    }
    const size_t Sl = expert_rows_;
    moe_logits_ = take<A>(static_cast<size_t>(N_) * E_, MC::kWorkspace);
    moe_dweight_ = take<G>(S, MC::kWorkspace);
    moe_d_rows_ = take<A>(S * C_, MC::kWorkspace);
    moe_d_act_ = take<A>(Sl * Fm_, MC::kWorkspace);
    if (swiglu_) moe_d_up_ = take<A>(2 * Sl * Fm_, MC::kWorkspace);
    if (ep_ > 1) {
      moe_send_ = take<A>(S * C_, MC::kWorkspace);
      moe_recv_ = take<A>(Sl * C_, MC::kWorkspace);
      moe_local_ = take<A>(Sl * C_, MC::kWorkspace);
    }
    if (moe_rows_split_ && !sp_) moe_rows_ = take<A>(static_cast<size_t>(Nm_) * C_, MC::kWorkspace);
    moe_aux_ = take<G>(L_, MC::kWorkspace);
    device_.zero(moe_aux_, L_ * sizeof(G), compute());
  }
  for (int i = 0; i < recompute_.max_group; i++)
    recompute_scratch_.push_back(take_layer_acts(blocks_, any_moe_));
  if (t_ > 1 && post()) {
    row_max_ = take<G>(N_, MC::kWorkspace);
    sum_exp_ = take<double>(N_, MC::kWorkspace);
    target_logit_ = take<G>(N_, MC::kWorkspace);
  }
  if (!post()) stats_scratch_ = take<G>(2 * static_cast<size_t>(N_), MC::kWorkspace);
  proj_out_ = take<A>(RC, MC::kWorkspace);
  fc2_out_ = take<A>(RC, MC::kWorkspace);
  d_res_ = take<A>(RC, MC::kWorkspace);
  d_c_ = take<A>(RC, MC::kWorkspace);
  if (sp_) {
    gathered_ = take<A>(NC, MC::kWorkspace);
    full_ = take<A>(NC, MC::kWorkspace);
  }
  d_f_ = take<A>(NF, MC::kWorkspace);
  if (swiglu_) d_up_ = take<A>(2 * NF, MC::kWorkspace);
  d_qkv_ = take<A>(static_cast<size_t>(N_) * Wt_, MC::kWorkspace);
  if (rotary_dim_ > 0) {
    // Over the whole sequence: a CP rank's rows sit at global positions up to seq_length - 1.
    const size_t table = static_cast<size_t>(config_.seq_length) * (rotary_dim_ / 2);
    rope_cos_ = take<G>(table, MC::kWeights);
    rope_sin_ = take<G>(table, MC::kWeights);
  }
  d_atty_ = take<A>(NCt, MC::kWorkspace);
  attention_ws_ = take<G>(ops_.attention_workspace_elems(B_, T_, Ht_, HS_), MC::kWorkspace);
  if (config_.lora()) {  // Note [LoRA]
    lora_r_ = config_.lora_rank;
    const size_t K = std::max(C_, Ft_), O = std::max({Wt_, up_, C_});
    const size_t Nr = static_cast<size_t>(N_) * lora_r_;
    lora_x_ = take<A>(N_ * K, MC::kWorkspace);
    lora_dx_ = take<A>(N_ * K, MC::kWorkspace);
    lora_h_ = take<A>(Nr, MC::kWorkspace);
    lora_dh_ = take<A>(Nr, MC::kWorkspace);
    lora_y_ = take<A>(N_ * O, MC::kWorkspace);
    if constexpr (!std::is_same_v<A, G>) lora_hg_ = take<G>(Nr, MC::kWorkspace);
  }
  if (layout_.has_frozen()) norm_discard_ = take<G>(2 * static_cast<size_t>(C_), MC::kWorkspace);
  if (pre() && config_.has_vision())
    if (Status s = create_vision(); !s) return s;
  return blocks_.status();
}

template <typename A>
Status GptModel<A>::take_activations(GptActivations<A>& a) {
  using MC = MemoryCategory;
  const size_t RC = static_cast<size_t>(R_) * C_, NV = static_cast<size_t>(N_) * Vt_;
  DeviceBlocks& from = a.blocks;
  a.tokens = from.take<int32_t>(N_, MC::kActivations);
  a.targets = from.take<int32_t>(N_, MC::kActivations);
  a.positions = from.take<int32_t>(N_, MC::kActivations);  // 4 bytes a token: always there
  if (vision_) {                                           // Note [image rows] (gpt_vision.cpp)
    const VisionConfig& v = config_.vision;
    const size_t images = static_cast<size_t>(B_) * v.images_per_sample;
    a.images = from.take<A>(images * v.num_channels * v.img_h * v.img_w, MC::kActivations);
    a.image_slot = from.take<int32_t>(N_, MC::kActivations);
    a.image_rows = from.take<int32_t>(images * v.patches(), MC::kActivations);
    a.embed_tokens = from.take<int32_t>(N_, MC::kActivations);
  }
  a.residual = from.take<A>(static_cast<size_t>(L_ + 1) * RC, MC::kActivations);
  for (int l = 0; l < L_; l++)
    a.layers.push_back(recompute_.recomputed(l)
                           ? LayerActivations<A>{}
                           : take_layer_acts(from, layout_.is_moe(l)));
  if (post()) {
    a.lnf = from.take<A>(RC, MC::kActivations);
    if (!rms_norm_) a.lnf_mean = from.take<G>(R_, MC::kActivations);
    a.lnf_rstd = from.take<G>(R_, MC::kActivations);
    a.logits_accum = from.take<G>(NV, MC::kActivations);
    if constexpr (std::is_same_v<A, G>)
      a.logits = a.logits_accum;
    else
      a.logits = from.take<A>(NV, MC::kActivations);
    a.losses = from.take<G>(N_, MC::kActivations);
  } else {
    a.output_grad = from.take<A>(RC, MC::kCommBuffers);
  }
  if (!pre()) a.input_grad = from.take<A>(RC, MC::kCommBuffers);
  return from.status();
}

template <typename A>
Result<std::unique_ptr<GptActivations<A>>> GptModel<A>::new_activations() {
  auto made = std::make_unique<GptActivations<A>>(device_);
  if (Status s = take_activations(*made); !s) return s;
  return made;
}

template <typename A>
GptModel<A>::GptModel(const ModelConfig& config, int micro_batch)
    : GptModel(config, ModelShard{}, micro_batch, host_device(), *host_device().ops<A>(), nullptr) {
  if (Status s = allocate(); !s) throw std::runtime_error(s.message());
  if (Status s = upload_rope_tables(); !s) throw std::runtime_error(s.message());
}

template <typename A>
Result<std::unique_ptr<GptModel<A>>> GptModel<A>::create(const ModelConfig& config, int micro_batch,
                                                         Device& device, const ModelShard& shard,
                                                         Comm* tp, const RecomputePlan& recompute,
                                                         Comm* cp, Comm* ep, Comm* etp,
                                                         MasterWeights master) {
  Ops<A>* ops = device.ops<A>();
  if (!ops)
    return Status::invalid_argument("GptModel: " + device.describe() + " has no op list for " +
                                    compute_type_name<A>() + " compute");
  std::unique_ptr<GptModel<A>> m(new GptModel<A>(config, shard, micro_batch, device, *ops, tp));
  if (!recompute.group_start.empty() && recompute.group_start.size() != static_cast<size_t>(m->L_))
    return Status::internal("GptModel: a recompute plan for " +
                            std::to_string(recompute.group_start.size()) + " layers, not " +
                            std::to_string(m->L_));
  m->recompute_ = recompute;
  if constexpr (!std::is_same_v<A, G>) m->master_kind_ = master;
  m->ep_comm_ = m->ep_ > 1 ? ep : nullptr;
  m->etp_comm_ = etp;
  if (m->cp_ > 1) {  // Note [context parallelism] in gpt_layer.cpp
    if (!cp || cp->size() != m->cp_)
      return Status::internal("GptModel: context parallelism without its CP communicator");
    if (!ops->has_ring_attention())
      return Status::invalid_argument("--context-parallel-size > 1: " + device.describe() +
                                      " has no ring attention in " + compute_type_name<A>() +
                                      " compute (Ops::has_ring_attention)");
    if (Status s = check_context_split(config.seq_length, m->cp_); !s) return s;
    auto ring = RingAttention<A>::create(device, *ops, *cp, micro_batch, config.seq_length, m->Ht_,
                                         m->Gt_, m->HS_);
    if (!ring) return ring.status();
    m->ring_ = std::move(*ring);
    m->cp_comm_ = cp;
  }
  if (Status s = m->allocate(); !s) return s;
  if (Status s = m->upload_rope_tables(); !s) return s;
  return m;
}

template <typename A>
Status GptModel<A>::upload_rope_tables() {
  if (cp_ > 1) {  // every sequence's local rows at their global positions
    std::vector<int32_t> rows(static_cast<size_t>(N_));
    for (int b = 0; b < B_; b++)
      std::copy(ring_->positions(), ring_->positions() + T_, rows.begin() + size_t(b) * T_);
    device_.copy(cp_positions_, rows.data(), rows.size() * sizeof(int32_t), CopyKind::kHostToDevice,
                 compute());
    if (Status s = device_.synchronize(compute()); !s) return s;
  }
  if (rotary_dim_ == 0) return Status::ok();
  const int T = config_.seq_length;  // the whole sequence's positions (context parallelism)
  const size_t n = static_cast<size_t>(T) * (rotary_dim_ / 2);
  std::vector<double> cos(n), sin(n);
  kernels::rope_tables(cos.data(), sin.data(), T, rotary_dim_, config_.rotary_base,
                       config_.llama3_rope_factor());
  const std::vector<G> cos_g(cos.begin(), cos.end()), sin_g(sin.begin(), sin.end());
  device_.copy(rope_cos_, cos_g.data(), n * sizeof(G), CopyKind::kHostToDevice, compute());
  device_.copy(rope_sin_, sin_g.data(), n * sizeof(G), CopyKind::kHostToDevice, compute());
  return device_.synchronize(compute());
}

template <typename A>
void GptModel<A>::upload(const G* host) {
  // On the compute stream, so that a failed copy is recorded like every other op.
  if (master_) {
    device_.copy(master_, host, arena_size() * sizeof(G), CopyKind::kHostToDevice, compute());
    if constexpr (!std::is_same_v<A, G>) ops_.to_compute(compute_, master_, arena_size());
  } else {
    convert_through_host(host, nullptr, 0, arena_size());
  }
  (void)device_.synchronize(compute());  // an error stays recorded on the device
}

template <typename A>
void GptModel<A>::download(G* host) {
  if (master_)
    device_.copy(host, master_, arena_size() * sizeof(G), CopyKind::kDeviceToHost, compute());
  else
    convert_through_host(nullptr, host, 0, arena_size());
  (void)device_.synchronize(compute());  // an error stays recorded on the device
}

template <typename A>
void GptModel<A>::convert_through_host(const G* from, G* to, size_t offset, size_t n) {
  A* part = compute_ + offset;
  if (device_.capabilities().host_addressable) {
    if (from)
      ops_.to_compute(part, from, n);
    else
      ops_.to_accum(to, part, n);
    (void)device_.synchronize(compute());
    return;
  }
  // Rounded and widened on the device through a bounded staging buffer, so that the 16-bit
  // copy is the device's own rounding, as the step's.
  const size_t step = std::min<size_t>(n, size_t{1} << 24);
  G* staging = static_cast<G*>(device_.allocate(step * sizeof(G), MemoryCategory::kWorkspace));
  if (!staging) {
    device_.record_error(device_.out_of_memory(MemoryCategory::kWorkspace, step * sizeof(G)));
    return;
  }
  for (size_t at = 0; at < n; at += step) {
    const size_t k = std::min(step, n - at);
    if (from) {
      device_.copy(staging, from + at, k * sizeof(G), CopyKind::kHostToDevice, compute());
      ops_.to_compute(part + at, staging, k);
    } else {
      ops_.to_accum(staging, part + at, k);
      device_.copy(to + at, staging, k * sizeof(G), CopyKind::kDeviceToHost, compute());
    }
    if (Status s = device_.synchronize(compute()); !s) break;  // staging is refilled next
  }
  device_.free(staging);
}

template <typename A>
void GptModel<A>::refresh_compute_copy() {
  assert(master_);
  if constexpr (!std::is_same_v<A, G>) ops_.to_compute(compute_, master_, arena_size());
}

template <typename A>
void GptModel<A>::zero_grads() {
  device_.zero(grads_, grad_size() * sizeof(G), compute());
}

template <typename A>
Status GptModel<A>::init_weights(uint64_t seed, const MasterSink& master) {
  if (!master_) return init_compute_copy(seed, master);
  const std::vector<ParamTensor>& tensors = layout_.tensors();
  // The alignment gaps between tensors: zero, so every device saves the same arena.
  device_.zero(master_, arena_size() * sizeof(G), compute());
  size_t failed_bytes = 0;
  if (device_.capabilities().host_addressable) {
    (void)device_.synchronize(compute());
    failed_bytes = init_arena(config_, layout_, seed, master_);
  } else {
    // Staged: one tensor's slice at a time through a host buffer (the device's memory cannot be
    // written from the host); the copy is waited for before the buffer is refilled.
    std::vector<G> host;
    for (const ParamTensor& t : tensors) {
      try {
        if (host.size() < t.numel) host.resize(t.numel);
      } catch (const std::exception&) {  // bad_alloc, length_error
        failed_bytes = bytes_of<G>(t.numel);
        break;
      }
      if ((failed_bytes = init_tensor(config_, t, seed, host.data())) > 0) break;
      device_.copy(master_ + t.offset, host.data(), t.numel * sizeof(G), CopyKind::kHostToDevice,
                   compute());
      if (Status s = device_.synchronize(compute()); !s) return s;
    }
  }
  if (failed_bytes > 0)
    return Status::resource_exhausted(OutOfMemory(MemoryCategory::kWorkspace, failed_bytes).what());
  if constexpr (!std::is_same_v<A, G>) ops_.to_compute(compute_, master_, arena_size());
  return device_.synchronize(compute());
}

// Note [master weights in the optimizer] (optim/adamw.h): init_weights without a master, one
// tensor at a time through one host buffer (the largest tensor's), never a whole fp32 arena.
template <typename A>
Status GptModel<A>::init_compute_copy(uint64_t seed, const MasterSink& master) {
  device_.zero(compute_, arena_size() * sizeof(A), compute());  // the alignment gaps
  std::vector<G> host;
  for (const ParamTensor& t : layout_.tensors()) {
    size_t failed = 0;
    try {
      if (host.size() < t.numel) host.resize(t.numel);
    } catch (const std::exception&) {  // bad_alloc, length_error
      failed = bytes_of<G>(t.numel);
    }
    if (failed == 0) failed = init_tensor(config_, t, seed, host.data());
    if (failed > 0)
      return Status::resource_exhausted(OutOfMemory(MemoryCategory::kWorkspace, failed).what());
    convert_through_host(host.data(), nullptr, t.offset, t.numel);  // waits
    if (Status s = device_.error(); !s) return s;
    if (master && !t.frozen)
      if (Status s = master(t.offset, host.data(), t.numel); !s) return s;
  }
  return device_.synchronize(compute());
}

template <typename A>
void GptModel<A>::record_comm_error(const char* what, const Status& s) {
  device_.record_error(Status::internal(std::string(what) + ": " + s.message()));
}

template <typename A>
void GptModel<A>::tp_all_reduce(void* data, size_t count, DType type, ReduceOp op) {
  OpTimer timer(*this, Op::kTensorParallelComm);
  if (Status s = tp_->all_reduce(data, count, type, op, compute()); !s)
    record_comm_error("tensor-parallel all-reduce", s);
}

template <typename A>
void GptModel<A>::tp_sum_rows(A* data) {
  if (t_ == 1) return;
  tp_all_reduce(data, static_cast<size_t>(N_) * C_, dtype_of<A>(), ReduceOp::kSum);
}

template <typename A>
const A* GptModel<A>::gather_rows(const A* held, A* full) {
  if (!sp_) return held;
  OpTimer timer(*this, Op::kTensorParallelComm);
  const size_t RC = static_cast<size_t>(R_) * C_;
  if (Status s = tp_->all_gather(held, full, RC, dtype_of<A>(), compute()); !s)
    record_comm_error("sequence-parallel all-gather", s);
  return full;
}

template <typename A>
void GptModel<A>::reduce_rows(A* partial, A* held) {
  if (!sp_) {
    tp_sum_rows(partial);
    return;
  }
  OpTimer timer(*this, Op::kTensorParallelComm);
  const size_t RC = static_cast<size_t>(R_) * C_;
  if (Status s = tp_->reduce_scatter(partial, held, RC, dtype_of<A>(), compute()); !s)
    record_comm_error("sequence-parallel reduce-scatter", s);
}

template <typename A>
void GptModel<A>::row_parallel_forward(A* out, const A* inp, const A* weight, const A* bias, int K,
                                       const A* lora_a, const A* lora_b, int layer, int linear) {
  if (!sp_) {  // tp_rank 0 adds the bias inside its GEMM, so it enters the sum once
    {
      OpTimer timer(*this, Op::kMatmulForward);
      ops_.matmul_forward(out, nullptr, inp, weight, tp_rank_ == 0 ? bias : nullptr, N_, K, C_,
                          Epilogue::kNone);
    }
    lora_forward(out, inp, lora_a, lora_b, K, C_, layer, linear);  // B (A_t x_t): partial too
    tp_sum_rows(out);
    return;
  }
  // Each rank adds the bias to its own rows after the reduce-scatter (gpt_layer.cpp).
  {
    OpTimer timer(*this, Op::kMatmulForward);
    ops_.matmul_forward(full_, nullptr, inp, weight, nullptr, N_, K, C_, Epilogue::kNone);
  }
  lora_forward(full_, inp, lora_a, lora_b, K, C_, layer, linear);
  reduce_rows(full_, out);
  if (!bias) return;
  OpTimer timer(*this, Op::kMatmulForward);
  ops_.add_bias(out, bias, R_, C_);
}

template <typename A>
void GptModel<A>::norm_forward(A* out, G* mean, G* rstd, const A* inp, const A* weight,
                               const A* bias) {
  OpTimer timer(*this, Op::kLayerNorm);
  if (rms_norm_)
    ops_.rmsnorm_forward(out, rstd, inp, weight, R_, C_, eps_);
  else
    ops_.layernorm_forward(out, mean, rstd, inp, weight, bias, R_, C_);
}

template <typename A>
void GptModel<A>::residual_norm_forward(A* residual_out, A* out, G* mean, G* rstd,
                                        const A* residual, const A* x, const A* weight,
                                        const A* bias) {
  OpTimer timer(*this, Op::kLayerNorm);
  if (rms_norm_)
    ops_.residual_rmsnorm_forward(residual_out, out, rstd, residual, x, weight, R_, C_, eps_);
  else
    ops_.residual_layernorm_forward(residual_out, out, mean, rstd, residual, x, weight, bias, R_,
                                    C_);
}

template <typename A>
void GptModel<A>::norm_backward(A* dinp, G* dweight, G* dbias, const A* dout, const A* inp,
                                const A* weight, const G* mean, const G* rstd) {
  OpTimer timer(*this, Op::kLayerNorm);
  if (!dweight) {  // a frozen norm (Note [LoRA]): the kernels always accumulate, into scratch
    dweight = norm_discard_;
    dbias = dbias || rms_norm_ ? dbias : norm_discard_ + C_;
  }
  if (rms_norm_)
    ops_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, R_, C_);
  else
    ops_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, R_, C_);
}

template <typename A>
void GptModel<A>::add_position_rows(A* rows, const A* wpe) {
  if (positions_) {
    // Packed documents: wpe's rows gathered by this rank's rows' positions into scratch (the
    // embedding op over wpe as a table of T "tokens"), then added (a dropout of p 0 is a plain
    // add, the op list having no other for both compute types).
    ops_.embedding_forward(d_c_, positions_ + row0_, wpe, nullptr, 1, R_, C_, 0, config_.seq_length,
                           nullptr);
    ops_.residual_dropout_forward(rows, rows, d_c_, static_cast<size_t>(R_) * C_, 0.0f, 0, 0);
    return;
  }
  // Row r is position r % T; this rank's rows [row0, row0 + R) may start and end mid-sequence.
  const size_t T = T_, C = C_, end = row0_ + R_;
  for (size_t r = row0_; r < end;) {
    A* dst = rows + (r - row0_) * C;
    const size_t pos = r % T;
    if (pos == 0 && end - r >= T) {  // whole sequences: wpe's first T rows as one (T*C) bias
      const size_t k = (end - r) / T;
      ops_.add_bias(dst, wpe, static_cast<int>(k), T_ * C_);
      r += k * T;
    } else {
      const size_t len = std::min(T - pos, end - r);
      ops_.add_bias(dst, wpe + pos * C, 1, static_cast<int>(len * C));
      r += len;
    }
  }
}

template <typename A>
void GptModel<A>::sum_sequence_parallel_grads(int first, int last) {
  if (t_ == 1) return;
  // Runs of adjacent partial-gradient tensors in one all-reduce each (the alignment gaps
  // between them hold zeros: zero_grads clears the whole arena); frozen ones have none.
  const auto& t = layout_.tensors();
  auto partial = [&](int i) { return t[i].sequence_parallel_grad && !t[i].frozen; };
  for (int i = first; i < last;) {
    if (!partial(i)) {
      i++;
      continue;
    }
    int j = i;
    while (j + 1 < last && partial(j + 1)) j++;
    const size_t count = t[j].grad_offset + t[j].numel - t[i].grad_offset;
    tp_all_reduce(grads_ + t[i].grad_offset, count, dtype_of<G>(), ReduceOp::kSum);
    i = j + 1;
  }
}

template <typename A>
void GptModel<A>::hidden_dropout(A* data, int layer, DropoutSite site) {
  if (p_hidden_ == 0) return;
  OpTimer timer(*this, Op::kResidualDropout);
  if (cp_ > 1) {  // each chunk of c rows at its global rows' offset (cp_chunks)
    cp_chunks([&](size_t local, size_t global, size_t count) {
      ops_.residual_dropout_forward(data + local, nullptr, data + local, count, p_hidden_,
                                    key(layer, site), global);
    });
    return;
  }
  const size_t n = static_cast<size_t>(R_) * C_;
  ops_.residual_dropout_forward(data, nullptr, data, n, p_hidden_, key(layer, site), row0_ * C_);
}

template <typename A>
void GptModel<A>::cp_chunks(const std::function<void(size_t, size_t, size_t)>& f) const {
  // Note [context parallelism]: local rows [b T/CP + h c, + c) of sequence b are chunk
  // cp_chunk(rank, CP, h) of it, global rows b T + chunk c onwards; with sequence parallelism
  // this rank holds local rows [row0, row0 + R) of them. Elements of C each.
  const size_t c = static_cast<size_t>(T_ / 2), C = C_, T = config_.seq_length;
  const size_t held_begin = row0_, held_end = row0_ + R_;
  for (int b = 0; b < B_; b++)
    for (int h = 0; h < 2; h++) {
      const size_t begin = b * static_cast<size_t>(T_) + h * c, end = begin + c;
      const size_t from = std::max(begin, held_begin), to = std::min(end, held_end);
      if (from >= to) continue;
      const size_t chunk = static_cast<size_t>(cp_chunk(cp_rank_, cp_, h));
      f((from - held_begin) * C, (b * T + chunk * c + (from - begin)) * C, (to - from) * C);
    }
}

template <typename A>
const A* GptModel<A>::hidden_dropout_backward(A* out, const A* dout, int layer, DropoutSite site) {
  if (p_hidden_ == 0) return dout;
  OpTimer timer(*this, Op::kResidualDropout);
  if (cp_ > 1) {
    cp_chunks([&](size_t local, size_t global, size_t count) {
      ops_.dropout_backward(out + local, dout + local, count, p_hidden_, key(layer, site), global);
    });
    return out;
  }
  const size_t n = static_cast<size_t>(R_) * C_;
  ops_.dropout_backward(out, dout, n, p_hidden_, key(layer, site), row0_ * C_);
  return out;
}

std::string packed_positions_error(const int32_t* positions, int B, int T) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int32_t p = positions[static_cast<size_t>(b) * T + t];
      const int32_t prev = t > 0 ? positions[static_cast<size_t>(b) * T + t - 1] : -1;
      if (p != 0 && p != prev + 1)
        return "packed positions: sequence " + std::to_string(b) + " token " + std::to_string(t) +
               " has position " + std::to_string(p) + " after " +
               (t > 0 ? std::to_string(prev) : std::string("the sequence start")) +
               "; a document's positions start at 0 and count up by one";
    }
  return "";
}

template <typename A>
double GptModel<A>::forward(GptActivations<A>& acts, const int32_t* tokens, const int32_t* targets,
                            uint64_t dropout_seed, float grad_scale, const int32_t* positions) {
  if (!pre() || !post()) return std::numeric_limits<double>::quiet_NaN();  // a stage: *_stage
  if (!acts.residual && acts.host_shape.first > 0) {  // the host constructor's: first use
    if (acts.host_shape != std::pair<int, int>{B_, T_} || &acts.blocks.device() != &device_)
      throw std::invalid_argument("GptModel::forward: activations made for (B, T) = (" +
                                  std::to_string(acts.host_shape.first) + ", " +
                                  std::to_string(acts.host_shape.second) +
                                  ") on the host device, the model runs (" + std::to_string(B_) +
                                  ", " + std::to_string(T_) + ") on " + device_.describe());
    if (Status s = take_activations(acts); !s) throw std::runtime_error(s.message());
  }
  const size_t N = static_cast<size_t>(N_);
  if (positions)
    if (std::string error = packed_positions_error(positions, B_, T_); !error.empty())
      throw std::invalid_argument("GptModel::forward: " + error);
  device_.copy(acts.tokens, tokens, N * sizeof(int32_t), CopyKind::kHostToDevice, compute());
  device_.copy(acts.targets, targets, N * sizeof(int32_t), CopyKind::kHostToDevice, compute());
  acts.packed = positions != nullptr;
  if (positions)
    device_.copy(acts.positions, positions, N * sizeof(int32_t), CopyKind::kHostToDevice,
                 compute());
  run_forward(acts, grad_scale, dropout_seed);
  std::vector<G> losses(N);
  device_.copy(losses.data(), acts.losses, N * sizeof(G), CopyKind::kDeviceToHost, compute());
  if (!device_.synchronize(compute())) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (G l : losses) sum += static_cast<double>(l);
  return sum / static_cast<double>(N);
}

template <typename A>
void GptModel<A>::backward(GptActivations<A>& acts) {
  run_backward(acts);
}

template <typename A>
void GptModel<A>::forward_stage(GptActivations<A>& acts, float grad_scale, uint64_t dropout_seed) {
  run_forward(acts, grad_scale, dropout_seed);
}

template <typename A>
void GptModel<A>::backward_stage(GptActivations<A>& acts) {
  run_backward(acts);
}

template class GptModel<float>;
template class GptModel<double>;
template class GptModel<bf16>;
template class GptModel<fp16>;

}  // namespace lattice
