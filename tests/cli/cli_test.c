/* The qsweep command's contract without a database: --help everywhere, the documented exit
 * codes (cli/cli.h), and submit --dry-run on the tiny grid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixtures.h"

#define TINY QSWEEP_SOURCE_DIR "/experiments/tiny.yaml"

static char out[1 << 16];

static int qsweep(const char *const *args) {
    return fx_run(QSWEEP_BIN, args, out, sizeof out);
}

/* Every command the top-level help lists (read from it, so a new command cannot be left out)
 * answers --help with its usage and exit 0. */
static void test_help_everywhere_exits_0(void **state) {
    (void)state;
    const char *top[] = {"--help", NULL};
    assert_int_equal(qsweep(top), 0);
    assert_non_null(strstr(out, "exit codes: 0 ok, 1 usage, 2 bad input"));
    char cmds[32][16];
    int n = 0;
    const char *line = strstr(out, "\ncommands:\n");
    assert_non_null(line);
    for (line = strchr(line + 1, '\n') + 1; line && strncmp(line, "  ", 2) == 0 && n < 32;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (sscanf(line, "%15s", cmds[n]) == 1) n++;
    if (n < 10) fail_msg("qsweep --help lists %d commands:\n%s", n, out);
    for (int i = 0; i < n; i++) {
        const char *args[] = {cmds[i], "--help", NULL};
        if (qsweep(args) != 0 || !strstr(out, "usage: qsweep"))
            fail_msg("qsweep %s --help: %s", cmds[i], out);
    }
}

static void test_usage_errors_exit_1(void **state) {
    (void)state;
    const char *none[] = {NULL};
    const char *unknown[] = {"frobnicate", NULL};
    const char *no_grid[] = {"submit", "--dry-run", NULL};
    const char *bad_opt[] = {"run", TINY, "--wrokers", "2", NULL};
    assert_int_equal(qsweep(none), 1);
    assert_int_equal(qsweep(unknown), 1);
    assert_non_null(strstr(out, "unknown command 'frobnicate'"));
    assert_int_equal(qsweep(no_grid), 1);
    assert_int_equal(qsweep(bad_opt), 1);
}

static void test_submit_needs_a_database_unless_dry_run(void **state) {
    (void)state;
    unsetenv("QSWEEP_DB");
    const char *args[] = {"submit", TINY, NULL};
    assert_int_equal(qsweep(args), 1);
    assert_non_null(strstr(out, "no database"));
}

/* 1 baseline + nvfp4/mxfp4 x weights/weights+activations x 7 components */
static void test_dry_run_counts_jobs_and_shows_a_sample(void **state) {
    (void)state;
    const char *args[] = {"submit", TINY, "--dry-run", "--sample", "2", NULL};
    assert_int_equal(qsweep(args), 0);
    assert_non_null(strstr(out, "experiment tiny: 29 jobs (1 baseline, 28 component)"));
    assert_non_null(strstr(out, "job 1/29  llama3_gqa baseline"));
    assert_non_null(strstr(out, "job 29/29  llama3_gqa mxfp4 weights+activations component down"));
    const char *blocks[] = {
        "submit", TINY, "--dry-run", "--set", "sensitivity.modes=[block, layer]", NULL};
    assert_int_equal(qsweep(blocks), 0);
    assert_non_null(strstr(out, "experiment tiny: 97 jobs (1 baseline, 12 block, 84 layer)"));
}

static void test_bad_grid_exits_2_naming_the_place(void **state) {
    (void)state;
    const char *args[] = {"submit", TINY, "--dry-run", "--set", "dataset.ctx=1", NULL};
    assert_int_equal(qsweep(args), 2);
    assert_non_null(
        strstr(out, "--set dataset.ctx=1: expected an integer in [3, 1048576] for dataset.ctx"));
    const char *missing[] = {"submit", "/nonexistent/grid.yaml", "--dry-run", NULL};
    assert_int_equal(qsweep(missing), 2);
    assert_non_null(strstr(out, "/nonexistent/grid.yaml: cannot open grid file"));
}

/* Every numeric flag: the whole argument is a number in the documented range, else exit 1
 * with a message naming the flag and the range. */
static void test_numeric_flags_are_whole_numbers_in_range(void **state) {
    (void)state;
    const struct {
        const char *args[8];
        const char *msg;
    } cases[] = {
        {{"run", TINY, "--threads", "99999", NULL},
         "--threads 99999: expected an integer in [1, 1024]"},
        {{"run", TINY, "--threads", "0", NULL}, "--threads 0: expected an integer in [1, 1024]"},
        {{"run", TINY, "--workers", "1x", NULL}, "--workers 1x: expected an integer in [1, 256]"},
        {{"run", TINY, "--workers", "0", NULL}, "--workers 0: expected an integer in [1, 256]"},
        {{"run", TINY, "--lease-ms", "99999999999999", NULL},
         "--lease-ms 99999999999999: expected an integer in [1000, 2147483647]"},
        {{"submit", TINY, "--dry-run", "--sample", "abc", NULL},
         "--sample abc: expected an integer in [0, 1000000]"},
        {{"submit", TINY, "--dry-run", "--sample", "2x", NULL},
         "--sample 2x: expected an integer in [0, 1000000]"},
        {{"worker", "--threads", "-1", NULL}, "--threads -1: expected an integer in [1, 1024]"},
        {{"coordinator", "--db", "x", "--lease-ms", "", NULL},
         "--lease-ms : expected an integer in [100, 2147483647]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = qsweep(cases[i].args);
        if (rc != 1 || !strstr(out, cases[i].msg))
            fail_msg("case %zu: expected exit 1 and '%s', got %d:\n%s", i, cases[i].msg, rc, out);
    }
}

/* --csv and --json exclude each other; arguments a command does not take are refused. */
static void test_exclusive_flags_and_extra_arguments_exit_1(void **state) {
    (void)state;
    const char *both[] = {"results", "tiny", "--csv", "--json", "--db", "host=/nonexistent", NULL};
    assert_int_equal(qsweep(both), 1);
    assert_non_null(strstr(out, "--csv and --json exclude each other"));
    const char *workers[] = {"workers", "extra", "--db", "host=/nonexistent", NULL};
    assert_int_equal(qsweep(workers), 1);
    assert_non_null(strstr(out, "qsweep workers: unexpected argument 'extra'"));
    const char *run[] = {"run", TINY, "extra", NULL};
    assert_int_equal(qsweep(run), 1);
    assert_non_null(strstr(out, "qsweep run: unexpected argument 'extra'"));
    const char *submit[] = {"submit", TINY, "extra", "--dry-run", NULL};
    assert_int_equal(qsweep(submit), 1);
    assert_non_null(strstr(out, "qsweep submit: unexpected argument 'extra'"));
}

/* plan --methods names, when it refuses a list, the candidates it takes: every method but
 * per-linear (a plan's grid), mr-gptq+search, and the form of a setting label. */
static void test_plan_methods_refusal_lists_the_candidates(void **state) {
    (void)state;
    const char *lists[] = {"per-linear", "awq", "rtn,"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        const char *args[] = {"plan",      "tiny",   "--budget-bits", "4.5",
                              "--methods", lists[i], "--db",          "host=/nonexistent",
                              NULL};
        assert_int_equal(qsweep(args), 1);
        const char *expected = strstr(out, "(expected one or more of ");
        if (!expected ||
            !strstr(expected, "rtn, gptq, rotate16, rotate32, rotate128, rotate-full, mr-gptq, "
                              "smoothquant, mr-gptq+search, or a setting label such as "
                              "gptq+damp=0.1, comma-separated)") ||
            strstr(expected, "per-linear"))
            fail_msg("--methods %s: %s", lists[i], out);
    }
}

/* plan --methods refuses a malformed setting label as bad input, before any database, naming
 * the part that is wrong; "no results of method" is left to well-formed labels. */
static void test_plan_methods_malformed_setting_label_names_its_bad_part(void **state) {
    (void)state;
    static const char *const lists[][2] = {
        {"gptq+damp=abc", "'damp=abc': expected a number"},
        {"gptq+damp=", "'damp=': expected a number"},
        {"rtn,gptq+damp=0.1+damp=0.1", "'damp=0.1': the option is given twice"},
        {"gptq+nosuch=1", "'nosuch=1': gptq has no option nosuch (expected act_order or damp)"},
        {"gptq+damp=1.5", "'damp=1.5': method_options.damp: expected a number in (0, 1)"},
        {"gptq+act_order=yes", "'act_order=yes': expected true or false"},
        {"smoothquant+damp=0.1", "'damp=0.1': smoothquant has no option damp"},
        {"gptq+damp=0.1+x", "'+x': expected \"+<option>=<value>\""},
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        const char *args[] = {"plan",      "tiny", "--budget-bits",     "4.5", "--methods",
                              lists[i][0], "--db", "host=/nonexistent", NULL};
        int rc = qsweep(args);
        char want[256];
        snprintf(want, sizeof want, "qsweep plan: --methods '%s': malformed setting label '",
                 lists[i][0]);
        if (rc != 2 || !strstr(out, want) || !strstr(out, lists[i][1]) ||
            strstr(out, "no results") || strstr(out, "(expected one or more of "))
            fail_msg("--methods %s: exit %d: %s", lists[i][0], rc, out);
    }
}

/* A connection string's password never reaches a message, in key=value or URI form. */
static void test_connection_passwords_are_redacted(void **state) {
    (void)state;
    const char *kv[] = {"status", "--db", "host=/nonexistent password=hunter2 user=me", NULL};
    assert_int_equal(qsweep(kv), 3);
    if (strstr(out, "hunter2") || !strstr(out, "connect to PostgreSQL (user=me host=/nonexistent)"))
        fail_msg("key=value form:\n%s", out);
    const char *uri[] = {"workers", "--db", "postgresql://x:s3cret@127.0.0.1:1/z", NULL};
    assert_int_equal(qsweep(uri), 3);
    if (strstr(out, "s3cret") || strstr(out, "x:") ||
        !strstr(out, "(user=x dbname=z host=127.0.0.1 port=1)"))
        fail_msg("URI form:\n%s", out);
}

/* A grid, token file or model that is a directory, FIFO or device is bad input (exit 2),
 * refused before an open that could block (a FIFO without a writer blocks forever). */
static void test_paths_that_are_not_regular_files_exit_2(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-cli");
    assert_non_null(dir);
    char fifo[300], set[400];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *grid_dir[] = {"submit", dir, "--dry-run", NULL};
    assert_int_equal(qsweep(grid_dir), 2);
    assert_non_null(strstr(out, ": not a regular file (a directory)"));
    const char *grid_fifo[] = {"submit", fifo, "--dry-run", NULL};
    assert_int_equal(qsweep(grid_fifo), 2);
    assert_non_null(strstr(out, "/fifo: not a regular file (a FIFO, socket or device)"));
    snprintf(set, sizeof set, "dataset.tokens=%s", fifo);
    const char *tokens_fifo[] = {"submit", TINY, "--dry-run", "--set", set, NULL};
    assert_int_equal(qsweep(tokens_fifo), 2);
    assert_non_null(strstr(out, "/fifo: not a regular file (a FIFO, socket or device)"));
    snprintf(set, sizeof set, "dataset.tokens=%s", dir);
    const char *tokens_dir[] = {"submit", TINY, "--dry-run", "--set", set, NULL};
    assert_int_equal(qsweep(tokens_dir), 2);
    assert_non_null(strstr(out, "not a regular file (a directory)"));
    const char *model_dev[] = {"submit", TINY, "--dry-run", "--set", "models.0=/dev/null", NULL};
    assert_int_equal(qsweep(model_dev), 2);
    assert_non_null(strstr(out, "/dev/null: not a regular file"));
    char cfg[320];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir); /* a model directory whose config.json */
    assert_int_equal(mkdir(cfg, 0755), 0);            /* is a directory */
    snprintf(set, sizeof set, "models.0=%s", dir);
    const char *model_cfg_dir[] = {"submit", TINY, "--dry-run", "--set", set, NULL};
    assert_int_equal(qsweep(model_cfg_dir), 2);
    assert_non_null(strstr(out, "/config.json: not a regular file (a directory)"));
    fx_rmtree(dir);
    free(dir);
}

/* A token file is checked against each model's own tokenizer (worker/tokenizer
 * qw_tokenizer_check_tokens): one made by another tokenizer is refused (exit 2) naming the
 * token file and both tokenizers, a version 2 file by digest, a version 1 file by vocabulary
 * size; the committed SmolLM2 file (version 2, made by `qsweep tokenize`) is accepted with
 * SmolLM2. */
static void test_token_file_of_another_tokenizer_exits_2(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-cli-tok");
    assert_non_null(dir);
    char cmd[2048], model[400], toks[400], set_m[700], set_t[500];
    snprintf(model, sizeof model, "%s/model", dir);
    snprintf(toks, sizeof toks, "%s/llama2.tokens", dir);
    /* the 3-block test model with Llama 3's tokenizer beside it; the text through Llama 2's */
    snprintf(cmd, sizeof cmd,
             "cp -r '%s/tests/engine/data/llama3_gqa' '%s' && cp '%s/llama3/tokenizer.json' '%s/'",
             QSWEEP_SOURCE_DIR, model, QSWEEP_TOK_DATA, model);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/llama2/tokenizer.json", QSWEEP_TOK_DATA);
    const char *tok[] = {"tokenize", cmd,  QSWEEP_SOURCE_DIR "/tests/tokenizer/data/texts/gpl3.txt",
                         "-o",       toks, NULL};
    if (qsweep(tok) != 0) fail_msg("qsweep tokenize: %s", out);
    snprintf(set_m, sizeof set_m, "models.0=%s", model);
    snprintf(set_t, sizeof set_t, "dataset.tokens=%s", toks);
    const char *v2[] = {"submit", TINY, "--dry-run", "--set", set_m, "--set", set_t, NULL};
    assert_int_equal(qsweep(v2), 2);
    if (!strstr(out, "/llama2.tokens: made by tokenizer ") ||
        !strstr(out, "but the tokenizer of ") || !strstr(out, "/model is "))
        fail_msg("version 2 file:\n%s", out);
    /* a version 1 file (no digest) of SmolLM2's vocabulary size */
    uint32_t ids[600];
    for (size_t i = 0; i < 600; i++)
        ids[i] = (uint32_t)(i * 37 % 300);
    snprintf(toks, sizeof toks, "%s/smollm2.v1.tokens", dir);
    assert_int_equal(fx_write_tokens(toks, ids, 600, 49152), 0);
    snprintf(set_t, sizeof set_t, "dataset.tokens=%s", toks);
    const char *v1[] = {"submit", TINY, "--dry-run", "--set", set_m, "--set", set_t, NULL};
    assert_int_equal(qsweep(v1), 2);
    if (!strstr(out, "smollm2.v1.tokens: field \"vocab_size\" = 49152, but the tokenizer of ") ||
        !strstr(out, "/model has 128257 tokens"))
        fail_msg("version 1 file:\n%s", out);
    /* the committed SmolLM2 file (version 2, `qsweep tokenize`) names SmolLM2's tokenizer */
    snprintf(set_t, sizeof set_t, "dataset.tokens=%s/tests/engine/data/gpl3.smollm2.tokens",
             QSWEEP_SOURCE_DIR);
    const char *v2s[] = {"submit", TINY, "--dry-run", "--set", set_m, "--set", set_t, NULL};
    assert_int_equal(qsweep(v2s), 2);
    if (!strstr(out, "gpl3.smollm2.tokens: made by tokenizer ") ||
        !strstr(out, "but the tokenizer of "))
        fail_msg("committed version 2 file:\n%s", out);
    fx_rmtree(dir);
    free(dir);
    /* SmolLM2 itself (tools/fetch_smollm2.sh), where it has been fetched */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char gguf[600];
    snprintf(gguf, sizeof gguf, "%s%s/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf",
             xdg && *xdg ? xdg
             : home      ? home
                         : "",
             xdg && *xdg ? "" : "/.cache");
    if (access(gguf, R_OK) != 0) return;
    snprintf(set_m, sizeof set_m, "models.0=%s", gguf);
    const char *smol[] = {"submit", TINY, "--dry-run", "--set", set_m, "--set", set_t, NULL};
    if (qsweep(smol) != 0) fail_msg("SmolLM2 with its own token file:\n%s", out);
}

/* qsweep coordinator's CURVE allow-list: without $QSWEEP_CURVE_SECRET it is a usage error
 * (exit 1); a malformed file is bad input (exit 2) named file:line, refused before the
 * database is contacted; $QSWEEP_CURVE_AUTHORIZED stands for --authorized-keys. */
static void test_coordinator_allow_list_errors(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-cli-keys");
    assert_non_null(dir);
    char keys[300];
    snprintf(keys, sizeof keys, "%s/workers.keys", dir);
    FILE *f = fopen(keys, "w");
    assert_non_null(f);
    fputs("# workers\nrq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\nnot-a-key\n", f);
    fclose(f);
    unsetenv("QSWEEP_CURVE_SECRET");
    unsetenv("QSWEEP_CURVE_AUTHORIZED");
    const char *no_secret[] = {"coordinator",       "--db", "host=/nonexistent",
                               "--authorized-keys", keys,   NULL};
    assert_int_equal(qsweep(no_secret), 1);
    assert_non_null(strstr(out, "needs CURVE: set $QSWEEP_CURVE_SECRET"));
    setenv("QSWEEP_CURVE_SECRET", "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6", 1);
    int rc = qsweep(no_secret);
    char want[400];
    snprintf(want, sizeof want, "%s:3: not a CURVE public key: 9 characters", keys);
    if (rc != 2 || !strstr(out, want)) fail_msg("--authorized-keys: got %d:\n%s", rc, out);
    setenv("QSWEEP_CURVE_AUTHORIZED", keys, 1);
    const char *by_env[] = {"coordinator", "--db", "host=/nonexistent", NULL};
    rc = qsweep(by_env);
    if (rc != 2 || !strstr(out, want)) fail_msg("$QSWEEP_CURVE_AUTHORIZED: got %d:\n%s", rc, out);
    unsetenv("QSWEEP_CURVE_SECRET");
    unsetenv("QSWEEP_CURVE_AUTHORIZED");
    fx_rmtree(dir);
    free(dir);
}

/* getopt's messages carry the qsweep prefix; the coordinator's usage line lists
 * --exit-when-done, and --quiet is described for coordinator and worker. */
static void test_help_texts_are_complete(void **state) {
    (void)state;
    const char *bogus[] = {"status", "--bogus", NULL};
    assert_int_equal(qsweep(bogus), 1);
    if (!strstr(out, "qsweep status: unrecognized option '--bogus'")) fail_msg("%s", out);
    const char *co[] = {"coordinator", "--help", NULL};
    assert_int_equal(qsweep(co), 0);
    char *usage_end = strstr(out, "\n  Serves");
    assert_non_null(usage_end);
    *usage_end = 0;
    if (!strstr(out, "[--exit-when-done]") || !strstr(out, "[--quiet]"))
        fail_msg("coordinator usage: %s", out);
    assert_int_equal(qsweep(co), 0);
    assert_non_null(strstr(out, "\n  --quiet "));
    const char *wk[] = {"worker", "--help", NULL};
    assert_int_equal(qsweep(wk), 0);
    assert_non_null(strstr(out, "\n  --quiet "));
}

/* qsweep worker --backend (worker/jobs/jobs_backend.h): refused before it connects when the
 * name is unknown (exit 1, naming the option or $QSWEEP_BACKEND) or when CUDA is forced on a
 * worker with no GPU (--gpus none: exit 2); --help describes it. */
static void test_worker_backend_choice_is_checked_at_start(void **state) {
    (void)state;
    const char *bad[] = {"worker", "--backend", "gpu", "--connect", "ipc:///nonexistent/q", NULL};
    assert_int_equal(qsweep(bad), 1);
    if (!strstr(out, "qsweep worker: --backend \"gpu\": expected auto, cpu or cuda"))
        fail_msg("%s", out);
    const char *cuda[] = {"worker", "--backend", "cuda", "--gpus", "none", NULL};
    assert_int_equal(qsweep(cuda), 2);
    if (!strstr(out, "--backend cuda:")) fail_msg("%s", out);
    setenv("QSWEEP_BACKEND", "fast", 1);
    const char *env[] = {"worker", "--gpus", "none", NULL};
    int rc = qsweep(env);
    unsetenv("QSWEEP_BACKEND");
    assert_int_equal(rc, 1);
    if (!strstr(out, "$QSWEEP_BACKEND \"fast\"")) fail_msg("%s", out);
    const char *help[] = {"worker", "--help", NULL};
    assert_int_equal(qsweep(help), 0);
    assert_non_null(strstr(out, "[--backend auto|cpu|cuda]"));
    assert_non_null(strstr(out, "\n  --backend KIND "));
}

static void assert_z85_key(const char *k) {
    assert_int_equal(strlen(k), 40);
}

/* keygen --env prints the variables the README and the worker read; --out writes the pair
 * to a 0600 file (whatever the umask) and the public key beside it, and refuses to overwrite. */
static void test_keygen_env_and_key_files(void **state) {
    (void)state;
    const char *env[] = {"keygen", "--env", NULL};
    assert_int_equal(qsweep(env), 0);
    char pub[64], sec[64];
    if (sscanf(out, "export QSWEEP_CURVE_PUBLIC='%40[^']'\nexport QSWEEP_CURVE_SECRET='%40[^']'",
               pub, sec) != 2)
        fail_msg("keygen --env: %s", out);
    assert_z85_key(pub);
    assert_z85_key(sec);
    assert_string_not_equal(pub, sec);
    char *dir = fx_tempdir("qsweep-keygen");
    assert_non_null(dir);
    char prefix[600], key[620], pubf[620];
    snprintf(prefix, sizeof prefix, "%s/worker1", dir);
    snprintf(key, sizeof key, "%s.key", prefix);
    snprintf(pubf, sizeof pubf, "%s.pub", prefix);
    mode_t old = umask(0);
    const char *files[] = {"keygen", "--out", prefix, NULL};
    int rc = qsweep(files);
    umask(old);
    struct stat sk, sp;
    int ok = rc == 0 && stat(key, &sk) == 0 && stat(pubf, &sp) == 0;
    char text[256] = "", line[64] = "";
    FILE *f = ok ? fopen(key, "r") : NULL;
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
    }
    f = ok ? fopen(pubf, "r") : NULL;
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        fclose(f);
    }
    int again = qsweep(files);
    fx_rmtree(dir);
    free(dir);
    if (!ok) fail_msg("keygen --out exited %d: %s", rc, out);
    assert_int_equal(sk.st_mode & 0777, 0600);
    assert_int_equal(sp.st_mode & 0777, 0644);
    if (sscanf(text, "export QSWEEP_CURVE_PUBLIC='%40[^']'\nexport QSWEEP_CURVE_SECRET='%40[^']'",
               pub, sec) != 2)
        fail_msg("key file: %s", text);
    line[strcspn(line, "\n")] = 0;
    assert_string_equal(line, pub);
    assert_int_not_equal(again, 0);
    assert_non_null(strstr(out, "not overwritten"));
}

/* A Hugging Face model's config.json given as the model: the error says to give its folder. */
static void test_hf_config_json_as_model_names_the_folder(void **state) {
    (void)state;
    const char *args[] = {"submit",
                          TINY,
                          "--dry-run",
                          "--set",
                          "models.0=" QSWEEP_SOURCE_DIR "/tests/engine/data/llama3_gqa/config.json",
                          NULL};
    assert_int_equal(qsweep(args), 2);
    if (!strstr(out, "a Hugging Face model is given by its folder (" QSWEEP_SOURCE_DIR
                     "/tests/engine/data/llama3_gqa), not by one of its files"))
        fail_msg("%s", out);
}

/* Runs qsweep with args, its stdout on /dev/full (every write fails with ENOSPC) and its
 * stderr captured into err_out. Returns the exit code (-1: did not exit normally). */
static int qsweep_to_dev_full(const char *const *args, char *err_out, size_t cap) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int full = open("/dev/full", O_WRONLY);
        if (full < 0) _exit(126);
        dup2(full, 1);
        dup2(fds[1], 2);
        close(fds[0]);
        char *argv[16] = {"qsweep"};
        size_t n = 1;
        for (size_t i = 0; args[i] && n < 15; i++)
            argv[n++] = (char *)args[i];
        argv[n] = NULL;
        execv(QSWEEP_BIN, argv);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = read(fds[0], err_out + got, cap - 1 - got)) > 0)
        got += (size_t)k;
    err_out[got] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A result that cannot be written is a failure (the breaker's `qsweep keygen --env >
 * /dev/full` exited 0): each command's stdout is flushed and checked at exit, and the error
 * is named on stderr with exit 4. */
static void test_stdout_write_errors_exit_4(void **state) {
    (void)state;
    if (access("/dev/full", W_OK) != 0) skip();
    const char *keygen_env[] = {"keygen", "--env", NULL};
    const char *keygen[] = {"keygen", NULL};
    const char *version[] = {"--version", NULL};
    const char *help[] = {"--help", NULL};
    const char *run_help[] = {"run", "--help", NULL};
    const char *dry[] = {"submit", TINY, "--dry-run", NULL};
    const char *const *cases[] = {keygen_env, keygen, version, help, run_help, dry};
    char err[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = qsweep_to_dev_full(cases[i], err, sizeof err);
        if (rc != 4 || !strstr(err, "writing standard output: No space left on device"))
            fail_msg("qsweep %s %s > /dev/full: exit %d, stderr: %s", cases[i][0],
                     cases[i][1] ? cases[i][1] : "", rc, err);
    }
    /* the same commands to a working stdout still exit 0 */
    assert_int_equal(qsweep(keygen_env), 0);
    assert_non_null(strstr(out, "export QSWEEP_CURVE_PUBLIC='"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_everywhere_exits_0),
        cmocka_unit_test(test_usage_errors_exit_1),
        cmocka_unit_test(test_submit_needs_a_database_unless_dry_run),
        cmocka_unit_test(test_dry_run_counts_jobs_and_shows_a_sample),
        cmocka_unit_test(test_bad_grid_exits_2_naming_the_place),
        cmocka_unit_test(test_numeric_flags_are_whole_numbers_in_range),
        cmocka_unit_test(test_exclusive_flags_and_extra_arguments_exit_1),
        cmocka_unit_test(test_plan_methods_refusal_lists_the_candidates),
        cmocka_unit_test(test_plan_methods_malformed_setting_label_names_its_bad_part),
        cmocka_unit_test(test_connection_passwords_are_redacted),
        cmocka_unit_test(test_paths_that_are_not_regular_files_exit_2),
        cmocka_unit_test(test_token_file_of_another_tokenizer_exits_2),
        cmocka_unit_test(test_coordinator_allow_list_errors),
        cmocka_unit_test(test_help_texts_are_complete),
        cmocka_unit_test(test_keygen_env_and_key_files),
        cmocka_unit_test(test_hf_config_json_as_model_names_the_folder),
        cmocka_unit_test(test_stdout_write_errors_exit_4),
        cmocka_unit_test(test_worker_backend_choice_is_checked_at_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
