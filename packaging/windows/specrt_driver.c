/*
 * specrt_driver: runs one generation through specrt.dll the way SpecTune's worker does
 * (engine/runtime/binding.py), without Python, for checking a Windows build under Wine
 * (packaging/wine_check.sh) or on Windows.
 *
 *   specrt_driver.exe BIN_DIR SPECRT_DLL TARGET.gguf DRAFT.gguf PROMPT [MAX_TOKENS [K]]
 *
 * BIN_DIR holds llama.dll, ggml*.dll and ggml's backend modules (ggml-cpu-*.dll), as beside
 * llama-server.exe. Like the worker it adds BIN_DIR to the DLL search path, loads the backend
 * modules from there (ggml_backend_load_all_from_path, from ggml.dll: specrt's
 * llama_backend_init() would otherwise look beside this program and in the working directory),
 * then loads specrt.dll with LoadLibrary and resolves its C ABI with GetProcAddress.
 * Settings: draft-simple, K (default 3), temperature 0, top-k 40, top-p 0.95, min-p 0.05,
 * context 4096, SpecTune's load defaults. It prints one JSON object: the counts summed over the
 * cycles, the text, the devices and the times.
 */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specrt.h"

typedef void (*load_all_from_path_fn)(const char *);
typedef int32_t (*abi_version_fn)(void);
typedef const char * (*str_fn)(void);
typedef int32_t (*load_fn)(const specrt_load_params *, specrt_engine **);
typedef void (*free_fn)(specrt_engine *);
typedef const char * (*error_fn)(const specrt_engine *);
typedef int32_t (*set_spec_fn)(specrt_engine *, const specrt_spec_params *);
typedef int32_t (*set_sampling_fn)(specrt_engine *, const specrt_sampling_params *);
typedef int32_t (*begin_fn)(specrt_engine *, const char *, int32_t, int32_t);
typedef int32_t (*step_fn)(specrt_engine *, specrt_cycle *);

/* GetProcAddress's FARPROC, as the untyped pointer each function type is cast from */
static void * need(HMODULE lib, const char * name) {
    FARPROC f = GetProcAddress(lib, name);
    if (!f) {
        fprintf(stderr, "specrt_driver: %s not exported (error %lu)\n", name, GetLastError());
        exit(3);
    }
    return (void *) (uintptr_t) f;
}

static double now_ms(void) {
    static LARGE_INTEGER freq;
    LARGE_INTEGER t;
    if (!freq.QuadPart) QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&t);
    return 1000.0 * (double) t.QuadPart / (double) freq.QuadPart;
}

static void json_string(const char * s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s BIN_DIR SPECRT_DLL TARGET DRAFT PROMPT [MAX_TOKENS [K]]\n", argv[0]);
        return 2;
    }
    const char * bin_dir = argv[1];
    int32_t max_tokens = argc > 6 ? atoi(argv[6]) : 64;
    int32_t k = argc > 7 ? atoi(argv[7]) : 3;

    /* the DLLs specrt.dll imports (llama.dll, ggml.dll, ...) are found in BIN_DIR */
    if (!SetDllDirectoryA(bin_dir)) {
        fprintf(stderr, "specrt_driver: SetDllDirectory(%s) failed (error %lu)\n", bin_dir, GetLastError());
        return 3;
    }
    char ggml_path[MAX_PATH];
    snprintf(ggml_path, sizeof ggml_path, "%s\\ggml.dll", bin_dir);
    HMODULE ggml = LoadLibraryA(ggml_path);
    if (!ggml) {
        fprintf(stderr, "specrt_driver: LoadLibrary(%s) failed (error %lu)\n", ggml_path, GetLastError());
        return 3;
    }
    ((load_all_from_path_fn) need(ggml, "ggml_backend_load_all_from_path"))(bin_dir);

    HMODULE lib = LoadLibraryA(argv[2]);
    if (!lib) {
        fprintf(stderr, "specrt_driver: LoadLibrary(%s) failed (error %lu)\n", argv[2], GetLastError());
        return 3;
    }
    abi_version_fn abi_version = (abi_version_fn) need(lib, "specrt_abi_version");
    str_fn build_info = (str_fn) need(lib, "specrt_build_info");
    str_fn devices = (str_fn) need(lib, "specrt_devices");
    str_fn last_load_error = (str_fn) need(lib, "specrt_last_load_error");
    load_fn load = (load_fn) need(lib, "specrt_load");
    free_fn free_engine = (free_fn) need(lib, "specrt_free");
    error_fn error = (error_fn) need(lib, "specrt_error");
    set_spec_fn set_spec = (set_spec_fn) need(lib, "specrt_set_spec");
    set_sampling_fn set_sampling = (set_sampling_fn) need(lib, "specrt_set_sampling");
    begin_fn begin = (begin_fn) need(lib, "specrt_begin");
    step_fn step = (step_fn) need(lib, "specrt_step");

    if (abi_version() != SPECRT_ABI_VERSION) {
        fprintf(stderr, "specrt_driver: specrt.dll has ABI %d, this driver was built for %d\n", abi_version(),
                SPECRT_ABI_VERSION);
        return 3;
    }

    /* SpecTune's LoadSettings defaults (engine/core/settings.py) */
    specrt_load_params lp;
    memset(&lp, 0, sizeof lp);
    lp.target_path = argv[3];
    lp.draft_path = argv[4];
    lp.n_ctx = 4096;
    lp.n_batch = 2048;
    lp.n_ubatch = 512;
    lp.n_gpu_layers = -1;
    lp.n_gpu_layers_draft = -1;
    lp.draft_n_max_limit = 64;
    lp.flash_attn = -1;
    specrt_engine * eng = NULL;
    double t0 = now_ms();
    int32_t rc = load(&lp, &eng);
    double load_ms = now_ms() - t0;
    if (rc != SPECRT_OK) {
        fprintf(stderr, "specrt_driver: specrt_load failed (%d): %s\n", rc, last_load_error());
        return 4;
    }

    /* SpecSettings / SamplingSettings defaults, K from the command line */
    specrt_spec_params sp = {"draft-simple", k, 0, 0.0f, 12, 48, 1, 24, 48, 64};
    specrt_sampling_params samp = {0.0f, 40, 0.95f, 0.05f, 0xFFFFFFFFu};
    if (set_spec(eng, &sp) != SPECRT_OK || set_sampling(eng, &samp) != SPECRT_OK) {
        fprintf(stderr, "specrt_driver: settings refused: %s\n", error(eng));
        return 4;
    }
    if (begin(eng, argv[5], max_tokens, 0) != SPECRT_OK) {
        fprintf(stderr, "specrt_driver: specrt_begin failed: %s\n", error(eng));
        return 4;
    }

    static specrt_cycle cyc;
    size_t cap = 1 << 16, len = 0;
    char * text = calloc(cap, 1);
    long drafted = 0, accepted = 0, emitted = 0, steps = 0, n_prompt = 0;
    double gen_ms = 0.0;
    t0 = now_ms();
    for (;;) {
        rc = step(eng, &cyc);
        if (rc == SPECRT_DONE) break;
        if (rc != SPECRT_OK) {
            fprintf(stderr, "specrt_driver: specrt_step failed (%d): %s\n", rc, error(eng));
            return 4;
        }
        if (cyc.is_prompt) n_prompt = cyc.n_prompt;
        else steps++;
        drafted += cyc.n_drafted;
        accepted += cyc.n_accepted;
        emitted += cyc.n_emitted;
        size_t n = strlen(cyc.text);
        if (len + n + 1 > cap) {
            while (len + n + 1 > cap) cap *= 2;
            text = realloc(text, cap);
        }
        memcpy(text + len, cyc.text, n + 1);
        len += n;
    }
    gen_ms = now_ms() - t0;

    printf("{\"abi\": %d, \"build_info\": ", abi_version());
    json_string(build_info());
    printf(", \"devices\": ");
    json_string(devices());
    printf(", \"n_prompt\": %ld, \"tokens_generated\": %ld, \"drafted\": %ld, \"accepted\": %ld, \"steps\": %ld, "
           "\"load_ms\": %.1f, \"generate_ms\": %.1f, \"tokens_per_s\": %.1f, \"text\": ",
           n_prompt, emitted, drafted, accepted, steps, load_ms, gen_ms, gen_ms > 0 ? 1000.0 * emitted / gen_ms : 0.0);
    json_string(text);
    printf("}\n");
    free(text);
    free_engine(eng);
    return 0;
}
