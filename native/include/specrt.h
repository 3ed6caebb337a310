/*
 * specrt: SpecTune's speculative-decoding runtime on llama.cpp.
 *
 * This header is the whole C ABI. Handles are opaque, structs are plain, every
 * call returns a status code, and the text of the last error is kept on the
 * engine (or, before an engine exists, per thread). No C++ exception crosses
 * this boundary.
 *
 * One engine holds a target model, an optional draft model and their contexts.
 * A generation is: specrt_begin() with a prompt, then specrt_step() until it
 * returns SPECRT_DONE. Each step is one cycle of the llama-server slot loop:
 * draft -> verify the draft in one target batch -> accept n -> trim the caches.
 * Between any two steps the caller may change the speculation settings
 * (specrt_set_spec) and the sampling settings (specrt_set_sampling); the next
 * cycle uses them. Models are never reloaded for that.
 */
#ifndef SPECRT_H
#define SPECRT_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef _WIN32
#  ifdef SPECRT_BUILD
#    define SPECRT_API __declspec(dllexport)
#  else
#    define SPECRT_API __declspec(dllimport)
#  endif
#else
#  define SPECRT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct or a function below changes. */
#define SPECRT_ABI_VERSION 8

/* Most tokens one cycle can emit: K drafted + 1. K is capped below this. */
#define SPECRT_MAX_CYCLE_TOKENS 256

typedef enum specrt_status {
    SPECRT_OK                = 0,
    SPECRT_DONE              = 1,   /* specrt_step: the generation has ended, no cycle filled */
    SPECRT_ERR_INVALID_ARG   = -1,
    SPECRT_ERR_LOAD          = -2,  /* a model or context could not be created */
    SPECRT_ERR_INCOMPATIBLE  = -3,  /* draft/target vocabularies fail llama.cpp's rule */
    SPECRT_ERR_STATE         = -4,  /* call not valid now (e.g. step without begin) */
    SPECRT_ERR_DECODE        = -5,  /* llama.cpp failed to process a batch */
    SPECRT_ERR_CANCELLED     = -6,
    SPECRT_ERR_CONTEXT_FULL  = -7,  /* prompt does not fit the context or the batch */
    SPECRT_ERR_INTERNAL      = -8,
} specrt_status;

typedef struct specrt_engine specrt_engine;

/* Load progress: stage 0 = target, 1 = draft; progress from 0 to 1 as llama.cpp reads the
   weights. Return false to stop loading: specrt_load then returns SPECRT_ERR_CANCELLED.
   Called on the thread that called specrt_load. */
typedef bool (*specrt_progress_fn)(int32_t stage, float progress, void * user);

typedef struct specrt_load_params {
    const char * target_path;
    const char * draft_path;          /* NULL or "" for no draft model */
    int32_t n_ctx;                    /* context size of the target (the draft gets the same) */
    int32_t n_batch;                  /* logical batch for prompt processing (0 = 2048) */
    int32_t n_ubatch;                 /* physical batch (0 = 512) */
    int32_t n_gpu_layers;             /* -1 = all layers that fit, as llama.cpp decides */
    int32_t n_gpu_layers_draft;       /* -1 = as llama.cpp decides */
    int32_t n_threads;                /* <= 0 = llama.cpp's default */
    int32_t n_threads_batch;          /* <= 0 = same as n_threads */
    int32_t draft_n_max_limit;        /* largest K this engine will ever be asked for (sizes output buffers) */
    int32_t flash_attn;               /* -1 auto, 0 off, 1 on (llama.cpp's enum) */
    int32_t verbose;                  /* 1 = let llama.cpp log to stderr */
    int32_t no_repack;                /* 1 = no CPU weight repacking (AMX / AVX-512 buffers), llama-server's -nr */
    specrt_progress_fn progress;      /* NULL = no progress reports */
    void * progress_user;             /* handed back to progress */
    int32_t n_cpu_moe;                /* expert weights of the first N target layers stay on the CPU
                                         (llama-server's --n-cpu-moe); -1 = every layer's (--cpu-moe) */
    int32_t n_cpu_moe_draft;          /* the same for the draft (--spec-draft-n-cpu-moe) */
    const char * draft_devices;       /* NULL or "": the draft uses the target's GPUs; else a comma list of
                                         ggml device names, e.g. "CUDA1" (llama-server's -devd) */
    const char * devices;             /* the same for the target (llama-server's -dev); NULL or "": all GPUs */
    int32_t draft_n_max_at_load;      /* the K the contexts are made for (llama-server's --spec-draft-n-max at
                                         start): with draft-mtp on a hybrid model such as Qwen3.5 it is how
                                         many recurrent-state snapshots roll a rejected draft back; a larger K
                                         set later rolls back by checkpoint and replay. 0 = llama.cpp's 3 */
    int32_t lock_in_ram;              /* 1 = map the weights and lock them in RAM (llama-server's
                                         --load-mode mmap+mlock): the system never pages them out */
} specrt_load_params;

typedef struct specrt_spec_params {
    const char * types;               /* comma list of llama.cpp type names, "none" for no speculation */
    int32_t draft_n_max;              /* K: most tokens a draft model proposes per cycle */
    int32_t draft_n_min;
    float   draft_p_min;
    int32_t ngram_size_n;             /* applied to ngram-simple, ngram-map-k and ngram-map-k4v */
    int32_t ngram_size_m;
    int32_t ngram_min_hits;
    int32_t ngram_mod_n_match;
    int32_t ngram_mod_n_min;
    int32_t ngram_mod_n_max;
} specrt_spec_params;

typedef struct specrt_sampling_params {
    float    temp;                    /* <= 0 greedy */
    int32_t  top_k;
    float    top_p;
    float    min_p;
    uint32_t seed;
} specrt_sampling_params;

/* One cycle. The first step of a generation is the prompt cycle (is_prompt = 1):
 * the prompt is processed and the first token sampled, nothing is drafted. */
typedef struct specrt_cycle {
    int32_t index;                    /* 0 for the prompt cycle */
    int32_t is_prompt;
    int32_t n_prompt;                 /* tokens in the prompt (prompt cycle only) */
    int32_t n_drafted;                /* tokens the speculators proposed this cycle */
    int32_t n_accepted;               /* of those, how many the target kept (a prefix) */
    int32_t n_emitted;                /* tokens appended to the output this cycle: n_accepted + 1, or + 2
                                         after a replay (see replayed) */
    int32_t n_past;                   /* tokens in the target's cache after the cycle */
    int32_t draft_n_max;              /* the K this cycle ran with */
    int32_t is_eog;                   /* the cycle produced an end-of-generation token */
    int32_t settings_epoch;           /* increments each time set_spec/set_sampling takes effect */
    double  draft_ms;                 /* speculators: drafting plus feeding the draft model */
    double  verify_ms;                /* target: the verify batch and sample-and-accept */
    double  decode_ms;                /* of draft_ms + verify_ms, time inside llama_process */
    double  other_ms;                 /* everything else in the cycle (bookkeeping, text) */
    double  cycle_ms;
    int32_t tokens[SPECRT_MAX_CYCLE_TOKENS];
    int32_t piece_bytes[SPECRT_MAX_CYCLE_TOKENS]; /* bytes of text each token contributed, in order */
    const char * text;                /* UTF-8 bytes of the emitted tokens (a character may span two
                                         cycles); valid until the next call */
    int32_t replayed;                 /* 1 when the target's cache could not drop the rejected part of the
                                         draft (a recurrent or hybrid model): its state was restored and the
                                         accepted tokens verified again, a second target pass in verify_ms
                                         that also yields one more token, as llama-server does */
} specrt_cycle;

typedef struct specrt_memory_item {
    char     model[16];               /* "target" or "draft" */
    char     buffer_type[64];         /* llama.cpp buffer type name, e.g. "CPU", "CUDA0" */
    uint64_t model_bytes;             /* weights (0 for a context on the target's own weights: MTP) */
    uint64_t context_bytes;           /* KV cache and other per-context state */
    uint64_t compute_bytes;           /* compute buffers */
} specrt_memory_item;

SPECRT_API int32_t      specrt_abi_version(void);
/* e.g. "llama.cpp 0c1e570; CPU : AVX2 = 1 | ..." */
SPECRT_API const char * specrt_build_info(void);
/* Names of the ggml backend devices, one per line, e.g. "CPU\tCPU\n" or "CUDA0\tNVIDIA H200\n". */
SPECRT_API const char * specrt_devices(void);
/* The error text of the last failed specrt_load on this thread. */
SPECRT_API const char * specrt_last_load_error(void);

SPECRT_API int32_t specrt_load(const specrt_load_params * params, specrt_engine ** out);
SPECRT_API void    specrt_free(specrt_engine * engine);
SPECRT_API const char * specrt_error(const specrt_engine * engine);

SPECRT_API int32_t specrt_has_draft(const specrt_engine * engine);
SPECRT_API int32_t specrt_n_ctx(const specrt_engine * engine);

/* Both take effect at the next cycle (or at the next begin). */
SPECRT_API int32_t specrt_set_spec(specrt_engine * engine, const specrt_spec_params * params);
SPECRT_API int32_t specrt_set_sampling(specrt_engine * engine, const specrt_sampling_params * params);

/* Starts a generation; the caches are cleared. baseline = 1 runs it without any
 * speculation on the same loaded models, whatever set_spec said. */
SPECRT_API int32_t specrt_begin(specrt_engine * engine, const char * prompt, int32_t max_tokens, int32_t baseline);
/* The speculators forget what earlier generations taught them (ngram-mod's pool, the n-gram
 * caches and maps): the next specrt_begin() builds them anew, as a freshly started llama-server
 * has them. Without it they live across generations, as in one llama-server, so a prompt run
 * again is drafted from its own earlier answer. */
SPECRT_API int32_t specrt_forget(specrt_engine * engine);
SPECRT_API int32_t specrt_step(specrt_engine * engine, specrt_cycle * out);
/* Safe from any thread. The running or next step returns SPECRT_ERR_CANCELLED. */
SPECRT_API void    specrt_cancel(specrt_engine * engine);

/* *n_needed receives the full count (tokens, or bytes including the NUL); the
 * output is written only when it fits in cap. */
SPECRT_API int32_t specrt_tokenize(specrt_engine * engine, const char * text, int32_t add_special,
                                   int32_t * out, int32_t cap, int32_t * n_needed);
SPECRT_API int32_t specrt_detokenize(specrt_engine * engine, const int32_t * tokens, int32_t n,
                                     char * out, int32_t cap, int32_t * n_needed);
SPECRT_API int32_t specrt_memory(specrt_engine * engine, specrt_memory_item * items, int32_t cap);

/* Renders a chat with the target's chat template, as llama-server's /v1/chat/completions does
 * with its default flags (jinja; thinking on where the template supports it). request_json is
 * {"messages": [OpenAI-style messages], "chat_template_kwargs": {...} (optional)}. The result,
 * written like specrt_detokenize's, is JSON: {"prompt", "format", "explicit_template",
 * "supports_thinking", "enable_thinking", "additional_stops"}. A model without a template gets
 * llama.cpp's fallback (ChatML) and "explicit_template": false. SPECRT_ERR_INVALID_ARG for a
 * malformed request or a template that fails to render; specrt_error says which. */
SPECRT_API int32_t specrt_chat_prompt(specrt_engine * engine, const char * request_json,
                                      char * out, int32_t cap, int32_t * n_needed);

/* Times one forward pass of n_tokens (every position asking for logits, as a
 * verify batch does) on the target (which = 0) or the draft (which = 1), after
 * n_past tokens of context, as the median of reps runs; the result is in
 * *median_ms. Only between generations: the caches are cleared afterwards. */
SPECRT_API int32_t specrt_time_forward(specrt_engine * engine, int32_t which, int32_t n_tokens, int32_t n_past,
                                       int32_t reps, double * median_ms);

#ifdef __cplusplus
}
#endif

#endif /* SPECRT_H */
