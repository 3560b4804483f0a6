/*
 * laya.h — C interface of Laya, an on-device typing prediction engine.
 *
 * Written by hand; crates/laya-ffi/tests/header.rs checks every prototype, constant and struct
 * field here against the Rust definitions in crates/laya-ffi/src/lib.rs.
 *
 * Model:
 *   laya_engine   one served model, hot-swappable; share one engine between all threads.
 *   laya_session  one thread's scratch buffers on an engine; predictions allocate nothing.
 *   laya_user     one person's learned history (words committed, word pairs, blocklist),
 *                 shared by the sessions that type for that person, kept in a user file.
 *
 * Errors: every fallible call returns a laya_status (LAYA_OK == 0). On failure,
 * laya_last_error_message() gives a readable reason, per thread (and after a laya_user_open
 * that set an unreadable user file aside, the warning to show).
 *
 * Strings: contexts are UTF-8 with an explicit length (NUL bytes allowed inside); paths are
 * NUL-terminated (bytes on POSIX, UTF-8 elsewhere). Words returned are NUL-terminated UTF-8.
 *
 * No Laya call ever unwinds or aborts into the caller: internal bugs become LAYA_ERR_PANIC.
 *
 * Lifetime rules:
 *   - A session keeps the engine's shared state alive: freeing the engine first is allowed;
 *     each handle must still be freed exactly once.
 *   - A session given a user history (laya_session_set_user) keeps it alive: freeing the
 *     laya_user handle first is allowed.
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
/* A context, committed text, a word (or, off POSIX, a path) is not valid UTF-8. */
#define LAYA_ERR_INVALID_UTF8 2
/* A model file could not be opened or read, or a user file could not be read or written. */
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
typedef struct laya_user laya_user;

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

/* Message of the most recent failed Laya call on the calling thread, "" if none; also the
 * warning of a laya_user_open that set an unreadable user file aside (*out_set_aside == 1).
 * Valid until the next failing Laya call (or such an open) on this thread. Thread-safe
 * (per-thread state). */
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

/* Sets the weight w of the word trigram the model file carries (default 0.3; `laya
 * attach-ngram` stores one, the default models have one): each candidate scores
 * (1 - w) * P_network + w * P_ngram; 0 ranks by the network alone. No effect with a model
 * without one. Values outside [0, 1] are clamped, NaN means the default. Kept across model
 * swaps. Errors: LAYA_ERR_NULL_ARGUMENT. Same threading rule as laya_session_predict. */
laya_status laya_session_set_ngram_weight(laya_session* session, float w);

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

/* ---- Personalisation: the learned history (docs/personalisation.md) ----
 *
 * A laya_user holds what Laya learned from one person: the words they committed (words the
 * model does not know included), which word followed which, with a forgetting curve and a size
 * cap, a blocklist, and an incognito switch. Sessions given it (laya_session_set_user) mix it
 * into their rankings and learn into it (laya_session_learn); it survives model swaps. The
 * laya_user_* calls are thread-safe: the history has its own lock, so it may be changed or
 * saved while sessions on other threads predict with it. Freeing a handle must not race with
 * other calls on that handle. Words (utf8, len) are UTF-8 with an explicit length, like
 * contexts; utf8 may be NULL only if len == 0. */

/* Creates an empty in-memory history (laya_user_save can write it to a file later).
 * Errors: LAYA_ERR_NULL_ARGUMENT. */
laya_status laya_user_new(laya_user** out_user);

/* Opens the history stored in the user file `path`. A missing file gives an empty history
 * (the first laya_user_save creates it). A file that is not a readable user file (damaged,
 * truncated, foreign, written by a newer Laya) is renamed to "<path>.corrupt-<seconds>" and
 * the history starts empty: the call still returns LAYA_OK, writes 1 to *out_set_aside and
 * leaves a warning naming the new path in laya_last_error_message(), for the keyboard to show;
 * otherwise it writes 0 there. out_set_aside may be NULL (not written).
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_IO (no permission, the rename failed, ...);
 * *out_user is NULL on error. */
laya_status laya_user_open(const char* path, laya_user** out_user, int32_t* out_set_aside);

/* Writes the history to the user file `path` atomically: a temporary file with mode 0600 in
 * the same directory, fsynced, renamed over `path`; concurrent saves of one file (threads or
 * processes) are serialised by "<path>.lock". A reader sees the old file or the new one.
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_IO (the old file is left as it was). */
laya_status laya_user_save(const laya_user* user, const char* path);

/* Frees a user handle; NULL is ignored. Sessions given the history keep it alive (and keep
 * learning into it); it is released with the last of them. */
void laya_user_free(laya_user* user);

/* Makes `user` the history the session ranks with and learns into, from its next call; the
 * session keeps its own reference. Give one history to every session that types for the same
 * person. Kept across model swaps.
 * Errors: LAYA_ERR_NULL_ARGUMENT. Same threading rule as laya_session_predict. */
laya_status laya_session_set_user(laya_session* session, const laya_user* user);

/* Learns committed text utf8[0..len) into the session's history: cut into words with the
 * current model's lexicon and the words already learned; punctuation, numbers, words over 16
 * characters and blocked words are skipped. Writes the number of words counted to
 * *out_learned (0 in incognito and on any error; out_learned may be NULL). Call it when text
 * is committed, not per keystroke (it allocates).
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_INVALID_UTF8 (nothing learned).
 * Same threading rule as laya_session_predict. */
laya_status laya_session_learn(laya_session* session, const char* utf8, size_t len, size_t* out_learned);

/* Forgets the word utf8[0..len): its count and every pair it is in. Writes 1 to
 * *out_forgotten if it was learned, 0 if not (out_forgotten may be NULL).
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_INVALID_UTF8. */
laya_status laya_user_forget(laya_user* user, const char* utf8, size_t len, int32_t* out_forgotten);

/* Forgets everything learned; the blocklist and the incognito switch stay.
 * Errors: LAYA_ERR_NULL_ARGUMENT. */
laya_status laya_user_clear(laya_user* user);

/* Never suggests the word utf8[0..len) again, whatever the network or the history says, and
 * forgets its history. Blocking a word already blocked changes nothing. The blocklist is saved
 * in the user file.
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_INVALID_UTF8, LAYA_ERR_INVALID_ARGUMENT (over 1024
 * bytes: no word is). */
laya_status laya_user_block(laya_user* user, const char* utf8, size_t len);

/* Lifts the block on the word utf8[0..len). Writes 1 to *out_was_blocked if it was blocked, 0
 * if not (out_was_blocked may be NULL).
 * Errors: LAYA_ERR_NULL_ARGUMENT, LAYA_ERR_INVALID_UTF8. */
laya_status laya_user_unblock(laya_user* user, const char* utf8, size_t len, int32_t* out_was_blocked);

/* Incognito when on is non-zero: laya_session_learn learns nothing into this history
 * (predictions still use what was learned before); 0 turns learning back on. Not stored in the
 * user file: a reopened history learns.
 * Errors: LAYA_ERR_NULL_ARGUMENT. */
laya_status laya_user_set_incognito(laya_user* user, int32_t on);

/* Writes the number of words in the history to *out_words.
 * Errors: LAYA_ERR_NULL_ARGUMENT. */
laya_status laya_user_len(const laya_user* user, size_t* out_words);

#ifdef __cplusplus
}
#endif

#endif /* LAYA_H */
