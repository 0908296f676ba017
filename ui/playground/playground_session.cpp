// PlaygroundSession: loading and generating on the worker thread.
#include "playground/playground_session.h"

#include <QElapsedTimer>
#include <QFileInfo>
#include <QThread>
#include <algorithm>
#include <optional>
#include <span>

#include "infer/prompt_images.h"
#include "lattice/infer.h"
#include "lattice/kernels.h"
#include "lattice/tokenizer.h"
#include "lattice/train_options.h"
#include "playground/chat_prompt.h"
#include "playground/image_attachments.h"
#include "playground/playground_io.h"

namespace lattice::ui {

struct PlaygroundSession::State {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Generator> generator;
  TokenizerOptions tokenizerOptions;  // as the checkpoint recorded it
  std::optional<ChatTemplate> chat;   // none: chatProblem says why
  std::string chatProblem;
};

namespace {

QString text(const std::string& s) {
  return QString::fromStdString(s);
}

// What to load and with which tokenizer: a checkpoint directory with the tokenizer it recorded,
// as `lattice generate --load` sets them up on one process (app/cli/infer_setup.cpp), or a
// GPT-2 safetensors file with the model its tensors and config.json give, as `lattice
// generate --load-hf` without model flags (apply_hf_model), and GPT-2's own BPE when the file
// has GPT-2's 50257 ids and installers/fetch-gpt2-vocab.sh installed it (else NullTokenizer).
Result<InferenceOptions> modelToLoad(const std::string& path, TokenizerOptions& tokenizer) {
  InferenceOptions io;
  io.max_batch_size = 1;
  if (!QFileInfo(QString::fromStdString(path)).isFile()) {
    Result<TokenizerOptions> recorded = checkpoint_tokenizer(path, 0);
    if (!recorded) return recorded.status();
    tokenizer = *recorded;
    io.load = path;
    return io;
  }
  TrainOptions o;
  if (Status s = apply_hf_model(path, o); !s) return s;
  tokenizer = o.tokenizer;
  constexpr int kGpt2Vocabulary = 50257;
  const std::string gpt2 = gpt2_vocab_dir();
  if (o.model.vocab_size == kGpt2Vocabulary &&
      QFileInfo::exists(QString::fromStdString(gpt2 + "/vocab.json")) &&
      QFileInfo::exists(QString::fromStdString(gpt2 + "/merges.txt"))) {
    tokenizer = TokenizerOptions{};
    tokenizer.type = "GPT2BPETokenizer";
    tokenizer.vocab_file = gpt2 + "/vocab.json";
    tokenizer.merge_file = gpt2 + "/merges.txt";
  }
  io.load_hf = path;
  io.model = o.model;
  return io;
}

Result<ModelSummary> loadModel(const QString& path, std::unique_ptr<Tokenizer>& tokenizer,
                               std::unique_ptr<Generator>& generator, TokenizerOptions& recorded) {
  QElapsedTimer timer;
  timer.start();
  Result<InferenceOptions> io = modelToLoad(path.toStdString(), recorded);
  if (!io) return io.status();
  Result<std::unique_ptr<Tokenizer>> tok = make_tokenizer(recorded);
  if (!tok)
    return Status::invalid_argument("the checkpoint's tokenizer (" + recorded.type +
                                    ") cannot be opened: " + tok.status().message());
  if (!io->load_hf.empty()) io->model.vocab_size = (*tok)->vocab_size();
  Result<std::unique_ptr<Generator>> gen = Generator::load(*io, nullptr);
  if (!gen) return gen.status();
  const ModelConfig& m = (*gen)->config();
  if ((*tok)->vocab_size() > m.vocab_size)
    return Status::invalid_argument(
        "the tokenizer (" + (*tok)->type() + ") has " + std::to_string((*tok)->vocab_size()) +
        " ids; the model's vocabulary has " + std::to_string(m.vocab_size));
  tokenizer = std::move(*tok);
  generator = std::move(*gen);
  generator->set_tokenizer(tokenizer.get());
  ModelSummary s;
  s.path = path;
  s.iteration = checkpointIteration(path);
  s.layers = m.num_layers;
  s.hidden = m.hidden_size;
  s.heads = m.num_attention_heads;
  s.context = generator->context_length();
  s.vocab = m.vocab_size;
  s.parameters = m.num_parameters();
  s.tokenizer = text(tokenizer->type());
  std::string imageProblem;
  s.maxImages = maxPromptImages(m, s.context, &imageProblem);
  s.imageProblem = text(imageProblem);
  if (m.has_vision()) {
    s.imageTokens = m.vision.patches();
    s.imageSize = m.vision.img_h;
  }
  s.seconds = static_cast<double>(timer.nsecsElapsed()) * 1e-9;
  return s;
}

// The chat template of a loaded tokenizer (chat_template_for), bound to its EOD when the
// template ends turns with it; the reason when there is none.
Result<ChatTemplate> chatTemplateOf(const TokenizerOptions& options, const Tokenizer& tokenizer) {
  Result<ChatTemplate> chat = chat_template_for(options);
  if (!chat) return chat;
  if (chat->ends_turns_with_eod())
    if (Status s = chat->bind_eod(tokenizer); !s) return s;
  return chat;
}

// The request's prompt ids and images into `r`. Completion mode tokenizes as `lattice generate`:
// a BOS where the tokenizer has one (tokenize_with_bos), and with images each `<image>` as the
// tower's placeholder ids, "<image>\n" first when the prompt has no marker (tokenize_with_images).
// Chat mode encodes the rendered turns as they are (the template writes any BOS text itself, as
// transformers' apply_chat_template then tokenizes without special tokens), their `<image>`
// markers already in place.
Status promptIds(const ModelConfig& config, const Tokenizer& tok, const std::string& prompt,
                 const PlaygroundRequest& request, const QList<PromptImage>& images,
                 GenerationRequest& r) {
  if (images.isEmpty()) {
    r.prompt = request.chat.isEmpty() ? tokenize_with_bos(tok, prompt) : tok.encode(prompt);
    return Status::ok();
  }
  Result<std::vector<float>> pixels = promptImagePixels(config, images);
  if (!pixels) return pixels.status();
  r.images = std::move(*pixels);
  if (request.chat.isEmpty()) {
    Result<std::vector<int32_t>> ids =
        tokenize_with_images(tok, config, prompt, static_cast<size_t>(images.size()));
    if (!ids) return ids.status();
    r.prompt = std::move(*ids);
  } else {
    r.prompt = expand_image_markers(
        config, prompt, [&tok](std::string_view piece, bool) { return tok.encode(piece); });
  }
  return Status::ok();
}

// Threads for the model: one core is left to the UI thread, which wakes for every token. With
// all cores, OpenMP's spinning workers starve it, and on a loaded 2-core machine decoding
// ran 5-20x slower (docs/studio.md "Playground"). Per thread (OpenMP's setting is the
// calling thread's), so every task sets it.
void useModelThreads() {
  kernels::set_num_threads(std::max(1, QThread::idealThreadCount() - 1));
}

}  // namespace

size_t completeUtf8Length(const std::string& s) {
  // Back up over continuation bytes to the last lead byte; keep it when its sequence is whole.
  size_t i = s.size(), back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) i--, back++;
  if (i == 0) return s.size();
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  const size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return back + 1 >= need ? s.size() : i - 1;
}

PlaygroundSession::PlaygroundSession(QObject* parent)
    : QObject(parent), state_(std::make_shared<State>()) {
  pool_.setMaxThreadCount(1);
  pool_.setExpiryTimeout(-1);  // keep the thread: OpenMP's workers stay with it
}

PlaygroundSession::~PlaygroundSession() {
  stop();
  pool_.clear();
  pool_.waitForDone();
}

void PlaygroundSession::load(const QString& path) {
  stop();
  std::shared_ptr<State> state = state_;
  pool_.start([this, state, path] {
    useModelThreads();
    state->generator.reset();
    state->tokenizer.reset();
    state->chat.reset();
    Result<ModelSummary> summary =
        loadModel(path, state->tokenizer, state->generator, state->tokenizerOptions);
    if (summary) {
      Result<ChatTemplate> chat = chatTemplateOf(state->tokenizerOptions, *state->tokenizer);
      state->chatProblem = chat ? std::string() : chat.status().message();
      if (chat) state->chat = std::move(*chat);
      summary->chatTemplate = chat ? text(state->chat->name()) : QString();
      summary->chatProblem = text(state->chatProblem);
      emit loaded(*summary);
    } else
      emit loadFailed(path, text(summary.status().message()));
  });
}

quint64 PlaygroundSession::generate(const PlaygroundRequest& request) {
  const quint64 number = ++generations_;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> cancel = cancel_;
  std::shared_ptr<State> state = state_;
  pool_.start([this, state, cancel, request, number] {
    useModelThreads();
    if (!state->generator) {
      emit generationFailed(number, tr("No checkpoint is loaded."));
      return;
    }
    Generator& gen = *state->generator;
    const Tokenizer& tok = *state->tokenizer;
    GenerationRequest r;
    std::string prompt = request.prompt.toStdString();
    std::vector<std::string> chatStopTexts;
    QList<PromptImage> images = request.images;
    if (!request.chat.isEmpty()) {
      images.clear();
      for (const ChatTurn& turn : request.chat) images << turn.images;
      Result<std::string> rendered =
          state->chat ? chatPrompt(*state->chat, request.chat)
                      : Result<std::string>(Status::invalid_argument(
                            "no chat template for this checkpoint: " + state->chatProblem));
      if (!rendered) {
        emit generationFailed(number, text(rendered.status().message()));
        return;
      }
      prompt = *rendered;
      for (const QString& stop : chatStops(*state->chat))
        chatStopTexts.push_back(stop.toStdString());
    }
    if (Status s = promptIds(gen.config(), tok, prompt, request, images, r); !s) {
      emit generationFailed(number, text(s.message()));
      return;
    }
    r.tokens_to_generate = request.tokens;
    r.sampling = {static_cast<float>(request.temperature), request.topK,
                  static_cast<float>(request.topP), request.seed};
    r.stop_at_eod = request.stopAtEod;
    if (!request.stop.isEmpty()) r.stop = {request.stop.toStdString()};
    r.stop.insert(r.stop.end(), chatStopTexts.begin(), chatStopTexts.end());
    if (Status s = gen.check(r); !s) {
      emit generationFailed(number, text(s.message()));
      return;
    }
    QElapsedTimer timer;
    timer.start();
    // Text is decoded from the prompt's ids after its last image (all of them without one), as
    // `lattice generate` does: a tokenizer cannot decode the placeholders, shown as `<image>`.
    std::vector<int32_t> ids = prompt_text_tail(tok, r.prompt);
    const std::vector<int32_t> tail = ids;
    const std::string head =
        decode_prompt(tok, std::vector<int32_t>(r.prompt.begin(), r.prompt.end() - ids.size()));
    std::string shown = tok.decode(ids);  // the decoded text as far as it was signalled
    const std::string promptText = head + shown;
    emit started(number, text(promptText), static_cast<int>(r.prompt.size()));
    double firstMs = -1;
    auto onToken = [&](int, int32_t id, float logprob) {
      const double ms = static_cast<double>(timer.nsecsElapsed()) * 1e-6;
      if (firstMs < 0) firstMs = ms;
      std::string piece;
      if (!(r.stop_at_eod && id == gen.eod())) {
        ids.push_back(id);
        const std::string now = tok.decode(ids);
        const size_t whole = completeUtf8Length(now);
        // A decoding that rewrote what was shown (rare) waits for the final text.
        if (whole > shown.size() && now.compare(0, shown.size(), shown) == 0) {
          piece = now.substr(shown.size(), whole - shown.size());
          shown = now.substr(0, whole);
        }
      }
      emit tokenGenerated(number, text(piece), id, logprob, ms);
    };
    Result<std::vector<GenerationResult>> out =
        gen.generate({r}, onToken, [&cancel](int) { return cancel->load(); });
    if (!out) {
      emit generationFailed(number, text(out.status().message()));
      return;
    }
    const GenerationResult& res = (*out)[0];
    GenerationSummary s;
    s.promptText = text(promptText);
    std::vector<int32_t> all = tail;
    all.insert(all.end(), res.tokens.begin(), res.tokens.end());
    if (res.finish == FinishReason::kEod) all.pop_back();
    std::string full = head + tok.decode(all);
    if (res.finish == FinishReason::kStop) {
      // res.text is the continuation's own text cut before the stop text; cut the whole text
      // at the same place (a tokenizer may join prompt and continuation with a separator).
      const std::string generated = tok.decode(res.tokens);
      full = full.size() >= generated.size() &&
                     full.compare(full.size() - generated.size(), generated.size(), generated) == 0
                 ? full.substr(0, full.size() - generated.size() + res.text.size())
                 : promptText + res.text;
    }
    s.text = text(full);
    s.reply = text(res.text);
    s.tokens = static_cast<int>(res.tokens.size());
    s.promptTokens = static_cast<int>(r.prompt.size());
    s.firstTokenMs = std::max(0.0, firstMs);
    s.elapsedMs = static_cast<double>(timer.nsecsElapsed()) * 1e-6;
    s.finish = QString::fromLatin1(finish_reason_name(res.finish));
    emit generated(number, s);
  });
  return number;
}

void PlaygroundSession::stop() {
  if (cancel_) cancel_->store(true);
}

}  // namespace lattice::ui
