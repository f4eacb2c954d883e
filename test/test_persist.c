/* test_persist.c: conversations that survive a restart (park/persist.[ch])
 * and the host-memory floor (park_set_min_free), on the CPU backend with a
 * small generated llama.
 *
 * Judges: the engine itself (a follow-up after a restart must give the
 * greedy tokens of reading the whole history on a fresh engine, and must
 * read only its new tokens: the scheduler's n_restored), the original
 * capture's bytes (a loaded image must equal them byte for byte), and the
 * file checks (a flipped byte, another model, another KV type, a torn file:
 * refused, nothing loaded). */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/convcache.h"
#include "engine/engine_internal.h"
#include "park/hostmem.h"
#include "park/park.h"
#include "park/persist.h"
#include "test_persist.h"
#include "test_scheduler.h"

/* Image files (names *.skv) in dir. */
static int count_images(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n += l > 4 && !strcmp(de->d_name + l - 4, PERSIST_SUFFIX);
    }
    closedir(d);
    return n;
}

/* A park with tokens[0..n) fed and captured: the image. */
static strata_park *park_with(strata_engine *e, const int32_t *t, int n, convcache_image **img)
{
    strata_error err = {0};
    strata_park *pk = park_new(e, 64, 16, &err);
    ck_assert_msg(pk != NULL, "park_new: %s", err.msg);
    strata_seq *s = strata_seq_new(e, &err);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(strata_seq_feed(s, t, n, NULL, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(park_capture(pk, s, -1, 0, NULL, &err) == 0, "%s", err.msg);
    strata_seq_free(s);
    ck_assert_int_eq(convcache_find(park_cache(pk), t, n, img), n);
    return pk;
}

/* A's stage bytes over all spans, gathered token-major would need the
 * layout; both images here are one fresh span, so their parts compare
 * directly. */
static int same_image(const convcache_image *a, const convcache_image *b, int n_stages)
{
    int na, nb;
    const int32_t *ta = convcache_image_tokens(a, &na), *tb = convcache_image_tokens(b, &nb);
    if (na != nb || memcmp(ta, tb, sizeof *ta * (size_t)na))
        return 0;
    for (int s = 0; s < n_stages; s++) {
        convcache_span x, y;
        ck_assert_int_eq(convcache_image_n_spans(a), 1);
        ck_assert_int_eq(convcache_image_n_spans(b), 1);
        ck_assert_int_eq(convcache_image_span(a, s, 0, &x, NULL), 0);
        ck_assert_int_eq(convcache_image_span(b, s, 0, &y, NULL), 0);
        if (x.bytes != y.bytes || memcmp(x.data, y.data, x.bytes))
            return 0;
    }
    return 1;
}

/* The longest common prefix with any image, not only whole-image prefixes
 * (what a restore after a restart needs). */
START_TEST(persist_find_common_prefix)
{
    convcache *c = plain_cache(1);
    int32_t a[10], b[8];
    for (int i = 0; i < 10; i++)
        a[i] = i + 1;
    memcpy(b, a, sizeof(int32_t) * 5);
    b[5] = b[6] = b[7] = 9;
    const int32_t *keys[2] = {a, b};
    int lens[2] = {10, 8};
    strata_error err = {0};
    for (int k = 0; k < 2; k++) {
        size_t bytes = 64;
        convcache_capture *cap;
        ck_assert_int_eq(convcache_begin(c, keys[k], lens[k], lens[k], NULL, &bytes, &cap, &err),
                         0);
        memset(convcache_capture_part(cap, 0), k + 1, 64);
        ck_assert_int_eq(convcache_commit(c, cap, NULL, &err), 0);
    }
    convcache_image *img;
    int32_t q[8] = {1, 2, 3, 4, 5, 6, 7, 0};
    ck_assert_int_eq(convcache_find_common(c, q, 8, &img), 7);
    ck_assert_int_eq(convcache_image_tokens(img, NULL)[9], 10);
    /* the whole-prefix lookup finds nothing for it */
    ck_assert_int_eq(convcache_find(c, q, 8, &img), 0);
    int32_t r[9] = {1, 2, 3, 4, 5, 9, 9, 9, 9};
    ck_assert_int_eq(convcache_find_common(c, r, 9, &img), 8);
    ck_assert_int_eq(convcache_image_tokens(img, NULL)[7], 9);
    ck_assert_int_eq(convcache_find_common(c, r, 3, &img), 3);   /* query shorter */
    int32_t z[1] = {2};
    ck_assert_int_eq(convcache_find_common(c, z, 1, &img), 0);
    ck_assert_ptr_null(img);
    convcache_free(c);
}
END_TEST

/* ---- save, restart, follow-up ------------------------------------------- */

enum { P_LEN = 300, GEN = 8, Q_LEN = 20 };

static int run_turn(strata_engine *e, const char *dir, const int32_t *prompt, int n,
                    int32_t *out, sched_result *res, sched_cache_stats *cs)
{
    sched_params sp = sched_params_default();
    sp.cache_mib = 64;
    sp.no_resident_reuse = 1;   /* captured as soon as the turn ends */
    sp.save_dir = dir;
    strata_error err = {0};
    strata_sched *s = sched_new(e, &sp, &err);
    ck_assert_msg(s != NULL, "sched_new: %s", err.msg);
    sched_request r = sched_test_greedy(prompt, n, GEN);
    r.ignore_stop = 1;
    sched_handle *h;
    ck_assert_msg(sched_submit(s, &r, &h, &err) == 0, "%s", err.msg);
    int k = sched_test_drain(h, out, GEN);
    ck_assert_int_eq(sched_wait(h, res), 0);
    sched_handle_free(h);
    sched_get_cache_stats(s, cs);
    sched_free(s);   /* writes what is queued */
    return k;
}

/* Turn 1 on a two-stage engine saves its conversation; a fresh one-stage
 * engine (the "restart": another engine, another layer split) loads it and
 * its follow-up reads only the new tokens, with the tokens a fresh engine
 * gets by reading the whole history. */
START_TEST(persist_restart_reads_only_new_tokens)
{
    char *dir = path_in(test_tmpdir(), "save");
    int32_t *p1 = random_tokens(P_LEN, 11);
    int32_t a1[GEN];
    sched_result res;
    sched_cache_stats cs;
    strata_engine *e = open_engine(model_a(), "2", STRATA_KV_DEFAULT);
    ck_assert_int_eq(run_turn(e, dir, p1, P_LEN, a1, &res, &cs), GEN);
    ck_assert_int_eq(res.n_restored, 0);
    strata_close(e);
    ck_assert_int_eq(count_images(dir), 1);

    /* turn 2: the history, the answer, a new message */
    int n2 = P_LEN + GEN + Q_LEN;
    int32_t *p2 = malloc(sizeof *p2 * (size_t)n2);
    int32_t *q = random_tokens(Q_LEN, 12);
    memcpy(p2, p1, sizeof *p1 * P_LEN);
    memcpy(p2 + P_LEN, a1, sizeof *a1 * GEN);
    memcpy(p2 + P_LEN + GEN, q, sizeof *q * Q_LEN);
    int32_t got[GEN], want[GEN];
    e = open_engine(model_a(), NULL, STRATA_KV_DEFAULT);
    ck_assert_int_eq(run_turn(e, dir, p2, n2, got, &res, &cs), GEN);
    ck_assert_int_eq(cs.park.persist.loaded, 1);
    ck_assert_int_eq(cs.park.persist.skipped, 0);
    /* the image holds turn 1's prompt and the answer's tokens that were fed
     * (all but the last); only the rest was read */
    ck_assert_int_ge(res.n_restored, P_LEN + GEN - 1);
    ck_assert_int_le(res.n_prompt - res.n_restored, Q_LEN + 1);
    ck_assert_int_eq(res.n_prompt, n2);
    /* and the answer is the one of reading everything */
    ck_assert_int_eq(sched_test_solo_ex(e, p2, n2, GEN, 1, want), GEN);
    sched_test_expect("follow-up after a restart", 0, got, GEN, want, GEN);
    strata_close(e);
    /* turn 2's file replaced turn 1's (it extends it) */
    ck_assert_int_eq(count_images(dir), 1);
    free(p1);
    free(p2);
    free(q);
    free(dir);
}
END_TEST

/* Two `strata-cli chat` processes: the first saves its conversation when
 * it ends; the second loads it, and its first turn (a prefix of the saved
 * conversation) restores all of its prompt but the last token, with the
 * answer of a chat without any saving. */
START_TEST(persist_chat_two_processes)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    const char *model = test_tiny_llama("chat-cli-llama", 400, 11);
    char *dir = path_in(test_tmpdir(), "save");
    const char *args = "-n 16 --temp 0 --backend cpu -t 1";
    char *first = NULL, *plain = NULL, *again = NULL, *st = NULL;
    /* od: the random model's noise may hold NUL bytes */
    ck_assert_int_eq(test_runf(&first, "printf 'hello there\\n' | '%s' chat -m '%s' %s "
                               "--conversation-save '%s' 2>/dev/null | od -c", cli, model, args,
                               dir), 0);
    ck_assert_int_eq(count_images(dir), 1);
    ck_assert_int_eq(test_runf(&plain, "printf 'hello there\\nand again\\n' | '%s' chat -m '%s' "
                               "%s 2>/dev/null | od -c", cli, model, args), 0);
    ck_assert_int_eq(test_runf(&again, "printf 'hello there\\nand again\\n' | '%s' chat -m '%s' "
                               "%s --conversation-save '%s' 2>/dev/null | od -c", cli, model, args,
                               dir), 0);
    ck_assert_msg(strlen(plain) > 60, "no answers: '%s'", plain);
    ck_assert_str_eq(again, plain);
    ck_assert_int_eq(test_runf(&st, "printf 'hello there\\n/stats\\n' | '%s' chat -m '%s' %s "
                               "--conversation-save '%s' 2>&1 | tr -d '\\000'", cli, model, args,
                               dir), 0);
    const char *p = strstr(st, "strata: prompt ");
    int prompt = 0, reused = 0, kept = 0, restored = 0, read = 0;
    ck_assert_msg(p && sscanf(p, "strata: prompt %d tok: %d reused (%d kept in the slot, %d "
                              "restored in %*f s), %d read", &prompt, &reused, &kept, &restored,
                              &read) == 5, "no /stats line:\n%s", st);
    ck_assert_msg(restored == prompt - 1 && read == 1, "restored %d of %d, read %d:\n%s",
                  restored, prompt, read, st);
    ck_assert_msg(strstr(st, "conversation save: 1 loaded at start (0 files skipped)"), "%s", st);
    free(first);
    free(plain);
    free(again);
    free(st);
    free(dir);
}
END_TEST

/* The /stats line of a chat: prompt tokens, kept in the slot, restored,
 * read. */
static void chat_stats(const char *out, int *prompt, int *kept, int *restored, int *read)
{
    const char *p = strstr(out, "strata: prompt ");
    int reused = 0;
    ck_assert_msg(p && sscanf(p, "strata: prompt %d tok: %d reused (%d kept in the slot, %d "
                              "restored in %*f s), %d read", prompt, &reused, kept, restored,
                              read) == 5, "no /stats line:\n%s", out);
}

/* chat --resume: a second chat process goes on with the conversation the
 * first left in the save directory.  Its follow-up restores the whole
 * history from the file and reads only the new message: the same counts
 * (restored there, kept in the slot here) and the same answer as one chat
 * that asked both questions.  args: the chats' options (-n). */
static void chat_resume_equals_one_chat(const char *cli, const char *model, const char *args)
{
    char *dir = path_in(test_tmpdir(), "save");
    char *first = NULL, *again = NULL, *both = NULL;
    ck_assert_int_eq(test_runf(&first, "printf 'What is the capital of France?\\n' | '%s' chat "
                               "-m '%s' %s --conversation-save '%s' 2>/dev/null", cli, model,
                               args, dir), 0);
    ck_assert_int_eq(count_images(dir), 1);
    ck_assert_int_eq(test_runf(&again, "printf 'And of Germany?\\n/stats\\n' | '%s' chat -m "
                               "'%s' %s --conversation-save '%s' --resume 2>/dev/null", cli,
                               model, args, dir), 0);
    ck_assert_int_eq(test_runf(&both, "printf 'What is the capital of France?\\nAnd of "
                               "Germany?\\n/stats\\n' | '%s' chat -m '%s' %s 2>/dev/null", cli,
                               model, args), 0);
    int p1, k1, r1, n1, p2, k2, r2, n2;
    chat_stats(again, &p1, &k1, &r1, &n1);
    chat_stats(both, &p2, &k2, &r2, &n2);
    ck_assert_msg(p1 == p2 && r1 == k2 && k1 == 0 && n1 == n2 && r1 > n1,
                  "resumed: prompt %d, %d restored, %d read; one chat: prompt %d, %d kept, %d "
                  "read", p1, r1, n1, p2, k2, n2);
    /* the resumed answer is the one chat's second line */
    const char *nl = strchr(again, '\n');
    ck_assert_ptr_nonnull(nl);
    const char *second = strchr(both, '\n');
    ck_assert_ptr_nonnull(second);
    ck_assert_msg(nl - again > 0 && !strncmp(second + 1, again, (size_t)(nl - again + 1)),
                  "resumed answer '%.*s', one chat's:\n%s", (int)(nl - again), again, both);
    fprintf(stderr, "persist_chat_resume (%s): follow-up of %d tokens, %d restored from the "
            "file, %d read\n", args, p1, r1, n1);
    free(first);
    free(again);
    free(both);
    free(dir);
}

/* The demo model: with -n 48 the first answer ends by its stop token and
 * the saved history is all of it; with -n 6 it is cut, and its last token,
 * never read, comes back from the file as the pending token, so the
 * resumed history still ends as the one chat's does. */
START_TEST(persist_chat_resume)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model not found (STRATA_MODEL or ~/.cache/strata)");
    const char *args = "-n 48 -t 1 --backend cpu";
    chat_resume_equals_one_chat(cli, model, args);
    chat_resume_equals_one_chat(cli, model, "-n 6 -t 1 --backend cpu");
    char *none = NULL;
    /* --resume needs the directory; an empty one starts a new conversation */
    ck_assert_int_eq(test_runf(&none, "printf '' | '%s' chat -m '%s' %s --resume 2>&1", cli, model,
                               args), 2);
    ck_assert_msg(strstr(none, "--conversation-save"), "%s", none);
    free(none);
    char *empty = path_in(test_tmpdir(), "empty");
    ck_assert_int_eq(test_runf(&none, "printf '' | '%s' chat -m '%s' %s --conversation-save "
                               "'%s' --resume 2>&1", cli, model, args, empty), 0);
    ck_assert_msg(strstr(none, "no saved conversation"), "%s", none);
    free(none);
    free(empty);
}
END_TEST

/* ---- crash safety --------------------------------------------------------- */

/* A child writes two images over one file in a loop; killed at random
 * points, the file always loads, and as one of the two, byte for byte. */
START_TEST(persist_kill9_mid_save)
{
    strata_engine *e = open_engine(model_a(), NULL, STRATA_KV_DEFAULT);
    int32_t *tx = random_tokens(1000, 21), *ty = random_tokens(700, 22);
    convcache_image *ix, *iy;
    strata_park *px = park_with(e, tx, 1000, &ix), *py = park_with(e, ty, 700, &iy);
    persist_id id;
    strata_error err = {0};
    ck_assert_msg(persist_identity(e, &id, &err) == 0, "%s", err.msg);
    char *path = path_in(test_tmpdir(), "0123456789abcdef" PERSIST_SUFFIX);
    ck_assert_msg(persist_write_file(&id, ix, path, NULL, &err) == 0, "%s", err.msg);
    uint64_t seed = 5;
    int seen_x = 0, seen_y = 0;
    for (int round = 0; round < 12; round++) {
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            for (int i = 0;; i++)
                persist_write_file(&id, i % 2 ? ix : iy, path, NULL, NULL);
        }
        usleep((useconds_t)(1000 + test_rand_u64(&seed) % 40000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        convcache *c = plain_cache(e->n_stages);
        convcache_image *got = NULL;
        int rc = persist_load_file(&id, c, path, &got, &err);
        ck_assert_msg(rc == 0, "round %d: %s", round, err.msg);
        int is_x = same_image(got, ix, e->n_stages), is_y = same_image(got, iy, e->n_stages);
        ck_assert_msg(is_x || is_y, "round %d: the loaded image is neither", round);
        seen_x += is_x;
        seen_y += is_y;
        convcache_free(c);
    }
    /* which one a kill leaves depends on the disk's speed: reported */
    fprintf(stderr, "persist_kill9_mid_save: old/new seen %d/%d\n", seen_x, seen_y);
    park_free(px);
    park_free(py);
    free(tx);
    free(ty);
    free(path);
    strata_close(e);
}
END_TEST

/* A flipped byte anywhere (header, tokens, K/V, checksum) and a truncated
 * file are refused with the file's name; nothing enters the cache. */
START_TEST(persist_flipped_byte_skipped)
{
    strata_engine *e = open_engine(model_a(), NULL, STRATA_KV_DEFAULT);
    int32_t *t = random_tokens(300, 31);
    convcache_image *img;
    strata_park *pk = park_with(e, t, 300, &img);
    persist_id id;
    strata_error err = {0};
    ck_assert_int_eq(persist_identity(e, &id, &err), 0);
    const char *dir = test_tmpdir();
    char *path = path_in(dir, "00000000000000aa" PERSIST_SUFFIX);
    uint64_t bytes = 0;
    ck_assert_int_eq(persist_write_file(&id, img, path, &bytes, &err), 0);
    ck_assert_int_eq(persist_verify_file(&id, path, &err), 0);
    FILE *f = fopen(path, "rb");
    uint8_t *orig = malloc(bytes);
    ck_assert_int_eq(fread(orig, 1, bytes, f), bytes);
    fclose(f);
    uint64_t seed = 9;
    long offs[12] = {0, 20, 60, 96, 96 + 4 * 150, (long)bytes / 2, (long)bytes - 9,
                     (long)bytes - 1};
    for (int k = 8; k < 12; k++)
        offs[k] = 96 + 1200 + (long)(test_rand_u64(&seed) % (bytes - 96 - 1200 - 8));
    for (int k = 0; k < 13; k++) {
        uint8_t *b = malloc(bytes);
        memcpy(b, orig, bytes);
        size_t len = bytes;
        if (k < 12)
            b[offs[k]] ^= (uint8_t)(1u << (k % 8));
        else
            len = bytes - 1000;   /* torn: cut short */
        f = fopen(path, "wb");
        ck_assert_int_eq(fwrite(b, 1, len, f), len);
        fclose(f);
        free(b);
        convcache *c = plain_cache(e->n_stages);
        strata_err_clear(&err);
        int rc = persist_load_file(&id, c, path, NULL, &err);
        ck_assert_msg(rc == STRATA_E_FORMAT, "case %d (offset %ld): rc %d: %s", k,
                      k < 12 ? offs[k] : -1L, rc, err.msg);
        ck_assert_msg(strstr(err.msg, path), "%s", err.msg);
        convcache_stats st;
        convcache_get_stats(c, &st);
        ck_assert_int_eq(st.images, 0);
        ck_assert_int_eq(st.bytes_used, 0);
        convcache_free(c);
    }
    /* through the directory: warned, counted, not loaded */
    persist_params pp = {.dir = dir};
    convcache *c = plain_cache(e->n_stages);
    persist *ps = persist_new(e, c, &pp, &err);
    ck_assert_msg(ps != NULL, "%s", err.msg);
    persist_stats st;
    persist_get_stats(ps, &st);
    ck_assert_int_eq(st.loaded, 0);
    ck_assert_int_eq(st.skipped, 1);
    persist_free(ps);
    convcache_free(c);
    free(orig);
    free(path);
    free(t);
    park_free(pk);
    strata_close(e);
}
END_TEST

/* Another model (same shape, other weights) and another KV type (k8v4r:
 * the same sizes as k8v4; f16: other sizes) are refused by name. */
START_TEST(persist_other_model_and_kv_type_skipped)
{
    strata_engine *e = open_engine(model_a(), NULL, STRATA_KV_K8V4);
    int32_t *t = random_tokens(200, 41);
    convcache_image *img;
    strata_park *pk = park_with(e, t, 200, &img);
    persist_id id;
    strata_error err = {0};
    ck_assert_int_eq(persist_identity(e, &id, &err), 0);
    char *path = path_in(test_tmpdir(), "00000000000000bb" PERSIST_SUFFIX);
    ck_assert_int_eq(persist_write_file(&id, img, path, NULL, &err), 0);
    park_free(pk);
    strata_close(e);

    struct {
        const char *model;
        int kv;
        const char *says;
    } other[3] = {{test_tiny_llama("persist-llama-b", N_VOCAB, 8), STRATA_KV_K8V4, "another model"},
                  {model_a(), STRATA_KV_K8V4R, "KV type k8v4"},
                  {model_a(), STRATA_KV_F16, "KV type k8v4"}};
    for (int k = 0; k < 3; k++) {
        strata_engine *o = open_engine(other[k].model, NULL, other[k].kv);
        persist_id oid;
        ck_assert_int_eq(persist_identity(o, &oid, &err), 0);
        convcache *c = plain_cache(o->n_stages);
        int rc = persist_load_file(&oid, c, path, NULL, &err);
        ck_assert_msg(rc == STRATA_E_FORMAT && strstr(err.msg, other[k].says) &&
                      strstr(err.msg, path), "case %d: rc %d: %s", k, rc, err.msg);
        convcache_stats st;
        convcache_get_stats(c, &st);
        ck_assert_int_eq(st.images, 0);
        convcache_free(c);
        strata_close(o);
    }
    free(path);
    free(t);
}
END_TEST

/* A write that fails (here: a file size limit, as a full disk would) is a
 * warning: the capture succeeds, the image stays in memory, nothing is
 * left in the directory, and a later save works. */
START_TEST(persist_write_failure_is_a_warning)
{
    strata_engine *e = open_engine(model_a(), NULL, STRATA_KV_DEFAULT);
    strata_error err = {0};
    strata_park *pk = park_new(e, 64, 16, &err);
    ck_assert_ptr_nonnull(pk);
    char *dir = path_in(test_tmpdir(), "save");
    persist_params pp = {.dir = dir};
    ck_assert_msg(park_persist_start(pk, &pp, &err) == 0, "%s", err.msg);
    int32_t *t = random_tokens(300, 81);
    strata_seq *s = strata_seq_new(e, &err);
    ck_assert_int_eq(strata_seq_feed(s, t, 300, NULL, NULL, &err), 0);
    struct rlimit old, small = {16384, 0};
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);   /* write then fails with EFBIG instead */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    ck_assert_msg(park_capture(pk, s, -1, 0, NULL, &err) == 0, "%s", err.msg);
    park_persist_flush(pk);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    park_stats st;
    park_get_stats(pk, &st);
    ck_assert_int_eq(st.persist.save_failures, 1);
    ck_assert_int_eq(st.persist.saved, 0);
    DIR *d = opendir(dir);
    struct dirent *de;
    int left = 0;
    while ((de = readdir(d)))
        left += de->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(left, 0);
    convcache_image *img;
    ck_assert_int_eq(convcache_find(park_cache(pk), t, 300, &img), 300);
    /* the next save goes through */
    int32_t more = 5;
    ck_assert_int_eq(strata_seq_feed(s, &more, 1, NULL, NULL, &err), 0);
    ck_assert_int_eq(park_capture(pk, s, -1, 0, NULL, &err), 0);
    park_persist_flush(pk);
    park_get_stats(pk, &st);
    ck_assert_int_eq(st.persist.saved, 1);
    ck_assert_int_eq(count_images(dir), 1);
    strata_seq_free(s);
    park_free(pk);
    free(t);
    free(dir);
    strata_close(e);
}
END_TEST

/* ---- the directory's cap and age ------------------------------------------ */

static void touch_ago(const char *path, int seconds)
{
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= seconds;
    tv[1] = tv[0];
    ck_assert_int_eq(utimes(path, tv), 0);
}

START_TEST(persist_cap_evicts_oldest_first)
{
    strata_engine *e = open_engine(model_a(), NULL, STRATA_KV_DEFAULT);
    int32_t *t = random_tokens(700, 51);   /* ~290 KB a file: 3 in a MiB */
    convcache_image *img;
    strata_park *pk = park_with(e, t, 700, &img);
    persist_id id;
    strata_error err = {0};
    ck_assert_int_eq(persist_identity(e, &id, &err), 0);
    char *dir = path_in(test_tmpdir(), "cap");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    char name[32];
    char *paths[6];
    uint64_t bytes = 0;
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "%016x%s", i + 1, PERSIST_SUFFIX);
        paths[i] = path_in(dir, name);
        ck_assert_int_eq(persist_write_file(&id, img, paths[i], &bytes, &err), 0);
        touch_ago(paths[i], 1000 * (6 - i));   /* file 0 the oldest */
    }
    /* a stranger's file is never touched */
    char *other = path_in(dir, "notes.txt");
    FILE *f = fopen(other, "w");
    fputs("keep me", f);
    fclose(f);
    touch_ago(other, 100000);
    /* a cap of 1 MiB keeps the newest that fit */
    int keep = (int)((1u << 20) / bytes);
    ck_assert_msg(keep >= 2 && keep <= 4, "files of %llu bytes", (unsigned long long)bytes);
    ck_assert_int_eq(persist_enforce(dir, 1, 0), 6 - keep);
    struct stat st;
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(stat(paths[i], &st) == 0, i >= 6 - keep);
    /* the age limit: files older than a day go (the oldest kept made 2
     * days old) */
    touch_ago(paths[6 - keep], 2 * 86400);
    ck_assert_int_eq(persist_enforce(dir, 0, 1), 1);
    ck_assert_int_ne(stat(paths[6 - keep], &st), 0);
    ck_assert_int_eq(stat(paths[5], &st), 0);
    ck_assert_int_eq(stat(other, &st), 0);
    for (int i = 0; i < 6; i++)
        free(paths[i]);
    free(other);
    free(dir);
    free(t);
    park_free(pk);
    strata_close(e);
}
END_TEST

/* ---- the host-memory floor ---------------------------------------------- */

static uint64_t fake_avail;
static int fake_mem(uint64_t *bytes)
{
    *bytes = fake_avail;
    return 0;
}

/* Under the floor a capture evicts to make its room or is declined: the
 * cache's bytes never grow, the warning comes once, answers stay right. */
START_TEST(persist_floor_no_growth)
{
    strata_engine *e = open_engine(model_a(), NULL, STRATA_KV_DEFAULT);
    strata_error err = {0};
    strata_park *pk = park_new(e, 64, 16, &err);
    ck_assert_ptr_nonnull(pk);
    park_set_min_free(pk, 1000);
    park_mem_available_hook = fake_mem;
    fake_avail = (uint64_t)4000 << 20;
    int32_t *ta = random_tokens(300, 61), *tb = random_tokens(200, 62),
            *tc = random_tokens(500, 63);
    strata_seq *s = strata_seq_new(e, &err);
    ck_assert_int_eq(strata_seq_feed(s, ta, 300, NULL, NULL, &err), 0);
    ck_assert_int_eq(park_capture(pk, s, -1, 0, NULL, &err), 0);
    convcache_stats cs;
    convcache_get_stats(park_cache(pk), &cs);
    size_t full = cs.bytes_used;
    ck_assert_uint_gt(full, 0);
    /* under the floor: B (smaller) evicts A to make its room */
    fake_avail = (uint64_t)10 << 20;
    strata_seq_reset(s);
    ck_assert_int_eq(strata_seq_feed(s, tb, 200, NULL, NULL, &err), 0);
    ck_assert_msg(park_capture(pk, s, -1, 0, NULL, &err) == 0, "%s", err.msg);
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_uint_le(cs.bytes_used, full);
    ck_assert_int_eq(cs.images, 1);
    convcache_image *img;
    ck_assert_int_eq(convcache_find(park_cache(pk), tb, 200, &img), 200);
    size_t with_b = cs.bytes_used;
    /* C needs more than the cache can give back: declined, nothing changes */
    strata_seq_reset(s);
    ck_assert_int_eq(strata_seq_feed(s, tc, 500, NULL, NULL, &err), 0);
    int rc = park_capture(pk, s, -1, 0, NULL, &err);
    ck_assert_int_eq(rc, STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "--conversation-cache-min-free-mib"), "%s", err.msg);
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_uint_eq(cs.bytes_used, with_b);
    park_stats ps;
    park_get_stats(pk, &ps);
    ck_assert_int_eq(ps.floor_warnings, 1);
    ck_assert_int_eq(ps.floor_evictions, 1);
    ck_assert_int_eq(ps.floor_declines, 1);
    strata_seq_free(s);
    park_free(pk);

    /* through the scheduler, under the floor from the start: two-turn
     * conversations are answered as solo runs, nothing is parked, one
     * warning */
    sched_params sp = sched_params_default();
    sp.cache_mib = 64;
    sp.no_resident_reuse = 1;
    sp.min_free_mib = 1000;
    /* the prompts and their solo answers first: the scheduler owns the
     * engine while it runs */
    int32_t *prompts[3][2], want[3][2][GEN];
    for (int k = 0; k < 3; k++)
        for (int turn = 0; turn < 2; turn++) {
            int n = 100 + 40 * k + turn * 30;
            prompts[k][turn] = random_tokens(n, 70 + (uint64_t)k);  /* turn 1 extends turn 0 */
            ck_assert_int_eq(sched_test_solo_ex(e, prompts[k][turn], n, GEN, 1, want[k][turn]),
                             GEN);
        }
    strata_sched *sc = sched_new(e, &sp, &err);
    ck_assert_ptr_nonnull(sc);
    for (int k = 0; k < 3; k++) {
        int32_t got[GEN];
        for (int turn = 0; turn < 2; turn++) {
            int n = 100 + 40 * k + turn * 30;
            int32_t *p = prompts[k][turn];
            sched_request r = sched_test_greedy(p, n, GEN);
            r.ignore_stop = 1;
            sched_handle *h;
            ck_assert_int_eq(sched_submit(sc, &r, &h, &err), 0);
            ck_assert_int_eq(sched_test_drain(h, got, GEN), GEN);
            sched_result res;
            ck_assert_int_eq(sched_wait(h, &res), 0);
            ck_assert_int_eq(res.n_restored, 0);
            sched_handle_free(h);
            sched_test_expect("under the floor", k, got, GEN, want[k][turn], GEN);
            free(p);
        }
    }
    sched_cache_stats st;
    sched_get_cache_stats(sc, &st);
    ck_assert_uint_eq(st.cache.bytes_used, 0);
    ck_assert_int_eq(st.park.floor_warnings, 1);
    ck_assert_int_eq(st.park.floor_declines, 6);
    sched_free(sc);
    park_mem_available_hook = NULL;
    free(ta);
    free(tb);
    free(tc);
    strata_close(e);
}
END_TEST

/* The real MemAvailable reads (the override is for the cases above). */
START_TEST(persist_meminfo_reads)
{
    uint64_t b = 0;
    ck_assert_int_eq(park_mem_available(&b), 0);
    ck_assert_uint_gt(b, (uint64_t)1 << 20);
}
END_TEST

static Suite *persist_suite(void)
{
    Suite *s = suite_create("persist");
    TCase *tc = tcase_create("persist");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, persist_find_common_prefix);
    tcase_add_test(tc, persist_restart_reads_only_new_tokens);
    tcase_add_test(tc, persist_chat_two_processes);
    tcase_add_test(tc, persist_chat_resume);
    tcase_add_test(tc, persist_kill9_mid_save);
    tcase_add_test(tc, persist_flipped_byte_skipped);
    tcase_add_test(tc, persist_other_model_and_kv_type_skipped);
    tcase_add_test(tc, persist_write_failure_is_a_warning);
    tcase_add_test(tc, persist_cap_evicts_oldest_first);
    tcase_add_test(tc, persist_floor_no_growth);
    tcase_add_test(tc, persist_meminfo_reads);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(persist_suite)
