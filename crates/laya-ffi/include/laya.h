/*
 * laya.h — C interface of Laya, an on-device typing prediction engine.
 *
 * Written by hand; crates/laya-ffi/tests/header.rs checks every prototype, constant and struct
 * field here against the Rust definitions in crates/laya-ffi/src/lib.rs.
 *
 * Model:
 *   laya_engine   one served model, hot-swappable; share one engine between all threads.
 *   laya_session  one thread's scratch buffers on an engine; predictions allocate nothing.
 *
 * Errors: every fallible call returns a laya_status (LAYA_OK == 0). On failure,
 * laya_last_error_message() gives a readable reason, per thread.
 *
 * Strings: contexts are UTF-8 with an explicit length (NUL bytes allowed inside); paths are
 * NUL-terminated (bytes on POSIX, UTF-8 elsewhere). Words returned are NUL-terminated UTF-8.
 *
 * No Laya call ever unwinds or aborts into the caller: internal bugs become LAYA_ERR_PANIC.
 *
 * Lifetime rules:
 *   - A session keeps the engine's shared state alive: freeing the engine first is allowed;
 *     each handle must still be freed exactly once.
 *   - laya_candidate.word points into memory owned by the session and is valid until the next
 *     laya_session_predict on that session or laya_session_free.
 *   - A model file that is being served must never be modified in place (see
 *     docs/embedding.md): replace it with `laya install`, which writes a new file and renames.
 */
#ifndef LAYA_H
#define LAYA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result of every fallible call. */
typedef int32_t laya_status;

#define LAYA_OK 0
/* A required pointer argument was NULL. */
#define LAYA_ERR_NULL_ARGUMENT 1
/* The context (or, off POSIX, a path) is not valid UTF-8. */
#define LAYA_ERR_INVALID_UTF8 2
/* A model file could not be opened or read. */
#define LAYA_ERR_IO 3
/* A model file failed validation: corrupt, truncated, wrong version, bad checksum... */
#define LAYA_ERR_INVALID_MODEL 4
/* A valid model file this runtime cannot run. */
#define LAYA_ERR_UNSUPPORTED_MODEL 5
/* A bug inside Laya, caught at the boundary; freeing the handles involved is still safe. */
#define LAYA_ERR_PANIC 6
/* An argument is outside the values the call accepts (an unknown completion rule, ...). */
#define LAYA_ERR_INVALID_ARGUMENT 7

/* How a session combines the word and replace heads into candidate scores (model format
 * section 3, step 6). */
typedef int32_t laya_completion_rule;
/* Splits each word's probability between "next word" and "completion". */
#define LAYA_COMPLETION_MARGINAL 0
/* P(w)*P(i)^beta, beta set by laya_session_set_completion_exponent. */
#define LAYA_COMPLETION_PRODUCT 1
/* P(i)*P(w) renormalised over the words that start with the typed characters. */
#define LAYA_COMPLETION_CONDITIONAL 2
/* A word that continues the typed characters is offered only as a completion, its
 * probability split between its completions in proportion to the replace head (the default). */
#define LAYA_COMPLETION_SPLIT 3

/* Opaque handles. */
typedef struct laya_engine laya_engine;
typedef struct laya_session laya_session;

/* One candidate word of a prediction. */
typedef struct laya_candidate {
    const char* word;   /* NUL-terminated UTF-8, owned by the session (see lifetime rules) */
    size_t word_len;    /* bytes in word, without the NUL */
    uint32_t replace;   /* trailing characters of the context the word completes; 0 = next word */
    float p;            /* probability among all admissible (word, replace) pairs */
} laya_candidate;

/* Library version, static string. Thread-safe. */
const char* laya_version(void);

/* Static name of a status code ("LAYA_ERR_IO", ...). Thread-safe. */
const char* laya_status_name(laya_status status);

/* Message of the most recent failed Laya call on the calling thread, "" if none.
 * Valid until the next failing Laya call on this thread. Thread-safe (per-thread state). */
const char* laya_last_error_message(void);

/* Opens and fully validates (checksum included) the model file `path`; on success
 * *out_engine is a new engine, on failure it is set to NULL (when out_engine is not NULL).
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_IO, LAYA_ERR_INVALID_MODEL, LAYA_ERR_UNSUPPORTED_MODEL.
 * Thread-safe. */
laya_status laya_engine_open(const char* path, laya_engine** out_engine);

/* Frees an engine; NULL is ignored. Not to be called concurrently with other calls on the
 * same engine. Sessions created from it remain valid. */
void laya_engine_free(laya_engine* engine);

/* Validates the model file `path` completely and only then makes it current: every session
 * uses it from its next prediction; predictions already running finish on the old model.
 * On any error the old model keeps serving.
 * Thread-safe: may run while other threads predict; concurrent swaps are serialised. */
laya_status laya_engine_swap(const laya_engine* engine, const char* path);

/* Writes the checksum of the engine's current model. Thread-safe. */
laya_status laya_engine_checksum(const laya_engine* engine, uint64_t* out_checksum);

/* Creates a session on `engine` (and warms it up: touches the model's pages).
 * Thread-safe with respect to the engine. */
laya_status laya_session_new(const laya_engine* engine, laya_session** out_session);

/* Frees a session and the words of its last prediction; NULL is ignored. */
void laya_session_free(laya_session* session);

/* Ranks the min(k, cap, 64) most likely candidates after the context utf8[0..len) (the text
 * before the cursor) and writes them best-first to out[0..*n_out). utf8 may be NULL only if
 * len == 0; out may be NULL only if cap == 0. Allocates nothing in the steady state.
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_INVALID_UTF8 (*n_out is 0 on any error).
 * NOT thread-safe per session: one thread at a time per session (a session may move between
 * threads); use one session per thread. */
laya_status laya_session_predict(laya_session* session, const char* utf8, size_t len, size_t k, laya_candidate* out, size_t cap, size_t* n_out);

/* Writes the checksum of the model that served this session's last prediction.
 * Same threading rule as laya_session_predict. */
laya_status laya_session_checksum(const laya_session* session, uint64_t* out_checksum);

/* Chooses how the session combines the two heads: LAYA_COMPLETION_SPLIT (the default),
 * LAYA_COMPLETION_MARGINAL, LAYA_COMPLETION_PRODUCT or LAYA_COMPLETION_CONDITIONAL. Kept across
 * model swaps.
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_INVALID_ARGUMENT (unknown rule; the session keeps
 * its rule). Same threading rule as laya_session_predict. */
laya_status laya_session_set_completion_rule(laya_session* session, laya_completion_rule rule);

/* Sets the exponent beta of LAYA_COMPLETION_PRODUCT: a completion scores P(w)*P(i)^beta
 * (smaller values show more completions); no effect under the other rules. Values outside
 * [0, 1] are clamped, NaN means 1. Kept across model swaps.
 * Errors: LAYA_ERR_NULL_ARGUMENT. Same threading rule as laya_session_predict. */
laya_status laya_session_set_completion_exponent(laya_session* session, float beta);

/* Sets the weight lambda of the completion prior (default 0, the network alone): words that complete the typed
 * characters are re-ranked towards a general-purpose dictionary's frequencies when the model
 * file carries them (made with `laya prior`); 0 turns it off. Values outside [0, 2] are
 * clamped, NaN means 0. Kept across model swaps. Touches one value per lexicon word: call it
 * when settings change, not per keystroke.
 * Errors: LAYA_ERR_NULL_ARGUMENT. Same threading rule as laya_session_predict. */
laya_status laya_session_set_completion_prior(laya_session* session, float lambda);

/* Allows one punctuation candidate on the bar when on is non-zero (default 0: a keyboard types
 * punctuation with its own keys, so no punctuation word is ever a candidate). With the slot,
 * the most likely punctuation word joins the bar where its probability ranks it, at most one,
 * in its Chinese form after Chinese text (U+FF0C for ','). Kept across model swaps.
 * Errors: LAYA_ERR_NULL_ARGUMENT. Same threading rule as laya_session_predict. */
laya_status laya_session_set_punctuation_slot(laya_session* session, int32_t on);

/* With a relative_causal model (the default model's scheme) a session keeps each block's keys
 * and values from one prediction to the next, and when the new text is the previous one plus a
 * few characters it computes only those: typing costs one position per keystroke. This drops
 * what was kept, so the next prediction is computed whole. Predictions are the same either way
 * (the session recomputes by itself after a deletion, a cursor move or a new field); use it to
 * start clean. Constant time.
 * Errors: LAYA_ERR_NULL_ARGUMENT. Same threading rule as laya_session_predict. */
laya_status laya_session_forget_context(laya_session* session);

#ifdef __cplusplus
}
#endif

#endif /* LAYA_H */
