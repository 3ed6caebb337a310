// specrt: the speculative loop of llama-server's slot, one cycle per call, with
// per-cycle statistics and settings that change between cycles.
//
// The loop mirrors tools/server/server-context.cpp of the pinned llama.cpp so
// that what the lab measures is what llama-server does with the same flags:
//   prompt:  decode the whole prompt (feeding the speculators), sample token 0
//   cycle:   draft from `sampled` -> decode [sampled, d0..dn-1] on the target ->
//            sample-and-match (common_sampler_sample_and_accept_n) -> keep the
//            accepted prefix plus the bonus token -> trim both caches.
// Acceptance is counted in exactly one place: right after sample-and-match.

#include "specrt.h"

#include "chat.h"
#include "common.h"
#include "llama.h"
#include "llama-ext.h"
#include "log.h"
#include "sampling.h"
#include "speculative.h"
#include "gguf.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

// untimed passes before specrt_time_forward's timed ones, at least this many and this long (see there)
constexpr int32_t WARMUP_PASSES = 2;
constexpr double  WARMUP_MS     = 30.0;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

thread_local std::string g_load_error;

// llama.cpp reports the reason for a failed load only through its log; keep the
// last error lines so the caller gets them in the error message.
std::mutex       g_log_mu;
std::string      g_log_tail;
std::atomic<int> g_verbose{0};

void log_callback(ggml_log_level level, const char * text, void * /*user*/) {
    if (g_verbose.load()) {
        fputs(text, stderr);
    }
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        std::lock_guard<std::mutex> lock(g_log_mu);
        g_log_tail += text;
        if (g_log_tail.size() > 4000) {
            g_log_tail.erase(0, g_log_tail.size() - 4000);
        }
    }
}

std::string take_log_tail() {
    std::lock_guard<std::mutex> lock(g_log_mu);
    std::string out;
    out.swap(g_log_tail);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) {
        out.pop_back();
    }
    return out;
}

void install_logging(int verbose) {
    static std::once_flag once;
    g_verbose.store(verbose);
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        common_log_set_verbosity_thold(-1);  // common's own LOG_* stay quiet unless verbose
        llama_backend_init();
    });
    if (verbose) {
        common_log_set_verbosity_thold(LOG_LEVEL_INFO);
    }
}

std::vector<std::string> split_types(const std::string & s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (!item.empty()) {
            out.push_back(item);
        }
    }
    return out;
}

bool uses_draft_context(common_speculative_type t) {
    return t == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE || t == COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3 ||
           t == COMMON_SPECULATIVE_TYPE_DRAFT_MTP || t == COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH ||
           t == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK;
}

struct spec_deleter {
    void operator()(common_speculative * s) const { common_speculative_free(s); }
};
using spec_ptr = std::unique_ptr<common_speculative, spec_deleter>;

}  // namespace

struct specrt_engine {
    common_params params;                       // target params; .speculative holds the active spec settings
    common_init_result_ptr init_tgt;
    common_speculative_init_result_ptr init_dft;
    llama_model   * model_tgt = nullptr;
    llama_context * ctx_tgt   = nullptr;
    llama_context * ctx_dft   = nullptr;        // draft model context or MTP context, may be null
    const llama_vocab * vocab = nullptr;
    bool has_draft_model = false;
    bool draft_is_assistant = false;            // a gemma4-assistant file: drafts as draft-mtp, on the target's KV
    int32_t k_limit = 64;

    // How each cache drops a rejected draft, as llama-server asks (common_context_can_seq_rm):
    // PART trims the tail; a recurrent or hybrid model (FULL) cannot, so the cycle saves its
    // state before verifying and, on a partial accept, restores it and replays the accepted
    // tokens; RS trims up to llama_n_rs_seq tokens from stored recurrent snapshots.
    common_context_seq_rm_type rm_tgt = COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    common_context_seq_rm_type rm_dft = COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    common_prompt_checkpoint ckpt;              // the caches' state before the current draft
    std::string error;

    // settings handed over by set_spec / set_sampling, applied at the next cycle
    std::mutex settings_mu;
    bool spec_pending = false;
    bool sampling_pending = false;
    common_params_speculative pending_spec;
    common_params_sampling pending_sampling;
    int32_t settings_epoch = 0;

    // the speculators live across generations, as in llama-server, so n-gram
    // pools (ngram-mod, ngram-cache) keep learning from one prompt to the next;
    // they are rebuilt when the speculation settings change and after specrt_forget
    spec_ptr spec;
    bool spec_dirty = true;

    // one generation
    common_sampler_ptr smpl;
    common_batch batch;
    llama_tokens prompt_input;                  // tokenized prompt, processed by the prompt cycle
    llama_tokens tokens_kv;                     // every token in the target's cache, in order
    llama_tokens draft;
    llama_token sampled = LLAMA_TOKEN_NULL;     // the last token sampled, not yet in the cache
    int32_t max_tokens = 0;
    int32_t n_generated = 0;
    int32_t cycle_index = 0;
    bool active = false;
    bool finished = false;
    bool baseline = false;
    std::atomic<bool> cancel{false};
    std::string text;

    // the target's chat templates, parsed at the first chat request (a base model never needs them)
    common_chat_templates_ptr chat_tmpls;
    // the last conversation rendered, and where its template puts the message delimiters: a prompt that
    // is that text is split into message spans, as llama-server splits a chat request's
    std::string chat_prompt;
    common_chat_msg_delimiters chat_delims;
    common_chat_msg_spans prompt_spans;         // this generation's prompt (empty for raw text)

    int fail(int code, const std::string & msg) {
        error = msg;
        return code;
    }
};

namespace {

// the speculators this generation uses: none for a baseline
common_speculative * active_spec(const specrt_engine * e) {
    return e->baseline ? nullptr : e->spec.get();
}

bool abort_cb(void * data) {
    return static_cast<specrt_engine *>(data)->cancel.load();
}

// llama.cpp's load progress, forwarded with the stage (target or draft) it belongs to
struct load_progress {
    specrt_progress_fn fn;
    void * user;
    int32_t stage;
    bool stopped = false;
};

bool load_progress_cb(float progress, void * data) {
    auto * lp = static_cast<load_progress *>(data);
    if (!lp->fn(lp->stage, progress, lp->user)) {
        lp->stopped = true;
        return false;
    }
    return true;
}

void seq_rm_both(specrt_engine * e, llama_pos p0) {
    llama_memory_seq_rm(llama_get_memory(e->ctx_tgt), 0, p0, -1);
    if (e->ctx_dft) {
        llama_memory_seq_rm(llama_get_memory(e->ctx_dft), 0, p0, -1);
    }
}

bool spec_uses_draft_model(const specrt_engine * e) {
    for (auto t : e->params.speculative.types) {
        if (t == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE) {
            return true;
        }
    }
    return false;
}

// A draft model that sat out some cycles (ngram-only settings, a baseline) has
// a cache that stops short of the target's; feed it the missing tokens so a
// switch to draft-simple mid-run drafts from the right context.
int catch_up_draft(specrt_engine * e) {
    if (!e->ctx_dft || !e->has_draft_model || !spec_uses_draft_model(e)) {
        return SPECRT_OK;
    }
    const llama_pos have = llama_memory_seq_pos_max(llama_get_memory(e->ctx_dft), 0) + 1;
    const llama_pos need = (llama_pos) e->tokens_kv.size();
    if (have >= need) {
        return SPECRT_OK;
    }
    const int32_t n_batch = (int32_t) llama_n_batch(e->ctx_dft);
    common_batch b(e->ctx_dft);
    for (llama_pos p = have; p < need; p += n_batch) {
        b.clear();
        const llama_pos end = std::min<llama_pos>(need, p + n_batch);
        for (llama_pos i = p; i < end; ++i) {
            b.add(e->tokens_kv[i], i, 0, i == end - 1);
        }
        if (llama_process(e->ctx_dft, LLAMA_PROCESS_TYPE_DECODE, b.get()) != 0) {
            if (e->cancel.load()) {
                return e->fail(SPECRT_ERR_CANCELLED, "cancelled");
            }
            return e->fail(SPECRT_ERR_DECODE, "the draft model failed to catch up with the target's context");
        }
    }
    return SPECRT_OK;
}

// (Re)creates the speculators from e->params.speculative. Mid-run the new
// speculators are seeded with every token so far, as llama-server seeds a
// slot's speculators with its prompt.
int build_spec(specrt_engine * e, bool mid_run) {
    e->spec.reset();
    e->spec_dirty = false;
    const auto & types = e->params.speculative.types;
    if (types.empty() || types[0] == COMMON_SPECULATIVE_TYPE_NONE) {
        return SPECRT_OK;
    }
    e->params.speculative.draft.ctx_tgt = e->ctx_tgt;
    e->params.speculative.draft.ctx_dft = e->ctx_dft;
    try {
        e->spec.reset(common_speculative_init(e->params.speculative, 1));
    } catch (const std::exception & ex) {
        const std::string msg = ex.what();
        const int code = msg.find("vocab") != std::string::npos ? SPECRT_ERR_INCOMPATIBLE : SPECRT_ERR_INVALID_ARG;
        return e->fail(code, "could not set up speculation: " + msg);
    }
    if (!e->spec) {
        return e->fail(SPECRT_ERR_INVALID_ARG, "no speculative implementation could be created for these settings");
    }
    if (mid_run && !e->baseline) {
        int rc = catch_up_draft(e);
        if (rc != SPECRT_OK) {
            return rc;
        }
        common_speculative_begin(e->spec.get(), 0, e->tokens_kv);
    }
    return SPECRT_OK;
}

int build_sampler(specrt_engine * e) {
    common_params_sampling sp = e->params.sampling;
    e->smpl.reset(common_sampler_init(e->model_tgt, sp));
    if (!e->smpl) {
        return e->fail(SPECRT_ERR_INVALID_ARG, "could not create the sampler for these sampling settings");
    }
    // llama-server primes the sampler's history with the prompt (penalties)
    for (llama_token id : e->tokens_kv) {
        common_sampler_accept(e->smpl.get(), id, false);
    }
    return SPECRT_OK;
}

bool same_ngram_map(const common_params_speculative_ngram_map & a, const common_params_speculative_ngram_map & b) {
    return a.size_n == b.size_n && a.size_m == b.size_m && a.min_hits == b.min_hits;
}

// the fields specrt_set_spec controls; equal settings keep the speculators (and their n-gram pools)
bool same_spec(const common_params_speculative & a, const common_params_speculative & b) {
    return a.types == b.types && a.draft.n_max == b.draft.n_max && a.draft.n_min == b.draft.n_min &&
           a.draft.p_min == b.draft.p_min && same_ngram_map(a.ngram_simple, b.ngram_simple) &&
           same_ngram_map(a.ngram_map_k, b.ngram_map_k) && same_ngram_map(a.ngram_map_k4v, b.ngram_map_k4v) &&
           a.ngram_mod.n_match == b.ngram_mod.n_match && a.ngram_mod.n_min == b.ngram_mod.n_min &&
           a.ngram_mod.n_max == b.ngram_mod.n_max;
}

// Moves pending settings into effect. Returns a status.
int apply_pending(specrt_engine * e) {
    bool spec_changed = false;
    bool sampling_changed = false;
    {
        std::lock_guard<std::mutex> lock(e->settings_mu);
        if (e->spec_pending) {
            spec_changed = !same_spec(e->params.speculative, e->pending_spec);
            e->params.speculative = e->pending_spec;
            e->spec_pending = false;
        }
        if (e->sampling_pending) {
            e->params.sampling = e->pending_sampling;
            e->sampling_pending = false;
            sampling_changed = true;
        }
    }
    if (spec_changed || sampling_changed) {
        e->settings_epoch++;
    }
    if (spec_changed) {
        e->spec_dirty = true;
    }
    if (spec_changed && e->active && e->cycle_index > 0) {
        int rc = build_spec(e, true);
        if (rc != SPECRT_OK) {
            return rc;
        }
    }
    if (sampling_changed && e->active && e->cycle_index > 0) {
        return build_sampler(e);
    }
    return SPECRT_OK;
}

void emit(specrt_engine * e, const llama_tokens & ids, specrt_cycle * out) {
    e->text.clear();
    out->n_emitted = 0;
    for (llama_token id : ids) {
        if (e->finished) {
            break;
        }
        e->n_generated++;
        const int32_t slot = out->n_emitted < SPECRT_MAX_CYCLE_TOKENS ? out->n_emitted++ : -1;
        if (slot >= 0) {
            out->tokens[slot] = id;
            out->piece_bytes[slot] = 0;
        }
        if (llama_vocab_is_eog(e->vocab, id)) {
            out->is_eog = 1;
            e->finished = true;
            break;
        }
        const std::string piece = common_token_to_piece(e->ctx_tgt, id, false);
        e->text += piece;
        if (slot >= 0) {
            out->piece_bytes[slot] = (int32_t) piece.size();
        }
        if (e->max_tokens > 0 && e->n_generated >= e->max_tokens) {
            e->finished = true;
        }
    }
    out->text = e->text.c_str();
}

// Where a cycle's time went, as each step measured it.
struct cycle_times {
    double draft_ms  = 0.0;  // drafting plus feeding the speculators
    double decode_ms = 0.0;  // the target's llama_process calls
    double sample_ms = 0.0;  // sampling (and matching the draft) on the target's logits
};

// The timing fields of a cycle; other_ms is what the steps did not measure.
void record_times(specrt_cycle * out, clock_type::time_point t0, const cycle_times & t) {
    out->draft_ms = t.draft_ms;
    out->verify_ms = t.decode_ms + t.sample_ms;
    out->decode_ms = t.decode_ms;
    out->cycle_ms = ms_since(t0);
    out->other_ms = std::max(0.0, out->cycle_ms - out->draft_ms - out->verify_ms);
}

// The speculators see each batch the target decoded (a draft model decodes it too), as in
// llama-server, so their state follows the target's cache.
int feed_speculators(specrt_engine * e, common_speculative * spec, const char * failure, cycle_times & t) {
    if (!spec) {
        return SPECRT_OK;
    }
    const auto tp = clock_type::now();
    if (!common_speculative_process(spec, e->batch)) {
        if (e->cancel.load()) {  // the abort callback stopped the draft model
            return e->fail(SPECRT_ERR_CANCELLED, "cancelled");
        }
        return e->fail(SPECRT_ERR_DECODE, failure);
    }
    t.draft_ms += ms_since(tp);
    return SPECRT_OK;
}

// Where llama-server ends each batch of a fresh prompt (server-context.cpp, update_slots). Batches hold
// n_batch tokens; where the target's cache cannot roll everything back (a sliding window, a recurrent
// state) the server also keeps context checkpoints, so it ends a batch 4 + n_ubatch and 4 tokens before
// the prompt's end and, in a conversation, before the first user message and the last one. The batch
// shapes change llama.cpp's float sums (and so, now and then, a greedy token), hence the same cuts here.
std::vector<int32_t> prompt_batch_ends(const specrt_engine * e, int32_t n_prompt) {
    const int32_t n_batch = (int32_t) llama_n_batch(e->ctx_tgt);
    const int32_t n_ubatch = (int32_t) llama_n_ubatch(e->ctx_tgt);
    const int32_t n_swa = e->params.swa_full ? 0 : llama_model_n_swa(e->model_tgt);
    const bool checkpoints = e->params.n_ctx_checkpoints > 0 &&
                             (e->rm_tgt == COMMON_CONTEXT_SEQ_RM_TYPE_FULL ||
                              e->rm_tgt == COMMON_CONTEXT_SEQ_RM_TYPE_RS || n_swa > 0);
    const common_chat_msg_spans & spans = e->prompt_spans;
    const int32_t last_user = spans.last_user_message_pos();
    const int32_t offsets[] = {4 + n_ubatch, 4};
    std::vector<int32_t> ends;
    int64_t last_checkpoint = -1;  // n_tokens of the newest checkpoint the server would have made
    int32_t pos = 0;
    while (pos < n_prompt) {
        const int32_t start = pos;
        while (pos < n_prompt && pos - start < n_batch) {
            ++pos;
            if (checkpoints && spans.is_user_start(pos) &&
                (pos == last_user || last_checkpoint < 0 || pos > last_checkpoint + e->params.checkpoint_min_step)) {
                break;
            }
            bool cut = false;
            for (const int32_t offset : offsets) {
                cut = cut || (checkpoints && n_prompt == pos + std::min(n_batch, offset));
            }
            if (cut) {
                break;
            }
        }
        // the checkpoint the server makes before decoding this batch (never before the first one)
        const bool near_end = n_prompt < pos + n_ubatch;
        const bool user_start = spans.is_user_start(start);
        if (checkpoints && start > 0 && (pos == n_prompt || user_start || near_end) &&
            (last_checkpoint < 0 || start == last_user || near_end ||
             start > last_checkpoint + e->params.checkpoint_min_step)) {
            last_checkpoint = start;
        }
        ends.push_back(pos);
    }
    return ends;
}

int prompt_cycle(specrt_engine * e, specrt_cycle * out) {
    const auto t0 = clock_type::now();
    const int32_t n_ctx = (int32_t) llama_n_ctx(e->ctx_tgt);
    const int32_t n_prompt = (int32_t) e->prompt_input.size();
    if (n_prompt >= n_ctx - 1) {
        return e->fail(SPECRT_ERR_CONTEXT_FULL, "the prompt has " + std::to_string(n_prompt) +
                       " tokens and does not fit the context of " + std::to_string(n_ctx));
    }
    llama_memory_clear(llama_get_memory(e->ctx_tgt), true);
    if (e->ctx_dft) {
        llama_memory_clear(llama_get_memory(e->ctx_dft), true);
    }
    e->tokens_kv.clear();
    e->ckpt.clear();
    int rc = SPECRT_OK;
    if (e->spec_dirty) {
        rc = build_spec(e, false);
        if (rc != SPECRT_OK) {
            return rc;
        }
    }
    rc = build_sampler(e);
    if (rc != SPECRT_OK) {
        return rc;
    }

    cycle_times t;
    int32_t last_idx = 0;
    int32_t p = 0;
    for (const int32_t end : prompt_batch_ends(e, n_prompt)) {
        e->batch.clear();
        for (int32_t i = p; i < end; ++i) {
            e->batch.add(e->prompt_input[i], i, 0, i == n_prompt - 1);
        }
        last_idx = end - p - 1;
        const auto td = clock_type::now();
        const int ret = llama_process(e->ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, e->batch.get());
        t.decode_ms += ms_since(td);
        if (e->cancel.load()) {
            return e->fail(SPECRT_ERR_CANCELLED, "cancelled");
        }
        if (ret != 0) {
            return e->fail(SPECRT_ERR_DECODE, "the target failed to process the prompt (llama_process returned " +
                           std::to_string(ret) + ")");
        }
        rc = feed_speculators(e, active_spec(e), "the speculators failed to process the prompt", t);
        if (rc != SPECRT_OK) {
            return rc;
        }
        p = end;
    }
    e->tokens_kv = e->prompt_input;
    if (active_spec(e)) {
        common_speculative_begin(active_spec(e), 0, e->tokens_kv);
    }
    for (llama_token id : e->tokens_kv) {
        common_sampler_accept(e->smpl.get(), id, false);
    }

    const auto tv = clock_type::now();
    const llama_token id = common_sampler_sample(e->smpl.get(), e->ctx_tgt, last_idx);
    common_sampler_accept(e->smpl.get(), id, true);
    t.sample_ms = ms_since(tv);
    e->sampled = id;

    out->is_prompt = 1;
    out->n_prompt = n_prompt;
    out->draft_n_max = e->params.speculative.draft.n_max;
    emit(e, {id}, out);
    out->n_past = (int32_t) e->tokens_kv.size();
    record_times(out, t0, t);
    return SPECRT_OK;
}

// The largest draft that fits the context and the token budget (llama-server's get_n_draft_max).
int32_t draft_room(const specrt_engine * e, int32_t n_ctx) {
    int32_t n = n_ctx - (int32_t) e->tokens_kv.size() - 2;
    if (e->max_tokens > 0) {
        n = std::min(n, e->max_tokens - e->n_generated - 1);
    }
    return n;
}

// Where the caches end before a draft, and the state of a draft model that cannot trim its
// recurrent state (it decodes its own proposals while drafting), as llama-server saves them.
void save_before_draft(specrt_engine * e) {
    llama_memory_t mem = llama_get_memory(e->ctx_tgt);
    e->ckpt.update_pos((int64_t) e->tokens_kv.size(), llama_memory_seq_pos_min(mem, 0),
                       llama_memory_seq_pos_max(mem, 0));
    if (e->ctx_dft && e->rm_dft == COMMON_CONTEXT_SEQ_RM_TYPE_FULL) {
        e->ckpt.update_dft(e->ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    }
}

// True where dropping n rejected tokens needs the saved state rather than a trim.
bool needs_checkpoint(common_context_seq_rm_type type, llama_context * ctx, size_t n) {
    return type == COMMON_CONTEXT_SEQ_RM_TYPE_FULL ||
           (type == COMMON_CONTEXT_SEQ_RM_TYPE_RS && n > llama_n_rs_seq(ctx));
}

// Before verifying a draft: the target's (and an RS draft's) recurrent state, where a
// partial accept could not be trimmed away.
void save_before_verify(specrt_engine * e) {
    if (needs_checkpoint(e->rm_tgt, e->ctx_tgt, e->draft.size())) {
        e->ckpt.update_tgt(e->ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    }
    if (e->ctx_dft && e->rm_dft == COMMON_CONTEXT_SEQ_RM_TYPE_RS && e->draft.size() > llama_n_rs_seq(e->ctx_dft)) {
        e->ckpt.update_dft(e->ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    }
}

// Draft: the speculators propose up to n_max tokens to follow `sampled`, into e->draft.
int make_draft(specrt_engine * e, common_speculative * spec, int32_t n_max, cycle_times & t) {
    e->draft.clear();
    if (!spec || n_max <= 0) {
        return SPECRT_OK;
    }
    const auto td = clock_type::now();
    save_before_draft(e);
    common_speculative_get_draft_params(spec, 0) = {
        /* .drafting = */ true,
        /* .n_max    = */ n_max,
        /* .pos0     = */ (llama_pos) e->tokens_kv.size(),
        /* .id_last  = */ e->sampled,
        /* .prompt   = */ &e->tokens_kv,
        /* .result   = */ &e->draft,
    };
    common_speculative_draft(spec);
    if (e->cancel.load()) {
        return e->fail(SPECRT_ERR_CANCELLED, "cancelled");
    }
    if (e->ctx_dft) {
        // drop what the draft model decoded while drafting (a recurrent draft gets its saved state
        // back first); process() feeds it the verified batch
        if (e->rm_dft == COMMON_CONTEXT_SEQ_RM_TYPE_FULL) {
            e->ckpt.load_dft(e->ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
        llama_memory_seq_rm(llama_get_memory(e->ctx_dft), 0, e->ckpt.pos_max + 1, -1);
    }
    if (!e->draft.empty()) {
        save_before_verify(e);
    }
    t.draft_ms += ms_since(td);
    return SPECRT_OK;
}

// Verify: the target decodes [sampled, d0..dn-1] in one batch with logits at every
// position, so a single pass can check the whole draft.
int verify_draft(specrt_engine * e, cycle_times & t) {
    e->batch.clear();
    const llama_pos pos0 = (llama_pos) e->tokens_kv.size();
    e->batch.add(e->sampled, pos0, 0, true);
    for (size_t i = 0; i < e->draft.size(); ++i) {
        e->batch.add(e->draft[i], pos0 + 1 + (llama_pos) i, 0, true);
    }
    const auto tv = clock_type::now();
    const int ret = llama_process(e->ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, e->batch.get());
    t.decode_ms += ms_since(tv);
    if (e->cancel.load()) {
        return e->fail(SPECRT_ERR_CANCELLED, "cancelled");
    }
    if (ret != 0) {
        return e->fail(SPECRT_ERR_DECODE, "the target failed to verify a batch (llama_process returned " +
                       std::to_string(ret) + ")");
    }
    return SPECRT_OK;
}

// Accept: sample on the verify batch's logits. Returns the accepted draft prefix plus one
// token the target chose itself (the bonus token).
llama_tokens sample_accepted(specrt_engine * e, cycle_times & t) {
    const auto ts = clock_type::now();
    llama_tokens ids;
    if (e->draft.empty()) {
        const llama_token id = common_sampler_sample(e->smpl.get(), e->ctx_tgt, 0);
        common_sampler_accept(e->smpl.get(), id, true);
        ids.push_back(id);
    } else {
        // keep draft tokens while they equal what the target samples; the
        // first mismatch (or the token after a full match) is the bonus token
        ids = common_sampler_sample_and_accept_n(e->smpl.get(), e->ctx_tgt, e->draft);
    }
    t.sample_ms += ms_since(ts);
    return ids;
}

// Trim: `sampled` and the accepted tokens stay in the caches, the rejected rest of the
// draft leaves both; the bonus token is not decoded yet, so it becomes the next `sampled`.
void keep_accepted(specrt_engine * e, const llama_tokens & ids) {
    e->tokens_kv.push_back(e->sampled);
    e->tokens_kv.insert(e->tokens_kv.end(), ids.begin(), ids.end() - 1);
    e->sampled = ids.back();
    seq_rm_both(e, (llama_pos) e->tokens_kv.size());
}

// One cycle after the prompt, shaped like llama.cpp's speculative-simple loop:
// draft -> verify in one target batch -> accept n -> trim. A baseline runs the
// same cycle with no speculators, so it drafts nothing and verifies one token.
int spec_cycle(specrt_engine * e, specrt_cycle * out) {
    const auto t0 = clock_type::now();
    const int32_t n_ctx = (int32_t) llama_n_ctx(e->ctx_tgt);
    if ((int32_t) e->tokens_kv.size() + 1 >= n_ctx) {
        e->finished = true;  // context full: llama-server stops the same way
        return SPECRT_DONE;
    }
    common_speculative * spec = active_spec(e);
    cycle_times t;
    int rc = make_draft(e, spec, draft_room(e, n_ctx), t);
    if (rc != SPECRT_OK) {
        return rc;
    }
    const int32_t n_drafted = (int32_t) e->draft.size();
    llama_tokens ids;
    bool replay = false;
    for (;;) {
        rc = verify_draft(e, t);
        if (rc == SPECRT_OK) {
            rc = feed_speculators(e, spec, "the speculators failed to process the verified batch", t);
        }
        if (rc != SPECRT_OK) {
            return rc;
        }
        // only a cache that may need the saved state pays for a copy of the sampler to rewind
        const bool may_replay = !e->draft.empty() && needs_checkpoint(e->rm_tgt, e->ctx_tgt, e->draft.size());
        common_sampler_ptr smpl_save(may_replay ? common_sampler_clone(e->smpl.get()) : nullptr);
        ids = sample_accepted(e, t);
        const size_t n_rollback = e->draft.size() + 1 - ids.size();
        if (n_rollback == 0 || !needs_checkpoint(e->rm_tgt, e->ctx_tgt, n_rollback)) {
            break;
        }
        // A partial accept on a cache that cannot drop the rejected tail: back to the state saved
        // before the draft, then verify the accepted tokens and the target's own token again as
        // the draft (all of them pass), exactly as llama-server's replay does in its next step.
        e->ckpt.load_tgt(e->ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        if (e->ctx_dft) {
            e->ckpt.load_dft(e->ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
        seq_rm_both(e, e->ckpt.pos_max + 1);
        common_sampler_copy(smpl_save.get(), e->smpl.get());
        e->draft = ids;
        replay = true;
    }

    // the one place acceptance is counted; a replay's first token was the target's own, not the draft's
    int32_t n_accepted = (int32_t) ids.size() - 1;
    if (spec && !e->draft.empty()) {
        common_speculative_accept(spec, 0, (uint16_t) n_accepted);
    }
    if (replay && n_accepted > 0) {
        n_accepted--;
    }
    keep_accepted(e, ids);

    out->n_drafted = n_drafted;
    out->n_accepted = n_accepted;
    out->replayed = replay ? 1 : 0;
    out->draft_n_max = e->params.speculative.draft.n_max;
    emit(e, ids, out);
    out->n_past = (int32_t) e->tokens_kv.size();
    record_times(out, t0, t);
    return SPECRT_OK;
}

int parse_spec(specrt_engine * e, const specrt_spec_params * p, common_params_speculative & spec) {
    spec = e->params.speculative;
    std::vector<common_speculative_type> types;
    try {
        types = common_speculative_types_from_names(split_types(p->types ? p->types : "none"));
    } catch (const std::exception & ex) {
        return e->fail(SPECRT_ERR_INVALID_ARG, std::string(ex.what()) + " (known: " + common_speculative_all_types_str() + ")");
    }
    if (types.empty()) {
        types = {COMMON_SPECULATIVE_TYPE_NONE};
    }
    for (auto t : types) {
        if (uses_draft_context(t) && !e->ctx_dft) {
            return e->fail(SPECRT_ERR_INVALID_ARG, "speculative type '" + common_speculative_type_to_str(t) +
                           "' needs a draft model (or, for draft-mtp, a target with MTP layers)");
        }
        if (t == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE && !e->has_draft_model) {
            return e->fail(SPECRT_ERR_INVALID_ARG, "draft-simple needs a separate draft model");
        }
        // a gemma4-assistant drafts from the target's hidden state and KV cache: draft-mtp only
        if (e->draft_is_assistant && uses_draft_context(t) && t != COMMON_SPECULATIVE_TYPE_DRAFT_MTP) {
            return e->fail(SPECRT_ERR_INVALID_ARG, "the draft is a gemma4-assistant file, which drafts as draft-mtp only, not " +
                           common_speculative_type_to_str(t));
        }
        if (t == COMMON_SPECULATIVE_TYPE_DRAFT_MTP && e->has_draft_model && !e->draft_is_assistant) {
            return e->fail(SPECRT_ERR_INVALID_ARG, "draft-mtp needs a target with MTP layers or a gemma4-assistant draft, "
                           "not a separate draft model");
        }
    }
    auto check = [&](const char * name, int32_t v, int32_t lo, int32_t hi) {
        if (v < lo || v > hi) {
            e->fail(SPECRT_ERR_INVALID_ARG, std::string(name) + " must be between " + std::to_string(lo) + " and " +
                    std::to_string(hi) + ", got " + std::to_string(v));
            return false;
        }
        return true;
    };
    if (!check("draft_n_max", p->draft_n_max, 0, e->k_limit) || !check("draft_n_min", p->draft_n_min, 0, p->draft_n_max) ||
        !check("ngram_size_n", p->ngram_size_n, 1, 1024) || !check("ngram_size_m", p->ngram_size_m, 1, e->k_limit) ||
        !check("ngram_min_hits", p->ngram_min_hits, 1, 1 << 15) || !check("ngram_mod_n_match", p->ngram_mod_n_match, 1, 1024) ||
        !check("ngram_mod_n_max", p->ngram_mod_n_max, 1, e->k_limit) ||
        !check("ngram_mod_n_min", p->ngram_mod_n_min, 0, p->ngram_mod_n_max)) {
        return SPECRT_ERR_INVALID_ARG;
    }
    if (!(p->draft_p_min >= 0.0f && p->draft_p_min <= 1.0f)) {
        return e->fail(SPECRT_ERR_INVALID_ARG, "draft_p_min must be between 0 and 1");
    }
    spec.types = types;
    spec.draft.n_max = p->draft_n_max;
    spec.draft.n_min = p->draft_n_min;
    spec.draft.p_min = p->draft_p_min;
    for (auto * m : {&spec.ngram_simple, &spec.ngram_map_k, &spec.ngram_map_k4v}) {
        m->size_n = (uint16_t) p->ngram_size_n;
        m->size_m = (uint16_t) p->ngram_size_m;
        m->min_hits = (uint16_t) p->ngram_min_hits;
    }
    spec.ngram_mod.n_match = p->ngram_mod_n_match;
    spec.ngram_mod.n_min = p->ngram_mod_n_min;
    spec.ngram_mod.n_max = p->ngram_mod_n_max;
    return SPECRT_OK;
}

// Expert weights kept on the CPU, as llama-server's --n-cpu-moe N (the first N layers) and
// --cpu-moe (N < 0: all) write them: buffer overrides ended by an empty pattern.
void keep_experts_on_cpu(int32_t n, std::vector<llama_model_tensor_buft_override> & overrides) {
    if (n < 0) {
        overrides.push_back(llm_ffn_exps_cpu_override());
    } else if (n > 0) {
        llm_add_n_cpu_ffn_overrides(n, LLM_FFN_EXPS_REGEX, overrides);
    }
    if (!overrides.empty()) {
        overrides.push_back({nullptr, nullptr});
    }
}

// The GPUs a comma list names, ended by a null device, as llama-server's -dev / -devd parse them;
// false (with g_load_error set) for a name this build does not have.
bool parse_devices(const char * list, std::vector<ggml_backend_dev_t> & out) {
    if (!list || !*list) {
        return true;
    }
    std::string known;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        known += std::string(known.empty() ? "" : ", ") + ggml_backend_dev_name(ggml_backend_dev_get(i));
    }
    for (const auto & name : string_split<std::string>(list, ',')) {
        ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str());
        if (!dev || ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
            g_load_error = "no GPU device named '" + name + "' in this build (its devices: " + known + ")";
            return false;
        }
        out.push_back(dev);
    }
    out.push_back(nullptr);
    return true;
}

// The target's settings from the caller's, with the defaults llama-server would pick.
void set_target_params(common_params & cp, const specrt_load_params * p) {
    cp.model.path = p->target_path;
    cp.n_ctx = p->n_ctx > 0 ? p->n_ctx : 4096;
    if (p->n_batch > 0) { cp.n_batch = p->n_batch; }
    if (p->n_ubatch > 0) { cp.n_ubatch = p->n_ubatch; }
    cp.n_gpu_layers = p->n_gpu_layers;
    cp.n_parallel = 1;
    cp.fit_params = false;      // the memory plan is SpecTune's job; load exactly what was asked
    cp.warmup = true;           // as llama-server: the first decode's one-time costs are paid at load, not measured
    cp.flash_attn_type = (llama_flash_attn_type) p->flash_attn;
    cp.no_extra_bufts = p->no_repack != 0;
    if (p->lock_in_ram) {
        cp.load_mode = LLAMA_LOAD_MODE_MMAP_MLOCK;
    }
    keep_experts_on_cpu(p->n_cpu_moe, cp.tensor_buft_overrides);
    keep_experts_on_cpu(p->n_cpu_moe_draft, cp.speculative.draft.tensor_buft_overrides);
    // the same thread defaults llama-server's argument parser settles on
    cp.cpuparams.n_threads = p->n_threads > 0 ? p->n_threads : -1;
    cp.cpuparams_batch.n_threads = p->n_threads_batch > 0 ? p->n_threads_batch : -1;
    postprocess_cpu_params(cp.cpuparams, nullptr);
    postprocess_cpu_params(cp.cpuparams_batch, &cp.cpuparams);
    postprocess_cpu_params(cp.speculative.draft.cpuparams, &cp.cpuparams);
    postprocess_cpu_params(cp.speculative.draft.cpuparams_batch, &cp.cpuparams_batch);
}

// general.architecture of a GGUF file, or "" when it cannot be read.
std::string gguf_architecture(const char * path) {
    gguf_init_params gp = {/*.no_alloc =*/true, /*.ctx =*/nullptr};
    gguf_context * g = gguf_init_from_file(path, gp);
    if (!g) {
        return "";
    }
    const int64_t id = gguf_find_key(g, "general.architecture");
    std::string arch = id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_STRING ? gguf_get_val_str(g, id) : "";
    gguf_free(g);
    return arch;
}

// Gemma 4's separate draft file: llama-server runs it only as `-md FILE --spec-type draft-mtp`
// (its type is not detected from the file).
bool is_gemma4_assistant(const char * path) { return gguf_architecture(path) == "gemma4-assistant"; }

// What will draft: the draft model when one is given, else the target's own MTP heads if it has them.
void set_draft_params(common_params & cp, const specrt_load_params * p, bool want_draft) {
    if (want_draft) {
        cp.speculative.draft.mparams.path = p->draft_path;
        cp.speculative.draft.n_gpu_layers = p->n_gpu_layers_draft;
        // a DFlash / DSpark file drafts a whole block per pass: its context is made for that type (outputs
        // for every block position), as llama-server's --spec-type from the file makes it
        auto detected = common_speculative_types_from_gguf(p->draft_path);
        const bool block = !detected.empty() && (detected[0] == COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH ||
                                                 detected[0] == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK);
        if (block) {
            cp.speculative.types = detected;
        } else if (is_gemma4_assistant(p->draft_path)) {
            // an MTP context (ctx_type MTP, ctx_other = the target) that reads the target's KV cache
            cp.speculative.types = {COMMON_SPECULATIVE_TYPE_DRAFT_MTP};
        } else {
            cp.speculative.types = {COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE};
        }
    } else {
        // a target with next-n (MTP) heads can draft for itself
        auto detected = common_speculative_types_from_gguf(p->target_path);
        if (!detected.empty() && detected[0] == COMMON_SPECULATIVE_TYPE_DRAFT_MTP) {
            cp.speculative.types = detected;
        }
    }
}

// Output buffers big enough for the largest draft any setting may ask for: they are sized once,
// at load, since set_spec may raise K up to k_limit without a reload.
common_speculative_output_limits size_outputs(common_params & cp, int32_t k_limit) {
    const auto limits = common_speculative_get_output_limits(cp.n_batch, cp.n_parallel, k_limit);
    cp.n_outputs_max = limits.total;
    cp.n_outputs_max_per_seq = limits.per_seq;
    return limits;
}

// Loads the target model and its context; progress goes out as stage 0. Sets g_load_error on failure.
int load_target(specrt_engine * e, const specrt_load_params * p) {
    common_params & cp = e->params;
    load_progress lp{p->progress, p->progress_user, 0};
    if (p->progress) {
        cp.load_progress_callback = load_progress_cb;
        cp.load_progress_callback_user_data = &lp;
    }
    e->init_tgt = common_init_from_params(cp);
    // lp lives on this stack frame: nothing may call it after this returns
    cp.load_progress_callback = nullptr;
    cp.load_progress_callback_user_data = nullptr;
    e->model_tgt = e->init_tgt->model();
    e->ctx_tgt = e->init_tgt->context();
    if (lp.stopped) {
        g_load_error = "loading was cancelled";
        return SPECRT_ERR_CANCELLED;
    }
    if (!e->model_tgt || !e->ctx_tgt) {
        std::string why = take_log_tail();
        g_load_error = std::string("could not load the target model '") + p->target_path + "'" +
                       (why.empty() ? "" : ": " + why);
        return SPECRT_ERR_LOAD;
    }
    e->vocab = llama_model_get_vocab(e->model_tgt);
    llama_set_abort_callback(e->ctx_tgt, abort_cb, e);
    return SPECRT_OK;
}

// Trimming a rejected draft needs a cache that can drop the tail of a sequence.
// A recurrent or hybrid model's cannot (FULL), and speculation on it saves and restores state instead.
int check_target_cache(specrt_engine * e) {
    e->rm_tgt = common_context_can_seq_rm(e->ctx_tgt);
    if (e->rm_tgt == COMMON_CONTEXT_SEQ_RM_TYPE_NO) {
        g_load_error = "this target's cache cannot drop any tokens, so no draft can be verified on it "
                       "(llama-server turns speculation off for it too)";
        return SPECRT_ERR_LOAD;
    }
    return SPECRT_OK;
}

// Loads the draft model, or makes the MTP context of a target that drafts for itself; progress
// goes out as stage 1. Without either, there is nothing to load. Sets g_load_error on failure.
int load_draft(specrt_engine * e, const specrt_load_params * p, bool want_draft, int32_t n_outputs_max) {
    const common_params & cp = e->params;
    const bool spec_mtp = !want_draft && !cp.speculative.types.empty() &&
                          cp.speculative.types[0] == COMMON_SPECULATIVE_TYPE_DRAFT_MTP;
    if (!want_draft && !spec_mtp) {
        return SPECRT_OK;
    }
    common_params params_dft = common_base_params_to_speculative(cp);
    params_dft.n_outputs_max = n_outputs_max;
    load_progress lp{p->progress, p->progress_user, 1};
    if (p->progress) {
        params_dft.load_progress_callback = load_progress_cb;
        params_dft.load_progress_callback_user_data = &lp;
    }
    e->init_dft = common_speculative_init_from_params(params_dft, e->model_tgt, e->ctx_tgt);
    e->ctx_dft = e->init_dft->context();
    if (lp.stopped) {
        g_load_error = "loading was cancelled";
        return SPECRT_ERR_CANCELLED;
    }
    if (!e->ctx_dft) {
        std::string why = take_log_tail();
        g_load_error = std::string("could not load the draft model '") +
                       (want_draft ? p->draft_path : p->target_path) + "'" + (why.empty() ? "" : ": " + why);
        return SPECRT_ERR_LOAD;
    }
    e->has_draft_model = want_draft;
    e->draft_is_assistant = want_draft && !cp.speculative.types.empty() &&
                            cp.speculative.types[0] == COMMON_SPECULATIVE_TYPE_DRAFT_MTP;
    llama_set_abort_callback(e->ctx_dft, abort_cb, e);
    return SPECRT_OK;
}

// Checks the vocab rule now, so an incompatible pair fails at load with llama.cpp's own words
// rather than at the first set_spec.
int check_draft_vocab(specrt_engine * e) {
    if (!e->has_draft_model) {
        return SPECRT_OK;
    }
    e->params.speculative.draft.ctx_tgt = e->ctx_tgt;
    e->params.speculative.draft.ctx_dft = e->ctx_dft;
    try {
        spec_ptr probe(common_speculative_init(e->params.speculative, 1));
    } catch (const std::exception & ex) {
        g_load_error = std::string("the draft cannot speculate for this target: ") + ex.what();
        return SPECRT_ERR_INCOMPATIBLE;
    }
    return SPECRT_OK;
}

}  // namespace

namespace {

// What llama-server's /v1/chat/completions does with a request before tokenizing it
// (tools/server/server-common.cpp, oaicompat_chat_params_parse, with the server's default
// flags: --jinja on, thinking on when the template supports it and --reasoning is auto,
// reasoning format "deepseek", the preserve_reasoning kwarg on). The prompt it returns is
// then tokenized like any prompt, with special tokens added and parsed, as the server does.
std::string render_chat(specrt_engine * e, const char * request_json) {
    if (!e->chat_tmpls) {
        e->chat_tmpls = common_chat_templates_init(e->model_tgt, "");
    }
    const common_chat_templates * tmpls = e->chat_tmpls.get();
    const common_json req = common_json::parse(request_json);
    if (!req.is_object() || !req.contains("messages") || !req.at("messages").is_array() || req.at("messages").empty()) {
        throw std::invalid_argument("the request needs a non-empty \"messages\" array");
    }
    const bool supports_thinking = common_chat_templates_support_enable_thinking(tmpls);
    auto caps = common_chat_templates_get_caps(tmpls);

    common_chat_templates_inputs in;
    in.messages = common_chat_msgs_parse_oaicompat(req.at("messages"));
    in.use_jinja = true;
    in.add_generation_prompt = true;
    in.parallel_tool_calls = caps["supports_parallel_tool_calls"];
    in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
    in.enable_thinking = supports_thinking;
    in.chat_template_kwargs["preserve_reasoning"] = "true";
    if (req.contains("chat_template_kwargs")) {
        const common_json & kw = req.at("chat_template_kwargs");
        if (!kw.is_object()) {
            throw std::invalid_argument("\"chat_template_kwargs\" must be an object");
        }
        for (const auto & item : kw.items()) {
            in.chat_template_kwargs[item.key()] = item.value().dump();
        }
    }
    // the server lets an "enable_thinking" kwarg override its default, and nothing else does
    const auto thinking = in.chat_template_kwargs.find("enable_thinking");
    if (thinking != in.chat_template_kwargs.end()) {
        if (thinking->second == "true") {
            in.enable_thinking = true;
        } else if (thinking->second == "false") {
            in.enable_thinking = false;
        } else {
            throw std::invalid_argument("\"enable_thinking\" must be true or false");
        }
    }
    const common_chat_params p = common_chat_templates_apply(tmpls, in);
    e->chat_prompt = p.prompt;
    e->chat_delims = p.message_delimiters;
    e->chat_delims.tokenize(e->vocab);

    common_json res = common_json::object();
    res["prompt"] = p.prompt;
    res["format"] = std::string(common_chat_format_name(p.format));
    res["explicit_template"] = common_chat_templates_was_explicit(tmpls);
    res["supports_thinking"] = supports_thinking;
    res["enable_thinking"] = in.enable_thinking;
    common_json stops = common_json::array();
    for (const auto & s : p.additional_stops) {
        stops.push_back(s);
    }
    res["additional_stops"] = stops;
    return res.dump();
}

}  // namespace

#define SPECRT_GUARD_BEGIN try {
#define SPECRT_GUARD_END(engine)                                                   \
    }                                                                              \
    catch (const std::exception & ex) {                                            \
        if (engine) { (engine)->error = std::string("internal error: ") + ex.what(); } \
        return SPECRT_ERR_INTERNAL;                                                \
    }                                                                              \
    catch (...) {                                                                  \
        if (engine) { (engine)->error = "internal error"; }                        \
        return SPECRT_ERR_INTERNAL;                                                \
    }

extern "C" {

int32_t specrt_abi_version(void) { return SPECRT_ABI_VERSION; }

const char * specrt_build_info(void) {
    static std::string info = std::string("llama.cpp ") + llama_print_system_info();
    return info.c_str();
}

const char * specrt_devices(void) {
    static std::string out;
    install_logging(0);
    out.clear();
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        out += ggml_backend_dev_name(dev);
        out += "\t";
        out += ggml_backend_dev_description(dev);
        out += "\n";
    }
    return out.c_str();
}

const char * specrt_last_load_error(void) { return g_load_error.c_str(); }

int32_t specrt_load(const specrt_load_params * p, specrt_engine ** out) {
    g_load_error.clear();
    if (!p || !out || !p->target_path || !*p->target_path) {
        g_load_error = "specrt_load: a target model path is required";
        return SPECRT_ERR_INVALID_ARG;
    }
    *out = nullptr;
    try {
        install_logging(p->verbose);
        take_log_tail();
        auto e = std::make_unique<specrt_engine>();
        e->k_limit = p->draft_n_max_limit > 0 ? std::min(p->draft_n_max_limit, SPECRT_MAX_CYCLE_TOKENS - 1) : 64;
        const bool want_draft = p->draft_path && *p->draft_path;
        set_target_params(e->params, p);
        set_draft_params(e->params, p, want_draft);
        if (p->draft_n_max_at_load > 0) {
            e->params.speculative.draft.n_max = p->draft_n_max_at_load;
        }
        if (!parse_devices(p->devices, e->params.devices) ||
            !parse_devices(p->draft_devices, e->params.speculative.draft.devices)) {
            return SPECRT_ERR_INVALID_ARG;
        }
        const auto limits = size_outputs(e->params, e->k_limit);

        int rc = load_target(e.get(), p);
        if (rc == SPECRT_OK) {
            rc = check_target_cache(e.get());
        }
        if (rc == SPECRT_OK) {
            rc = load_draft(e.get(), p, want_draft, limits.total);
        }
        if (rc == SPECRT_OK && e->ctx_dft) {
            e->rm_dft = common_context_can_seq_rm(e->ctx_dft);
        }
        if (rc != SPECRT_OK) {
            return rc;
        }
        e->batch = common_batch(e->ctx_tgt);
        rc = check_draft_vocab(e.get());
        if (rc != SPECRT_OK) {
            return rc;
        }
        // speculation stays off until specrt_set_spec asks for it
        e->params.speculative.types = {COMMON_SPECULATIVE_TYPE_NONE};
        *out = e.release();
        return SPECRT_OK;
    } catch (const std::exception & ex) {
        g_load_error = std::string("specrt_load: ") + ex.what();
        return SPECRT_ERR_LOAD;
    } catch (...) {
        g_load_error = "specrt_load: unknown error";
        return SPECRT_ERR_LOAD;
    }
}

void specrt_free(specrt_engine * e) {
    if (!e) {
        return;
    }
    try {
        e->spec.reset();
        e->smpl.reset();
        e->init_dft.reset();
        e->init_tgt.reset();
        delete e;
    } catch (...) {
    }
}

const char * specrt_error(const specrt_engine * e) { return e ? e->error.c_str() : "no engine"; }

int32_t specrt_has_draft(const specrt_engine * e) { return e && e->has_draft_model ? 1 : 0; }

int32_t specrt_n_ctx(const specrt_engine * e) { return e ? (int32_t) llama_n_ctx(e->ctx_tgt) : 0; }

int32_t specrt_set_spec(specrt_engine * e, const specrt_spec_params * p) {
    if (!e || !p) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    common_params_speculative spec;
    int rc = parse_spec(e, p, spec);
    if (rc != SPECRT_OK) {
        return rc;
    }
    std::lock_guard<std::mutex> lock(e->settings_mu);
    e->pending_spec = spec;
    e->spec_pending = true;
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

int32_t specrt_set_sampling(specrt_engine * e, const specrt_sampling_params * p) {
    if (!e || !p) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f) || !(p->min_p >= 0.0f && p->min_p <= 1.0f) || p->top_k < 0 ||
        !(p->temp >= 0.0f && p->temp <= 100.0f)) {
        return e->fail(SPECRT_ERR_INVALID_ARG, "sampling: need temp in [0, 100], top_k >= 0, top_p in (0, 1], min_p in [0, 1]");
    }
    std::lock_guard<std::mutex> lock(e->settings_mu);
    common_params_sampling sp = e->params.sampling;
    sp.temp = p->temp;
    sp.top_k = p->top_k;
    sp.top_p = p->top_p;
    sp.min_p = p->min_p;
    sp.seed = p->seed;
    e->pending_sampling = sp;
    e->sampling_pending = true;
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

int32_t specrt_begin(specrt_engine * e, const char * prompt, int32_t max_tokens, int32_t baseline) {
    if (!e || !prompt) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    e->cancel.store(false);
    e->active = false;
    int rc = apply_pending(e);
    if (rc != SPECRT_OK) {
        return rc;
    }
    e->prompt_input = common_tokenize(e->vocab, prompt, true, true);
    if (e->prompt_input.empty()) {
        return e->fail(SPECRT_ERR_INVALID_ARG, "the prompt is empty after tokenization");
    }
    e->prompt_spans = e->chat_prompt == prompt ? e->chat_delims.split(e->prompt_input) : common_chat_msg_spans{};
    e->max_tokens = max_tokens;
    e->baseline = baseline != 0;
    e->n_generated = 0;
    e->cycle_index = 0;
    e->finished = false;
    e->draft.clear();
    e->active = true;
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

int32_t specrt_forget(specrt_engine * e) {
    if (!e) {
        return SPECRT_ERR_INVALID_ARG;
    }
    // rebuilt by the next prompt_cycle, before anything is drafted
    e->spec_dirty = true;
    return SPECRT_OK;
}

int32_t specrt_step(specrt_engine * e, specrt_cycle * out) {
    if (!e || !out) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    if (!e->active) {
        return e->fail(SPECRT_ERR_STATE, "no generation in progress: call specrt_begin first");
    }
    if (e->finished) {
        e->active = false;
        return SPECRT_DONE;
    }
    if (e->cancel.load()) {
        e->active = false;
        return e->fail(SPECRT_ERR_CANCELLED, "cancelled");
    }
    std::memset(out, 0, sizeof(*out));
    int rc = apply_pending(e);
    if (rc == SPECRT_OK) {
        rc = e->cycle_index == 0 ? prompt_cycle(e, out) : spec_cycle(e, out);
    }
    if (rc != SPECRT_OK) {
        e->active = false;
        return rc;
    }
    out->index = e->cycle_index++;
    out->settings_epoch = e->settings_epoch;
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

void specrt_cancel(specrt_engine * e) {
    if (e) {
        e->cancel.store(true);
    }
}

int32_t specrt_tokenize(specrt_engine * e, const char * text, int32_t add_special, int32_t * out, int32_t cap,
                        int32_t * n_needed) {
    if (!e || !text || !n_needed) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    const auto toks = common_tokenize(e->vocab, text, add_special != 0, true);
    *n_needed = (int32_t) toks.size();
    if (out && (int32_t) toks.size() <= cap) {
        std::copy(toks.begin(), toks.end(), out);
    }
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

int32_t specrt_detokenize(specrt_engine * e, const int32_t * tokens, int32_t n, char * out, int32_t cap,
                          int32_t * n_needed) {
    if (!e || (!tokens && n > 0) || !n_needed) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    const int32_t n_vocab = llama_vocab_n_tokens(e->vocab);
    for (int32_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            return e->fail(SPECRT_ERR_INVALID_ARG, "token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
        }
    }
    const llama_tokens toks(tokens, tokens + n);
    const std::string s = common_detokenize(e->vocab, toks, false);
    *n_needed = (int32_t) s.size() + 1;
    if (out && (int32_t) s.size() + 1 <= cap) {
        std::memcpy(out, s.c_str(), s.size() + 1);
    }
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

int32_t specrt_chat_prompt(specrt_engine * e, const char * request_json, char * out, int32_t cap,
                           int32_t * n_needed) {
    if (!e || !request_json || !n_needed) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    std::string result;
    try {
        result = render_chat(e, request_json);
    } catch (const std::exception & ex) {
        // a malformed request or a template that fails to render: the caller's input, not a bug here
        return e->fail(SPECRT_ERR_INVALID_ARG, std::string("chat template: ") + ex.what());
    }
    *n_needed = (int32_t) result.size() + 1;
    if (out && (int32_t) result.size() + 1 <= cap) {
        std::memcpy(out, result.c_str(), result.size() + 1);
    }
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

int32_t specrt_memory(specrt_engine * e, specrt_memory_item * items, int32_t cap) {
    if (!e) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    int32_t n = 0;
    // shared: a context on the target's own weights (the MTP context draft-mtp makes), whose breakdown
    // lists those weights again; they are reported once, with the target, so that a sum is what is held
    auto add = [&](const char * which, llama_context * ctx, bool shared) {
        if (!ctx) {
            return;
        }
        for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
            if (n < cap && items) {
                specrt_memory_item & it = items[n];
                std::memset(&it, 0, sizeof(it));
                std::snprintf(it.model, sizeof(it.model), "%s", which);
                std::snprintf(it.buffer_type, sizeof(it.buffer_type), "%s", ggml_backend_buft_name(buft));
                it.model_bytes = shared ? 0 : mb.model;
                it.context_bytes = mb.context;
                it.compute_bytes = mb.compute;
            }
            n++;
        }
    };
    add("target", e->ctx_tgt, false);
    add("draft", e->ctx_dft, e->ctx_dft && e->ctx_tgt && llama_get_model(e->ctx_dft) == llama_get_model(e->ctx_tgt));
    return n;
    SPECRT_GUARD_END(e)
}

int32_t specrt_time_forward(specrt_engine * e, int32_t which, int32_t n_tokens, int32_t n_past, int32_t reps,
                             double * median_ms) {
    if (!e || !median_ms || n_tokens < 1 || n_past < 0 || reps < 1) {
        return SPECRT_ERR_INVALID_ARG;
    }
    SPECRT_GUARD_BEGIN
    if (e->active) {
        return e->fail(SPECRT_ERR_STATE, "cannot time a forward pass during a generation");
    }
    llama_context * ctx = which == 0 ? e->ctx_tgt : (e->has_draft_model ? e->ctx_dft : nullptr);
    if (which != 0 && e->draft_is_assistant) {
        return e->fail(SPECRT_ERR_INVALID_ARG, "a gemma4-assistant drafts from the target's hidden state and KV cache; "
                       "it has no forward pass of its own to time");
    }
    if (!ctx) {
        return e->fail(SPECRT_ERR_INVALID_ARG, "no such model to time (which must be 0 for the target, 1 for the draft)");
    }
    if (n_past + n_tokens + 1 > (int32_t) llama_n_ctx(ctx) || n_tokens > (int32_t) llama_n_batch(ctx)) {
        return e->fail(SPECRT_ERR_CONTEXT_FULL, "n_past + n_tokens does not fit the context or the batch");
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    auto token_at = [&](int32_t i) { return (llama_token) (5 + (i * 7919) % std::max(1, n_vocab - 5)); };
    e->cancel.store(false);
    llama_memory_clear(llama_get_memory(ctx), true);
    common_batch b(ctx);
    const int32_t chunk = (int32_t) llama_n_batch(ctx);
    for (int32_t p = 0; p < n_past; p += chunk) {
        b.clear();
        for (int32_t i = p; i < std::min(n_past, p + chunk); ++i) {
            b.add(token_at(i), i, 0, false);
        }
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b.get()) != 0) {
            return e->fail(SPECRT_ERR_DECODE, "could not fill the context for timing");
        }
    }
    // outputs per batch are capped by the context's output buffer: stay within it
    const int32_t n_out_max = which == 0 ? e->params.n_outputs_max_per_seq : 1;
    // a recurrent state cannot drop the timed tokens: put back the state it had before them
    const auto rm_type = which == 0 ? e->rm_tgt : e->rm_dft;
    const bool restore = rm_type != COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    common_prompt_checkpoint before;
    if (restore) {
        before.update_tgt(ctx, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    }
    std::vector<double> times;
    // the first passes after the context fill run slower, for several passes (a 0.35B Q4_K_M model's
    // one-token pass on a 2-core VM: 3.2 ms first, 1.8 as the median of the first five, 1.4 warm, as
    // decoding runs it): the scheduler re-plans the graph for the new batch shape and the worker threads
    // and caches come back from the fill. Decoding runs warm, so the warm-up is not timed
    const auto warm0 = clock_type::now();
    int32_t warm = 0;
    for (int32_t pass = 0; (int32_t) times.size() < reps; ++pass) {
        b.clear();
        // other tokens each repetition, as decoding feeds: an MoE routes them to other experts, where the
        // same tokens again would find their experts' weights still in the CPU's cache
        for (int32_t i = 0; i < n_tokens; ++i) {
            b.add(token_at(n_past + i + (pass + 1) * n_tokens), n_past + i, 0, n_tokens - i <= n_out_max);
        }
        const auto t0 = clock_type::now();
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b.get()) != 0) {
            return e->fail(SPECRT_ERR_DECODE, "a timed forward pass failed");
        }
        (void) llama_get_logits_ith(ctx, -1);  // waits for the backend, as sampling would
        if (warm < WARMUP_PASSES || ms_since(warm0) < WARMUP_MS) {
            ++warm;
        } else {
            times.push_back(ms_since(t0));
        }
        if (restore) {
            before.load_tgt(ctx, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
        llama_memory_seq_rm(llama_get_memory(ctx), 0, n_past, -1);
    }
    llama_memory_clear(llama_get_memory(ctx), true);
    std::sort(times.begin(), times.end());
    *median_ms = times[times.size() / 2];
    return SPECRT_OK;
    SPECRT_GUARD_END(e)
}

}  // extern "C"
