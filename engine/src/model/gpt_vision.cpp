// GptModel (gpt.h) of a vision-language model: the vision tower on the pre chunk and the
// projected patches spliced into the language model's rows.
//
// Note [image rows]: a sequence holds each of its images as Np consecutive rows of the image
// placeholder id (ModelConfig::image_token_id, one past the tokenizer's vocabulary; the data
// expands each <image> to Np of them, SampleSource::images_per_sample). load_images maps row n
// of sequence b holding its k-th placeholder to patch base_b Np + k of the tower's output
// (image_slot; Note [present images] for base_b), the inverse (image_rows, -1 for patches whose
// rows the sequence cut off), and
// gives the embedding the tokens with -1 at those rows (embed_tokens), outside every rank's
// vocabulary range, so their word embedding is zero and no gradient reaches the table. The
// embedding's output is then word + position embedding on text rows and the position embedding
// alone on image rows (LLaVA's inputs_embeds, to which GPT-2 adds positions and Llama RoPE);
// splice_images adds the projected patches there (moe_scatter_add_rows with one route per row),
// before the embedding dropout. Backward: the patches' gradient is those rows of the
// embedding's output gradient (the same op the other way), all N rows gathered under sequence
// parallelism, so every TP rank holds the projected patches' whole gradient and runs its share
// of the tower's backward (Note [tower tensor parallelism] in vision_encoder.cpp). The projector
// always trains; the encoder's backward runs unless frozen. Several micro-batches in flight (a
// pipeline's 1F1B) share the tower's activations: the backward of one whose forward was not the
// tower's last re-runs the forward first (a recomputation of the tower alone).
//
// Note [present images]: images_per_sample (I) is the most images of any document of the
// dataset, a bound that sizes the buffers (and the planner's figures); a micro-batch's sequences
// usually hold fewer. The tower runs on the present images only: sequence b, whose placeholders
// number c_b (counted over the whole sequence, so after truncation), holds n_b = ceil(c_b / Np)
// of its images, its first n_b slots; load_images uploads them compacted, image j of sequence b
// to tower row base_b + j with base_b = n_0 + .. + n_(b-1), in sequence order, and the tower's
// forward and backward run on n = the sum of n_b images (none: the tower is skipped). A missing
// image's patches were never spliced, so the losses and gradients are those of the tower run on
// all B I slots (their rows added zero gradient), at a fraction of the cost: a dataset with one
// 8-image document no longer runs every micro-batch's tower on 8 images a sequence.
//
// Note [tower precision]: the tower computes in the model's compute type A on its compute copy
// of the weights (the 16-bit copy under --bf16 / --fp16, refreshed by every optimizer step as
// the language model's is) and accumulates its gradients into the fp32 (G) gradient arena, as
// the language model's layers do: its activations are A, its LayerNorm statistics and the
// attention's log-sum-exps G, and its attention reads A and merges in G (Note [bidirectional
// attention] in vision_encoder.cpp); the images are uploaded in A. Megatron's LLaVA runs its
// vision model in the same dtype as the language model. The splice is the op list's row
// scatter (moe_scatter_add_rows), which in 16 bits adds the patch to the row in fp32 and rounds
// the sum once; backward, the same op gathers the rows' gradient into the patches' (one route
// per row: a copy). Under --fp16 that gradient carries the loss scale, so the tower's gradients
// do too, and the scaler unscales and checks them with the rest of the arena.
//
// Note [images under context parallelism]: as Megatron's LLaVA, the splice is taken of the
// whole sequence before the CP split: load_images reads the whole sequences (B, S), counts each
// sequence's placeholders from its start (so patch k is the same patch on every CP rank) and
// keeps the rows this rank holds (cp_split's chunks r and 2 CP - 1 - r); an image's rows may
// straddle chunks and ranks. A patch whose row another CP rank holds gets image_rows -1 here.
// Megatron runs the whole tower on every CP rank; here the CP ranks share the images instead:
// of a micro-batch's n present images rank r encodes block r of per = ceil(n / CP) (image_share:
// images [r per, r per + per), fewer or none at the end), and an all-gather over the CP group
// gives every rank all n images' patches (each block padded to per images; the padding rows
// are never read, no placeholder maps there). Backward, each rank scatters its own rows'
// gradients into the (CP per Np, C) patch gradient, zero elsewhere, and a reduce-scatter hands
// rank r the sum for its block: every patch's row is on exactly one CP rank, so each sum is the
// one gradient plus zeros, exact in every precision. Each rank then runs the tower's backward on
// its images alone, and the trainer's DP x CP reduction of every dense gradient (the tower's
// included, and its distributed-optimizer shards) sums the blocks' parameter gradients into the
// whole micro-batch's. A CP rank's tower buffers and FLOPs are for ceil(B I / CP) images.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "model/gpt.h"
#include "parallel/context_split.h"

namespace lattice {

namespace {
// A host pixel in the compute type (rounded to nearest even in 16 bits).
template <typename A>
A host_value(float x) {
  if constexpr (std::is_same_v<A, bf16>)
    return to_bf16(x);
  else if constexpr (std::is_same_v<A, fp16>)
    return to_fp16(x);
  else
    return static_cast<A>(x);
}
}  // namespace

template <typename A>
Status GptModel<A>::create_vision() {
  if (!ops_.has_moe())  // Note [image rows]: the splice is the row scatter
    return Status::invalid_argument("--vision-model-type: " + device_.describe() +
                                    " lacks the row scatter the image splice uses");
  const VisionConfig& v = config_.vision;
  // Note [tower tensor parallelism] (vision_encoder.cpp): this rank's share, its partial sums
  // added over the TP group.
  TowerParallel<A> tp{tp_rank_, t_, [this](A* data, size_t count) {
                        tp_all_reduce(data, count, dtype_of<A>(), ReduceOp::kSum);
                      }};
  // Note [images under context parallelism]: a CP rank encodes at most ceil(B I / CP) images.
  const int per = image_share(B_ * v.images_per_sample).per;
  auto made = VisionEncoder<A>::create(v, per, device_, false, std::move(tp));
  if (!made) return made.status();
  vision_ = std::move(*made);
  vision_->bind(compute_, grads_);  // Note [vision tensors]: the arenas' first tensors
  const int end = layout_.vision_end_index();
  for (int i = 0; i < end; i++) {
    const ParamTensor& t = layout_.tensors()[i];
    const bool projector = t.name.rfind("multi_modal_projector.", 0) == 0;
    if (!t.frozen) (projector ? vision_trains_ : vision_encoder_trains_) = true;
    if (t.offset != vision_->tensors()[i].offset)
      return Status::internal("GptModel: the vision tower's tensors are not laid out as " + t.name +
                              " expects");
  }
  vision_trains_ = vision_trains_ || vision_encoder_trains_;
  const size_t patch_rows = static_cast<size_t>(cp_) * per * v.patches();
  vision_d_out_ = take<A>(patch_rows * C_, MemoryCategory::kWorkspace);
  if (cp_ > 1) {
    vision_gathered_ = take<A>(patch_rows * C_, MemoryCategory::kWorkspace);
    // A block's padding rows are sent but never read: zeros rather than whatever was there.
    if (vision_gathered_) device_.zero(vision_gathered_, patch_rows * C_ * sizeof(A), compute());
  }
  return blocks_.status();
}

template <typename A>
typename GptModel<A>::ImageShare GptModel<A>::image_share(int n) const {
  ImageShare s;
  s.per = (n + cp_ - 1) / cp_;
  s.first = std::min(n, cp_rank_ * s.per);
  s.count = std::min(s.per, n - s.first);
  const VisionConfig& v = config_.vision;
  s.offset = static_cast<size_t>(s.first) * v.num_channels * v.img_h * v.img_w;
  s.block = static_cast<size_t>(s.per) * v.patches() * C_;
  return s;
}

template <typename A>
const A* GptModel<A>::encode_images(const GptActivations<A>& a) {
  const VisionConfig& v = config_.vision;
  const ImageShare s = image_share(a.num_images);
  const A* mine = s.count > 0 ? vision_->forward(a.images + s.offset, s.count) : nullptr;
  if (cp_ == 1) return mine;
  // Note [images under context parallelism]: rank r's block of per images at row r per Np.
  A* own = vision_gathered_ + cp_rank_ * s.block;
  if (s.count > 0)
    device_.copy(own, mine, static_cast<size_t>(s.count) * v.patches() * C_ * sizeof(A),
                 CopyKind::kDeviceToDevice, compute());
  if (Status st = cp_comm_->all_gather(own, vision_gathered_, s.block, dtype_of<A>(), compute());
      !st)
    record_comm_error("context-parallel all-gather of the image patches", st);
  return vision_gathered_;
}

template <typename A>
Status GptModel<A>::load_images(GptActivations<A>& a, const int32_t* tokens, const float* images) {
  if (!vision_) return Status::internal("GptModel::load_images: a chunk without a vision tower");
  const VisionConfig& v = config_.vision;
  const int I = v.images_per_sample, Np = v.patches(), P = I * Np;
  const int32_t id = config_.image_token_id();
  // Note [images under context parallelism]: tokens are whole sequences (B, S); this rank's
  // rows are cp_split of them (T_ = S / CP of each), so its row of global position t is
  // cp_local_row (-1: another CP rank's).
  const int S = config_.seq_length;
  host_slot_.assign(N_, -1);
  host_rows_.assign(static_cast<size_t>(B_) * P, -1);
  host_images_.clear();
  const size_t pixels = static_cast<size_t>(v.num_channels) * v.img_h * v.img_w;
  int base = 0;  // the present images of sequences 0 .. b - 1 (Note [present images])
  host_ids_.resize(N_);
  if (cp_ > 1)
    cp_split(host_ids_.data(), tokens, B_, S, 1, cp_rank_, cp_);
  else
    std::copy(tokens, tokens + N_, host_ids_.begin());
  for (int b = 0; b < B_; b++) {
    int k = 0;
    for (int t = 0; t < S; t++) {
      if (tokens[static_cast<size_t>(b) * S + t] != id) continue;
      if (k == P)
        return Status::invalid_argument("sequence " + std::to_string(b) +
                                        " of the micro-batch has more than " + std::to_string(P) +
                                        " image placeholder tokens (" + std::to_string(I) +
                                        " image(s) of " + std::to_string(Np) +
                                        " patches); the data's placeholders and images disagree");
      const int32_t patch = base * Np + k++;  // counted over the whole sequence on every CP rank
      const int local = cp_ > 1 ? cp_local_row(t, S, cp_rank_, cp_) : t;
      if (local < 0) continue;  // another CP rank's row: its patch's gradient comes from there
      const size_t n = static_cast<size_t>(b) * T_ + local;
      host_slot_[n] = patch;
      host_rows_[patch] = static_cast<int32_t>(n);
      host_ids_[n] = -1;
    }
    const int present = (k + Np - 1) / Np;  // its first `present` images: tower rows base ..
    const float* first = images + static_cast<size_t>(b) * I * pixels;
    for (size_t i = 0; i < present * pixels; i++) host_images_.push_back(host_value<A>(first[i]));
    base += present;
  }
  a.num_images = base;
  // From pageable host memory: read before copy() returns, so the staging may be reused.
  const auto up = [&](void* to, const void* from, size_t bytes) {
    if (bytes > 0) device_.copy(to, from, bytes, CopyKind::kHostToDevice, compute());
  };
  up(a.image_slot, host_slot_.data(), host_slot_.size() * sizeof(int32_t));
  up(a.image_rows, host_rows_.data(), static_cast<size_t>(base) * Np * sizeof(int32_t));
  up(a.embed_tokens, host_ids_.data(), host_ids_.size() * sizeof(int32_t));
  up(a.images, host_images_.data(), host_images_.size() * sizeof(A));
  if (vision_owner_ == &a) vision_owner_ = nullptr;  // new images: its tower state is stale
  a.images_loaded = true;
  return Status::ok();
}

template <typename A>
void GptModel<A>::splice_images(GptActivations<A>& a) {
  if (!a.images_loaded)  // a caller's bug: the embedding would read stale rows
    throw std::logic_error("GptModel: a vision-language micro-batch ran without load_images");
  a.images_loaded = false;
  if (a.num_images == 0) return;  // no image rows (Note [present images])
  const A* patches = encode_images(a);
  vision_owner_ = &a;
  // This rank's rows (R of them from row0_ with sequence parallelism) gain their patches (Note
  // [tower precision]: added in fp32 and rounded once in 16 bits).
  ops_.moe_scatter_add_rows(a.residual, patches, a.image_slot + row0_, R_, C_, 1);
}

template <typename A>
void GptModel<A>::vision_backward(GptActivations<A>& a, const A* d_rows) {
  if (a.num_images == 0) return;  // the tower did not run: no gradient (Note [present images])
  const VisionConfig& v = config_.vision;
  const ImageShare s = image_share(a.num_images);
  if (vision_owner_ != &a) {  // another micro-batch ran the tower since: recompute a's
    if (s.count > 0) vision_->forward(a.images + s.offset, s.count);
    vision_owner_ = &a;
  }
  // The patches' gradient: their rows' (N, C) gradient gathered, one route per row (a copy);
  // under CP this rank's rows only, summed over the CP group into each rank's block of images
  // (Note [images under context parallelism]).
  const int M = a.num_images * v.patches();
  device_.zero(vision_d_out_, cp_ * s.block * sizeof(A), compute());  // CP 1: the M patches
  ops_.moe_scatter_add_rows(vision_d_out_, d_rows, a.image_rows, M, C_, 1);
  A* d_mine = vision_d_out_;
  if (cp_ > 1) {
    d_mine = vision_d_out_ + cp_rank_ * s.block;
    if (Status st =
            cp_comm_->reduce_scatter(vision_d_out_, d_mine, s.block, dtype_of<A>(), compute());
        !st)
      record_comm_error("context-parallel reduce-scatter of the image patches' gradient", st);
  }
  if (s.count > 0) vision_->backward(d_mine, nullptr, vision_encoder_trains_);
}

template class GptModel<float>;
template class GptModel<double>;
template class GptModel<bf16>;
template class GptModel<fp16>;

}  // namespace lattice
