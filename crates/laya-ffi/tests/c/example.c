/*
 * A keyboard's use of Laya from C: open a model, predict (plain, emoji, empty, invalid UTF-8),
 * hot-swap while another thread predicts, refuse a corrupt model, learn from what the user
 * commits (forget, block, incognito, save and reopen the user file, set a damaged one aside),
 * free everything.
 *
 * Built and linked from the repository root as crates/laya-ffi/README.md ("Building") shows:
 *
 *   cargo build -p laya-ffi --release
 *   cc crates/laya-ffi/tests/c/example.c -I crates/laya-ffi/include -L target/release \
 *      -Wl,-rpath,"$PWD/target/release" -llaya_ffi -lpthread -o example
 *   ./example MODEL_A MODEL_B CORRUPT_MODEL USER_FILE
 *
 * (the rpath lets ./example find liblaya_ffi.so without LD_LIBRARY_PATH).
 *
 * USER_FILE is a path in a writable directory; the example creates, overwrites and sets aside
 * the file there (and its "<USER_FILE>.lock").
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

/* The position of `word` among the candidates (with any replace count), or -1. */
static int find_word(const laya_candidate* c, size_t n, const char* word) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(c[i].word, word) == 0) return (int)i;
    }
    return -1;
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
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL_A MODEL_B CORRUPT_MODEL USER_FILE\n", argv[0]);
        return 2;
    }
    printf("laya %s\n", laya_version());

    /* Opening: NULL arguments, a missing file, a directory and a corrupt file are all refused with
     * a reason. */
    laya_engine* engine = (laya_engine*)1;
    CHECK_STATUS(laya_engine_open(NULL, &engine), LAYA_ERR_NULL_ARGUMENT);
    CHECK(engine == NULL);
    CHECK(strlen(laya_last_error_message()) > 0);
    CHECK_STATUS(laya_engine_open(argv[1], NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_engine_open("/nonexistent/model.laya", &engine), LAYA_ERR_IO);
    printf("missing file: %s\n", laya_last_error_message());
    CHECK_STATUS(laya_engine_open(".", &engine), LAYA_ERR_IO);
    CHECK(strstr(laya_last_error_message(), "is a directory") != NULL);
    printf("a directory: %s\n", laya_last_error_message());
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

    /* Personalisation: one history per person, shared by that person's sessions, kept in a
     * user file. */
    const char* user_path = argv[4];
    laya_user* user = NULL;
    CHECK_STATUS(laya_user_new(NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_new(&user), LAYA_OK);
    if (user == NULL) return 1;
    CHECK_STATUS(laya_session_set_user(session, NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_set_user(NULL, user), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_set_user(session, user), LAYA_OK);

    /* Learn what the user commits. A commit is cut into words with the model's lexicon and the
     * words already learned. The test models' lexicons are random made-up words, so the term
     * 光标 is committed on its own first (a short commit the lexicon cannot cut is learned as
     * one word, like a name); with the default model it comes from the lexicon. */
    size_t learned = 99, words = 0;
    const char* term = "光标";
    const char* sentence = "今天我们讨论光标的默认位置";
    CHECK_STATUS(laya_session_learn(session, term, strlen(term), &learned), LAYA_OK);
    CHECK(learned == 1);
    CHECK_STATUS(laya_session_learn(session, sentence, strlen(sentence), &learned), LAYA_OK);
    CHECK(learned > 1);
    CHECK_STATUS(laya_user_len(user, &words), LAYA_OK);
    printf("learned %zu words from \"%s\"; the history holds %zu words\n", learned, sentence, words);
    CHECK(words > 1);
    CHECK_STATUS(laya_session_learn(session, NULL, 0, NULL), LAYA_OK); /* nothing to learn */
    CHECK_STATUS(laya_session_learn(session, "\xe5\x85", 2, &learned), LAYA_ERR_INVALID_UTF8);
    CHECK(learned == 0);
    CHECK_STATUS(laya_session_learn(NULL, term, strlen(term), &learned), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_session_learn(session, NULL, 3, &learned), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_len(NULL, &words), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_len(user, NULL), LAYA_ERR_NULL_ARGUMENT);

    /* The history counts from the next prediction: after "光" the learned 光标, a word no test
     * lexicon has, is a candidate. How it is offered and how high it ranks depend on the
     * model's own distribution and on how often it was committed: the history takes a share of
     * each replace class's mass, so with a real model (whose lexicon continues 光) it is a
     * completion (r=1), while the random test models have no word starting with 光 and it
     * comes only from the next-word share (r=0). The example checks that it is a candidate
     * at all (the whole list, up to 64) and prints where. */
    const char* guang = "光";
    laya_candidate all[64];
    size_t n_all = 0;
    CHECK_STATUS(laya_session_predict(session, guang, strlen(guang), 64, all, 64, &n_all), LAYA_OK);
    check_candidates(all, n_all);
    print_candidates("光 with the history (top 8)", all, n_all < 8 ? n_all : 8);
    int at = find_word(all, n_all, term);
    CHECK(at >= 0);
    if (at >= 0) {
        printf("光标 after 光: candidate %d of %zu (r=%u, p=%.4f)\n", at + 1, n_all, all[at].replace, all[at].p);
    }

    /* Forget it: gone from the history and from the candidates. */
    int32_t flag = -1;
    CHECK_STATUS(laya_user_forget(user, term, strlen(term), &flag), LAYA_OK);
    CHECK(flag == 1);
    CHECK_STATUS(laya_user_forget(user, term, strlen(term), &flag), LAYA_OK);
    CHECK(flag == 0);
    CHECK_STATUS(laya_session_predict(session, guang, strlen(guang), 64, all, 64, &n_all), LAYA_OK);
    CHECK(find_word(all, n_all, term) < 0);
    CHECK_STATUS(laya_user_forget(user, "\xff", 1, &flag), LAYA_ERR_INVALID_UTF8);
    CHECK(flag == 0);

    /* Block the network's favourite after "hel": it never shows again, whatever the network
     * says (the word is copied: candidate words live only until the next prediction). */
    char blocked[128] = "";
    CHECK_STATUS(laya_session_predict(session, hel, strlen(hel), 8, out, 8, &n), LAYA_OK);
    CHECK(n == 8);
    if (n > 0) snprintf(blocked, sizeof blocked, "%s", out[0].word);
    printf("blocking %s, the first candidate after hel\n", blocked);
    CHECK_STATUS(laya_user_block(user, blocked, strlen(blocked)), LAYA_OK);
    CHECK_STATUS(laya_session_predict(session, hel, strlen(hel), 8, out, 8, &n), LAYA_OK);
    CHECK(n == 8);
    CHECK(find_word(out, n, blocked) < 0);
    print_candidates("hel with it blocked", out, n);
    CHECK_STATUS(laya_user_unblock(user, blocked, strlen(blocked), &flag), LAYA_OK);
    CHECK(flag == 1);
    CHECK_STATUS(laya_user_unblock(user, blocked, strlen(blocked), &flag), LAYA_OK);
    CHECK(flag == 0);
    CHECK_STATUS(laya_user_block(user, blocked, strlen(blocked)), LAYA_OK); /* kept for the file */
    CHECK_STATUS(laya_user_block(NULL, blocked, strlen(blocked)), LAYA_ERR_NULL_ARGUMENT);

    /* Incognito: nothing is learned until it is switched off. */
    size_t before = 0;
    CHECK_STATUS(laya_user_len(user, &before), LAYA_OK);
    CHECK_STATUS(laya_user_set_incognito(user, 1), LAYA_OK);
    CHECK_STATUS(laya_session_learn(session, "拉雅输入法", strlen("拉雅输入法"), &learned), LAYA_OK);
    CHECK(learned == 0);
    CHECK_STATUS(laya_user_len(user, &words), LAYA_OK);
    CHECK(words == before);
    CHECK_STATUS(laya_user_set_incognito(user, 0), LAYA_OK);
    CHECK_STATUS(laya_user_set_incognito(NULL, 0), LAYA_ERR_NULL_ARGUMENT);

    /* Save, then reopen: the same words and the blocklist come back. */
    CHECK_STATUS(laya_user_save(user, "/nonexistent/dir/user.layu"), LAYA_ERR_IO);
    printf("save to a missing directory: %s\n", laya_last_error_message());
    CHECK_STATUS(laya_user_save(NULL, user_path), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_save(user, NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_save(user, user_path), LAYA_OK);
    laya_user* reopened = (laya_user*)1;
    int32_t set_aside = -1;
    CHECK_STATUS(laya_user_open(NULL, &reopened, &set_aside), LAYA_ERR_NULL_ARGUMENT);
    CHECK(reopened == NULL);
    CHECK_STATUS(laya_user_open(user_path, NULL, &set_aside), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_open(user_path, &reopened, &set_aside), LAYA_OK);
    if (reopened == NULL) return 1;
    CHECK(set_aside == 0);
    size_t reopened_words = 0;
    CHECK_STATUS(laya_user_len(reopened, &reopened_words), LAYA_OK);
    CHECK(reopened_words == before);
    printf("saved and reopened %s: %zu words\n", user_path, reopened_words);
    CHECK_STATUS(laya_user_unblock(reopened, blocked, strlen(blocked), &flag), LAYA_OK);
    CHECK(flag == 1); /* the blocklist was saved */
    CHECK_STATUS(laya_user_block(reopened, blocked, strlen(blocked)), LAYA_OK);

    /* The session now learns into the reopened history. The first handle may be freed before
     * the sessions that used it (they hold their own reference). */
    CHECK_STATUS(laya_session_set_user(session, reopened), LAYA_OK);
    laya_user_free(user);
    user = NULL;
    CHECK_STATUS(laya_session_learn(session, term, strlen(term), &learned), LAYA_OK);
    CHECK(learned == 1);
    CHECK_STATUS(laya_user_len(reopened, &words), LAYA_OK);
    CHECK(words == reopened_words + 1);
    CHECK_STATUS(laya_user_clear(reopened), LAYA_OK);
    CHECK_STATUS(laya_user_len(reopened, &words), LAYA_OK);
    CHECK(words == 0);
    CHECK_STATUS(laya_user_clear(NULL), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_forget(NULL, term, strlen(term), &flag), LAYA_ERR_NULL_ARGUMENT);
    CHECK_STATUS(laya_user_unblock(NULL, term, strlen(term), &flag), LAYA_ERR_NULL_ARGUMENT);

    /* A damaged user file is set aside, not an error: the history starts empty and the warning
     * to show the person is the thread's message. */
    FILE* damaged = fopen(user_path, "wb");
    CHECK(damaged != NULL);
    if (damaged != NULL) {
        fputs("not a user file", damaged);
        fclose(damaged);
    }
    laya_user* fresh = NULL;
    set_aside = -1;
    CHECK_STATUS(laya_user_open(user_path, &fresh, &set_aside), LAYA_OK);
    CHECK(fresh != NULL);
    CHECK(set_aside == 1);
    CHECK(strstr(laya_last_error_message(), ".corrupt-") != NULL);
    printf("damaged user file: %s\n", laya_last_error_message());
    CHECK_STATUS(laya_user_len(fresh, &words), LAYA_OK);
    CHECK(words == 0);
    laya_user_free(fresh);
    CHECK_STATUS(laya_user_open(user_path, &fresh, NULL), LAYA_OK); /* missing now: empty */
    laya_user_free(fresh);

    /* The engine may go first: the session keeps the model alive. */
    laya_engine_free(engine);
    CHECK_STATUS(laya_session_predict(session, emoji, strlen(emoji), 5, out, 8, &n), LAYA_OK);
    CHECK(n == 5);
    CHECK_STATUS(laya_session_predict(session, hel, strlen(hel), 8, out, 8, &n), LAYA_OK);
    CHECK(find_word(out, n, blocked) < 0); /* blocked in the reopened history the session uses */
    laya_session_free(session);
    laya_user_free(reopened); /* the last reference: the history is released here */
    laya_engine_free(NULL);
    laya_session_free(NULL);
    laya_user_free(NULL);

    if (failures) {
        fprintf(stderr, "example.c: %d check(s) failed\n", failures);
        return 1;
    }
    printf("example.c: all checks passed (sum_a=%016" PRIx64 ", sum_b=%016" PRIx64 ")\n", sum_a, sum_b);
    return 0;
}
