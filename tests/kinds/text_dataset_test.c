/* A sensitivity grid whose dataset is a text, through the real
 * binary, the real tokenizer and PostgreSQL:
 *   - a grid with `dataset: {text: FILE}` runs end to end (`qsweep run`);
 *   - the same text as a token file (`qsweep tokenize`) gives the same jobs (same job keys: the
 *     dataset digest is that of the token file both ways) and, run on its own from an empty
 *     database and baseline cache, the same results to the last bit;
 *   - a tokenizer that adds BOS puts its id in the stored spec (dataset.bos_id), which changes
 *     the job keys and the baseline perplexity;
 *   - another text, or another tokenizer (one merge more), changes every job key;
 *   - invalid UTF-8 is refused at submit time naming the file and the byte offset; a synthetic
 *     model (no tokenizer) with a text is refused naming the model;
 *   - a text that is not a regular file (FIFO, symlink to one, directory) is refused at once
 *     with the grid location and the reason;
 *   - a damaged token cache file is rebuilt with a warning and gives the same job keys.
 * The model is the committed 3-block test checkpoint (tests/engine/data/llama3_gqa, vocab 384)
 * with a byte-level BPE tokenizer.json written here (256 byte tokens, "<s>" 256, two or three
 * merges), so every id fits its vocabulary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "fixtures.h"
#include "pgserver.h"

#define GQA QSWEEP_SOURCE_DIR "/tests/engine/data/llama3_gqa"
#define GPL3 QSWEEP_SOURCE_DIR "/tests/tokenizer/data/texts/gpl3.txt"

static char out[1 << 17];

/* Copies file from -> to. */
static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) fail_msg("copy %s -> %s", from, to);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        assert_int_equal(fwrite(buf, 1, n, b), n);
    fclose(a);
    assert_int_equal(fclose(b), 0);
}

/* UTF-8 of code point cp (< 0x800) into s. */
static void utf8(unsigned cp, char *s) {
    if (cp < 0x80) {
        s[0] = (char)cp, s[1] = 0;
    } else {
        s[0] = (char)(0xc0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3f)), s[2] = 0;
    }
}

/* A Hugging Face model folder `dir`: llama3_gqa's config and weights, and a byte-level BPE
 * tokenizer.json (GPT-2's byte-to-unicode map). bos: a TemplateProcessing that puts "<s>"
 * first; third_merge: "Ġt he" too (another tokenizer, another digest). */
static void make_model(const char *dir, int bos, int third_merge) {
    char path[1024];
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    assert_int_equal(system(path), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    copy_file(GQA "/config.json", path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    copy_file(GQA "/model.safetensors", path);
    json_t *vocab = json_object();
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        char s[4];
        utf8(printable ? b : next++, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_object_set_new(vocab, "<s>", json_integer(256));
    json_object_set_new(vocab, "\xc4\xa0t", json_integer(257)); /* "Ġt" */
    json_object_set_new(vocab, "he", json_integer(258));
    json_t *merges = json_pack("[s, s]", "\xc4\xa0 t", "h e");
    if (third_merge) {
        json_object_set_new(vocab, "\xc4\xa0the", json_integer(259));
        json_array_append_new(merges, json_string("\xc4\xa0t he"));
    }
    json_t *pp = bos ? json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:[], s:{s:{s:s, s:[i], "
                                 "s:[s]}}}",
                                 "type", "TemplateProcessing", "single", "SpecialToken", "id",
                                 "<s>", "type_id", 0, "Sequence", "id", "A", "type_id", 0, "pair",
                                 "special_tokens", "<s>", "id", "<s>", "ids", 256, "tokens", "<s>")
                     : json_null();
    json_t *tok = json_pack(
        "{s:s, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}], s:n, s:{s:s, s:b, s:b, s:b}, s:o, "
        "s:{s:s, s:b, s:b, s:b}, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}}",
        "version", "1.0", "added_tokens", "id", 256, "content", "<s>", "single_word", 0, "lstrip",
        0, "rstrip", 0, "normalized", 0, "special", 1, "normalizer", "pre_tokenizer", "type",
        "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "post_processor",
        pp, "decoder", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex",
        1, "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
        "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab",
        vocab, "merges", merges);
    assert_non_null(tok);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(json_dump_file(tok, path, JSON_COMPACT), 0);
    json_decref(tok);
}

/* A grid over model dir with dataset line `dataset` (e.g. "text: /x.txt"). */
static void make_grid(const char *path, const char *name, const char *model, const char *dataset) {
    char text[4096];
    snprintf(text, sizeof text,
             "name: %s\nkind: sensitivity\nmodels:\n  - %s\ndataset:\n  %s\n  ctx: 64\n"
             "  max_chunks: 3\nsensitivity:\n  formats: [nvfp4]\n  quantize: [weights]\n"
             "  modes: [component]\n  parts: [q, down]\n  metrics: [ppl, kl]\n",
             name, model, dataset);
    assert_int_equal(fx_write_text(path, text), 0);
}

/* Private state folders under root/tag (database, baseline and token caches). */
static void use_state(const char *root, const char *tag) {
    char buf[900];
    snprintf(buf, sizeof buf, "%s/%s/data", root, tag);
    setenv("XDG_DATA_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/%s/cache", root, tag);
    setenv("XDG_CACHE_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/%s/state", root, tag);
    setenv("XDG_STATE_HOME", buf, 1);
    unsetenv("QSWEEP_DB");
    unsetenv("QSWEEP_TOKENS_DIR");
    unsetenv("QSWEEP_BASELINE_DIR");
}

/* The sorted job keys of `qsweep submit --dry-run GRID` (every job). */
static void dry_run_keys(const char *grid, char *keys, size_t cap) {
    const char *args[] = {"submit", "--dry-run", "--sample", "1000", grid, NULL};
    int rc = fx_run(QSWEEP_BIN, args, out, sizeof out);
    if (rc != 0) fail_msg("submit --dry-run %s exited %d:\n%s", grid, rc, out);
    keys[0] = 0;
    for (const char *p = out; (p = strstr(p, "job_key ")); p += 8) {
        strncat(keys, p + 8, 64);
        strncat(keys, "\n", cap - strlen(keys) - 1);
    }
    if (!keys[0]) fail_msg("no job_key in\n%s", out);
}

/* Runs grid under private state root/tag and returns every final result of experiment name as
 * "job_key kind name value(%.17g)" lines sorted, and the stored dataset objects of its jobs. */
static void run_and_dump(const char *root, const char *tag, const char *grid, const char *name,
                         char *rows, size_t cap, char *datasets, size_t dcap) {
    use_state(root, tag);
    const char *args[] = {"run", grid, "--workers", "1", NULL};
    int rc = fx_run(QSWEEP_BIN, args, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run %s exited %d:\n%s", grid, rc, out);
    char pg_dir[1024];
    snprintf(pg_dir, sizeof pg_dir, "%s/%s/data/qsweep/pg", root, tag);
    qc_pgserver *pg = NULL;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(pg_dir, &pg, &err), QS_OK);
    PGconn *c = PQconnectdb(qc_pgserver_conninfo(pg));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    const char *p[1] = {name};
    PGresult *r = PQexecParams(c,
                               "SELECT j.job_key, j.kind, r.name, r.value FROM results r "
                               "JOIN jobs j ON j.id = r.job JOIN experiment_jobs ej ON ej.job = "
                               "j.id JOIN experiments e ON e.id = ej.experiment "
                               "WHERE e.name = $1 AND r.final AND r.name NOT LIKE 'time\\_%' "
                               "ORDER BY 1, 3", /* all but the wall times (time_*_s) */
                               1, NULL, p, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    if (PQntuples(r) < 3 * 8) fail_msg("%s: only %d results", name, PQntuples(r));
    rows[0] = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        char line[256];
        snprintf(line, sizeof line, "%s %s %s %.17g\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                 PQgetvalue(r, i, 2), strtod(PQgetvalue(r, i, 3), NULL));
        assert_true(strlen(rows) + strlen(line) < cap);
        strcat(rows, line);
    }
    PQclear(r);
    r = PQexecParams(c,
                     "SELECT DISTINCT (j.spec -> 'dataset')::text FROM jobs j JOIN experiment_jobs "
                     "ej ON ej.job = j.id JOIN experiments e ON e.id = ej.experiment WHERE "
                     "e.name = $1",
                     1, NULL, p, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    snprintf(datasets, dcap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(c);
    qc_pgserver_destroy(pg);
}

/* The "ppl" of the baseline in rows. */
static double baseline_ppl(const char *rows) {
    for (const char *p = rows; (p = strstr(p, " baseline ppl ")); p++)
        return strtod(p + strlen(" baseline ppl "), NULL);
    fail_msg("no baseline ppl in\n%s", rows);
    return 0;
}

static void test_text_dataset_end_to_end(void **state) {
    (void)state;
    char *root = fx_tempdir("qsweep-text");
    assert_non_null(root);
    char plain[1024], bos[1024], merged[1024], text[1024], tokens[1024], grid[1024], other[1024];
    snprintf(plain, sizeof plain, "%s/plain", root);
    snprintf(bos, sizeof bos, "%s/bos", root);
    snprintf(merged, sizeof merged, "%s/merged", root);
    make_model(plain, 0, 0);
    make_model(bos, 1, 0);
    make_model(merged, 0, 1);
    snprintf(text, sizeof text, "%s/gpl3.txt", root);
    copy_file(GPL3, text);

    /* the text, run end to end */
    char line[1200];
    snprintf(grid, sizeof grid, "%s/text.yaml", root);
    snprintf(line, sizeof line, "text: %s", text);
    make_grid(grid, "from-text", plain, line);
    static char rows_text[1 << 15], rows_tok[1 << 15], rows_bos[1 << 15];
    char ds_text[1024], ds_tok[1024], ds_bos[1024];
    run_and_dump(root, "a", grid, "from-text", rows_text, sizeof rows_text, ds_text,
                 sizeof ds_text);
    assert_non_null(strstr(ds_text, "\"path\": \"text:"));
    assert_null(strstr(ds_text, "bos_id"));

    /* the same text as a token file: same keys, and computed again from nothing, the same
       results to the last bit */
    snprintf(tokens, sizeof tokens, "%s/gpl3.tokens", root);
    const char *tk[] = {"tokenize", plain, text, "-o", tokens, NULL};
    int rc = fx_run(QSWEEP_BIN, tk, out, sizeof out);
    if (rc != 0) fail_msg("qsweep tokenize exited %d:\n%s", rc, out);
    char tgrid[1024];
    snprintf(tgrid, sizeof tgrid, "%s/tokens.yaml", root);
    snprintf(line, sizeof line, "tokens: %s", tokens);
    make_grid(tgrid, "from-tokens", plain, line);
    run_and_dump(root, "b", tgrid, "from-tokens", rows_tok, sizeof rows_tok, ds_tok,
                 sizeof ds_tok);
    assert_null(strstr(ds_tok, "text:"));
    if (strcmp(rows_text, rows_tok))
        fail_msg("text and token file differ:\n%s\n---\n%s", rows_text, rows_tok);

    /* a tokenizer that adds BOS: recorded in the spec, other keys, another baseline */
    snprintf(grid, sizeof grid, "%s/bos.yaml", root);
    snprintf(line, sizeof line, "text: %s", text);
    make_grid(grid, "with-bos", bos, line);
    run_and_dump(root, "c", grid, "with-bos", rows_bos, sizeof rows_bos, ds_bos, sizeof ds_bos);
    assert_non_null(strstr(ds_bos, "\"bos_id\": 256"));
    if (!strncmp(rows_bos, rows_text, 64)) fail_msg("BOS did not change the job keys");
    double p0 = baseline_ppl(rows_text), p1 = baseline_ppl(rows_bos);
    printf("baseline ppl: without BOS %.6f, with BOS %.6f\n", p0, p1);
    assert_true(p0 != p1);

    /* another tokenizer, another text: every key changes */
    static char k_plain[8192], k_merged[8192], k_other[8192];
    snprintf(grid, sizeof grid, "%s/text.yaml", root);
    dry_run_keys(grid, k_plain, sizeof k_plain);
    snprintf(line, sizeof line, "text: %s", text);
    snprintf(other, sizeof other, "%s/merged.yaml", root);
    make_grid(other, "merged", merged, line);
    dry_run_keys(other, k_merged, sizeof k_merged);
    char text2[1024];
    snprintf(text2, sizeof text2, "%s/gpl3-edited.txt", root);
    copy_file(text, text2);
    FILE *f = fopen(text2, "ab");
    assert_non_null(f);
    fputs("one line more\n", f);
    fclose(f);
    snprintf(line, sizeof line, "text: %s", text2);
    snprintf(other, sizeof other, "%s/edited.yaml", root);
    make_grid(other, "edited", plain, line);
    dry_run_keys(other, k_other, sizeof k_other);
    for (const char *a = k_plain; *a; a += 65) {
        char key[65];
        memcpy(key, a, 64);
        key[64] = 0;
        if (strstr(k_merged, key)) fail_msg("job %s kept its key with another tokenizer", key);
        if (strstr(k_other, key)) fail_msg("job %s kept its key with another text", key);
    }

    /* invalid UTF-8: refused at submit, naming the file and the byte offset */
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/bad.txt", root);
    f = fopen(bad, "wb");
    assert_non_null(f);
    const char *bad_text = "caf\xc3\xa9 ok, then a lone continuation byte: \x80 here";
    fputs(bad_text, f);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "bad.txt: byte offset %d: invalid UTF-8",
             (int)(strchr(bad_text, '\x80') - bad_text));
    snprintf(line, sizeof line, "text: %s", bad);
    snprintf(other, sizeof other, "%s/bad.yaml", root);
    make_grid(other, "bad", plain, line);
    const char *sub[] = {"submit", "--dry-run", other, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, sub, out, sizeof out), 2);
    if (!strstr(out, want) || !strstr(out, "bad.yaml:"))
        fail_msg("no file, offset and grid location in\n%s", out);

    /* a synthetic model has no tokenizer */
    snprintf(line, sizeof line, "text: %s", text);
    snprintf(other, sizeof other, "%s/synthetic.yaml", root);
    make_grid(other, "synthetic", "{synthetic: tiny-llama2, seed: 1}", line);
    assert_int_equal(fx_run(QSWEEP_BIN, sub, out, sizeof out), 2);
    if (!strstr(out, "is synthetic and has no tokenizer")) fail_msg("%s", out);

    fx_rmtree(root);
    free(root);
}

/* A text that is not a regular file is refused by `qsweep submit --dry-run` at once (a FIFO
 * hung it) with the grid's file:line:column of the text key and the reason: "FIFO" for a
 * named pipe, also behind a symlink, and the errno text "Is a directory" for a directory. */
static void test_text_not_a_regular_file(void **state) {
    (void)state;
    char *root = fx_tempdir("qsweep-text-nreg");
    assert_non_null(root);
    char plain[1024], fifo[1024], link[1024], dir[1024], grid[1024], line[1200], want[1100];
    snprintf(plain, sizeof plain, "%s/plain", root);
    make_model(plain, 0, 0);
    use_state(root, "s");
    snprintf(fifo, sizeof fifo, "%s/pipe", root);
    snprintf(link, sizeof link, "%s/to-pipe", root);
    snprintf(dir, sizeof dir, "%s/adir", root);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink(fifo, link), 0);
    assert_int_equal(mkdir(dir, 0700), 0);
    const char *paths[] = {fifo, link, dir};
    const char *reasons[] = {"is a FIFO", "is a FIFO", "Is a directory"};
    /* the grid resolves a path (realpath): the symlink's message names the FIFO it leads to */
    const char *named[] = {fifo, fifo, dir};
    snprintf(grid, sizeof grid, "%s/g.yaml", root);
    const char *sub[] = {"submit", "--dry-run", grid, NULL};
    for (int i = 0; i < 3; i++) {
        snprintf(line, sizeof line, "text: %s", paths[i]);
        make_grid(grid, "nreg", plain, line);
        assert_int_equal(fx_run(QSWEEP_BIN, sub, out, sizeof out), 2);
        /* line 6 of make_grid's grid is "  text: PATH": the value starts at column 9 */
        snprintf(want, sizeof want, "g.yaml:6:9");
        if (!strstr(out, want) || !strstr(out, reasons[i]) || !strstr(out, named[i]))
            fail_msg("no %s, %s and %s in\n%s", want, reasons[i], named[i], out);
    }
    fx_rmtree(root);
    free(root);
}

/* The tester's case: one byte of the cached token file flipped (an id byte, still a valid id)
 * after a first `submit --dry-run`; the next one warns, rebuilds the file and gives the same
 * job keys (the same dataset digest), never jobs on the corrupt ids. */
static void test_damaged_cache_gives_the_same_jobs(void **state) {
    (void)state;
    char *root = fx_tempdir("qsweep-text-cache");
    assert_non_null(root);
    char plain[1024], text[1024], grid[1024], line[1200], cache[1200];
    snprintf(plain, sizeof plain, "%s/plain", root);
    make_model(plain, 0, 0);
    use_state(root, "s");
    snprintf(text, sizeof text, "%s/gpl3.txt", root);
    copy_file(GPL3, text);
    snprintf(grid, sizeof grid, "%s/g.yaml", root);
    snprintf(line, sizeof line, "text: %s", text);
    make_grid(grid, "cache", plain, line);
    static char keys1[1 << 14], keys2[1 << 14];
    dry_run_keys(grid, keys1, sizeof keys1);
    snprintf(cache, sizeof cache, "%s/s/cache/qsweep/tokens", root);
    DIR *d = opendir(cache);
    assert_non_null(d);
    char tok[2400] = "";
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 7 && !strcmp(e->d_name + l - 7, ".tokens"))
            snprintf(tok, sizeof tok, "%s/%s", cache, e->d_name);
    }
    closedir(d);
    assert_true(tok[0]);
    FILE *f = fopen(tok, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 64 + 4 * 100, SEEK_SET), 0); /* id 100's low byte */
    int c = fgetc(f);
    assert_int_equal(fseek(f, 64 + 4 * 100, SEEK_SET), 0);
    fputc(c ^ 1, f);
    fclose(f);
    dry_run_keys(grid, keys2, sizeof keys2);
    if (!strstr(out, "warning: token cache") || !strstr(out, "rebuilding"))
        fail_msg("no warning about the damaged cache in\n%s", out);
    assert_string_equal(keys1, keys2);
    fx_rmtree(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_dataset_end_to_end),
        cmocka_unit_test(test_text_not_a_regular_file),
        cmocka_unit_test(test_damaged_cache_gives_the_same_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
