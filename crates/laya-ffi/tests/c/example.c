/*
 * A keyboard's use of Laya from C: open a model, predict (plain, emoji, empty, invalid UTF-8),
 * hot-swap while another thread predicts, refuse a corrupt model, free everything.
 *
 *   cc example.c -I crates/laya-ffi/include -L target/debug -llaya_ffi -lpthread -o example
 *   ./example MODEL_A MODEL_B CORRUPT_MODEL
 *
 * Exits 0 when every check passes; crates/laya-ffi/tests/c_example.rs runs it (under valgrind
 * when available).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "laya.h"

static int failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "example.c:%d: check failed: %s (last error: %s)\n", \
                    __LINE__, #cond, laya_last_error_message());                 \
            failures++;                                                          \
        }                                                                        \
    } while (0)

#define CHECK_STATUS(call, expected)                                                       \
    do {                                                                                   \
        laya_status st_ = (call);                                                          \
        if (st_ != (expected)) {                                                           \
            fprintf(stderr, "example.c:%d: %s returned %s, expected %s (last error: %s)\n", \
                    __LINE__, #call, laya_status_name(st_), laya_status_name(expected),    \
                    laya_last_error_message());                                            \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

static void print_candidates(const char* label, const laya_candidate* c, size_t n) {
    printf("%s:", label);
    for (size_t i = 0; i < n; i++) {
        printf(" %s(r=%u,p=%.3f)", c[i].word, c[i].replace, c[i].p);
    }
    printf("\n");
}

/* Every candidate list must be well formed: sorted, probabilities in [0,1], words terminated. */
static void check_candidates(const laya_candidate* c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        CHECK(c[i].word != NULL);
        CHECK(strlen(c[i].word) == c[i].word_len);
        CHECK(c[i].p >= 0.0f && c[i].p <= 1.0f);
        if (i > 0) CHECK(c[i].p <= c[i - 1].p);
    }
}

struct worker {
    const laya_engine* engine;
    int predictions;
    int errors;
};

/* A second thread with its own session, predicting while the main thread swaps. */
static void* predict_loop(void* arg) {
    struct worker* w = arg;
    laya_session* s = NULL;
    if (laya_session_new(w->engine, &s) != LAYA_OK) {
        w->errors++;
        return NULL;
    }
    const char* contexts[] = {"hel", "今天", "😀", "", "a b c"};
    laya_candidate out[5];
    for (int i = 0; i < 200; i++) {
        const char* ctx = contexts[i % 5];
        size_t n = 0;
        if (laya_session_predict(s, ctx, strlen(ctx), 5, out, 5, &n) != LAYA_OK || n != 5) w->errors++;
        w->predictions++;
    }
    laya_session_free(s);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL_A MODEL_B CORRUPT_MODEL\n", argv[0]);
        return 2;
    }
    printf("laya %s\n", laya_version());

    /* Opening: NULL arguments, a missing file and a corrupt file are all refused with a reason. */
    laya_engine* engine = (laya_engine*)1;
    CHECK_STATUS(laya_engine_open(NULL, &engine), LAYA_ERR_NULL_ARGUMENT);
    CHECK(engine == NULL);
    CHECK(strlen(laya_last_error_message()) > 0);
    CHECK_STATUS(laya_engine_open(argv[1], NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_engine_open("/nonexistent/model.laya", &engine), LAYA_ERR_IO);
    printf("missing file: %s\n", laya_last_error_message());
    CHECK_STATUS(laya_engine_open(argv[3], &engine), LAYA_ERR_INVALID_MODEL);
    printf("corrupt file: %s\n", laya_last_error_message());
    CHECK(engine == NULL);

    CHECK_STATUS(laya_engine_open(argv[1], &engine), LAYA_OK);
    if (engine == NULL) return 1;
    uint64_t sum_a = 0, sum_b = 0, sum = 0;
    CHECK_STATUS(laya_engine_checksum(engine, &sum_a), LAYA_OK);

    laya_session* session = NULL;
    CHECK_STATUS(laya_session_new(NULL, &session), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_new(engine, &session), LAYA_OK);
    if (session == NULL) return 1;

    /* Predictions. */
    laya_candidate out[8];
    size_t n = 0;
    const char* hel = "hel";
    CHECK_STATUS(laya_session_predict(session, hel, strlen(hel), 5, out, 8, &n), LAYA_OK);
    CHECK(n == 5);
    check_candidates(out, n);
    print_candidates("hel", out, n);

    const char* emoji = "party 🎉😀";
    CHECK_STATUS(laya_session_predict(session, emoji, strlen(emoji), 8, out, 8, &n), LAYA_OK);
    CHECK(n == 8);
    check_candidates(out, n);
    print_candidates("emoji", out, n);

    /* One punctuation slot (off by default: a keyboard types punctuation with its own keys). */
    CHECK_STATUS(laya_session_set_punctuation_slot(NULL, 1), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_set_punctuation_slot(session, 1), LAYA_OK);
    CHECK_STATUS(laya_session_predict(session, hel, strlen(hel), 5, out, 8, &n), LAYA_OK);
    CHECK(n == 5);
    check_candidates(out, n);
    CHECK_STATUS(laya_session_set_punctuation_slot(session, 0), LAYA_OK);

    const char with_nul[] = {'a', '\0', 'b'};
    CHECK_STATUS(laya_session_predict(session, with_nul, sizeof with_nul, 3, out, 8, &n), LAYA_OK);
    CHECK(n == 3);

    CHECK_STATUS(laya_session_predict(session, NULL, 0, 3, out, 2, &n), LAYA_OK); /* empty context, cap < k */
    CHECK(n == 2);
    check_candidates(out, n);

    CHECK_STATUS(laya_session_predict(session, hel, 3, 0, NULL, 0, &n), LAYA_OK); /* k = 0 */
    CHECK(n == 0);

    /* Invalid UTF-8: a lone continuation byte, a truncated sequence, an encoded surrogate. */
    const char* invalid[] = {"abc\x80", "\xe4\xbd", "\xed\xa0\x80", "\xff"};
    for (int i = 0; i < 4; i++) {
        n = 99;
        CHECK_STATUS(laya_session_predict(session, invalid[i], strlen(invalid[i]), 5, out, 8, &n), LAYA_ERR_INVALID_UTF8);
        CHECK(n == 0);
    }
    printf("invalid UTF-8: %s\n", laya_last_error_message());

    /* NULL arguments. */
    CHECK_STATUS(laya_session_predict(NULL, hel, 3, 5, out, 8, &n), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_predict(session, hel, 3, 5, out, 8, NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_predict(session, NULL, 3, 5, out, 8, &n), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_predict(session, hel, 3, 5, NULL, 8, &n), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_engine_swap(NULL, argv[2]), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_engine_swap(engine, NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_engine_checksum(engine, NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_checksum(NULL, &sum), LAYA_ERR_NULL_ARGUMENT);
    CHECK(strcmp(laya_status_name(LAYA_ERR_NULL_ARGUMENT), "LAYA_ERR_NULL_ARGUMENT") == 0);

    /* Hot swap while another thread predicts. */
    struct worker w = {engine, 0, 0};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, predict_loop, &w) == 0);
    for (int i = 0; i < 10; i++) {
        CHECK_STATUS(laya_engine_swap(engine, argv[i % 2 == 0 ? 2 : 1]), LAYA_OK);
        CHECK_STATUS(laya_engine_swap(engine, argv[3]), LAYA_ERR_INVALID_MODEL); /* refused, old keeps serving */
    }
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(w.errors == 0);
    printf("worker thread: %d predictions, %d errors\n", w.predictions, w.errors);

    /* After an even number of swaps model A serves again; swap once more to B. */
    CHECK_STATUS(laya_engine_checksum(engine, &sum), LAYA_OK);
    CHECK(sum == sum_a);
    CHECK_STATUS(laya_engine_swap(engine, argv[2]), LAYA_OK);
    CHECK_STATUS(laya_engine_checksum(engine, &sum_b), LAYA_OK);
    CHECK(sum_b != sum_a);
    CHECK_STATUS(laya_engine_swap(engine, argv[3]), LAYA_ERR_INVALID_MODEL);
    printf("swap to corrupt file: %s\n", laya_last_error_message());
    CHECK_STATUS(laya_engine_checksum(engine, &sum), LAYA_OK);
    CHECK(sum == sum_b);

    CHECK_STATUS(laya_session_predict(session, hel, strlen(hel), 5, out, 8, &n), LAYA_OK);
    CHECK(n == 5);
    check_candidates(out, n);
    CHECK_STATUS(laya_session_checksum(session, &sum), LAYA_OK);
    CHECK(sum == sum_b); /* the session picked up the swap at its next prediction */
    print_candidates("hel after swap", out, n);

    /* The engine may go first: the session keeps the model alive. */
    laya_engine_free(engine);
    CHECK_STATUS(laya_session_predict(session, emoji, strlen(emoji), 5, out, 8, &n), LAYA_OK);
    CHECK(n == 5);
    laya_session_free(session);
    laya_engine_free(NULL);
    laya_session_free(NULL);

    if (failures) {
        fprintf(stderr, "example.c: %d check(s) failed\n", failures);
        return 1;
    }
    printf("example.c: all checks passed (sum_a=%016" PRIx64 ", sum_b=%016" PRIx64 ")\n", sum_a, sum_b);
    return 0;
}
