/* `qsweep tokenize` end to end: the binary on real files. GPL-3 through SmolLM2's GGUF
 * vocabulary gives llama.cpp's ids in a version 2 token file naming the tokenizer; --decode
 * gives the text back; invalid UTF-8 is refused with the file and byte offset (exit 2) and
 * leaves no file; usage errors exit 1; `bytes` writes a text's bytes as ids. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tokenizer.h"
#include "tokens.h"

static char dir[256];

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/qw_tok_cmd.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs the shell command; returns its exit status and its stderr (first 4 KB) in err. */
static int run(const char *cmd, char *err, size_t cap) {
    char full[8192], errpath[512];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", dir);
    snprintf(full, sizeof full, "%s 2>'%s'", cmd, errpath);
    int rc = system(full);
    FILE *f = fopen(errpath, "rb");
    size_t n = f ? fread(err, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    err[n] = 0;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

static void gpl3_smollm2_round_trip(void **state) {
    (void)state;
    char cmd[8192], err[4096], out[512], back[512];
    snprintf(out, sizeof out, "%s/gpl3.tokens", dir);
    snprintf(back, sizeof back, "%s/gpl3.txt", dir);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/smollm2.vocab.gguf' '%s/texts/gpl3.txt' -o '%s'",
             QSWEEP_BIN, QW_TOK_DATA, QW_TOK_SRC_DATA, out);
    int rc = run(cmd, err, sizeof err);
    if (rc) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(err, "7639 tokens"));
    qw_tokens tk = {0};
    qs_error e = {0};
    if (qw_tokens_load(out, &tk, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tk.version, 2);
    assert_int_equal(tk.vocab_size, 49152);
    assert_int_equal(tk.n, 7639);
    /* the ids are llama-tokenize's */
    char ref[4096];
    snprintf(ref, sizeof ref, "%s/refs/smollm2_gguf.gpl3.ids", QW_TOK_SRC_DATA);
    size_t rn;
    char *rs = slurp(ref, &rn), *p = rs;
    for (size_t i = 0; i < tk.n; i++) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        assert_true(end != p);
        assert_int_equal(tk.ids[i], v);
        p = end;
    }
    free(rs);
    /* the header names the tokenizer */
    qw_tokenizer *t;
    char model[4096];
    snprintf(model, sizeof model, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    assert_int_equal(qw_tokenizer_open(model, &t, &e), QS_OK);
    assert_string_equal(tk.tokenizer_digest, qw_tokenizer_digest(t));
    qw_tokenizer_free(t);
    qw_tokens_free(&tk);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/smollm2.vocab.gguf' --decode '%s' -o '%s'",
             QSWEEP_BIN, QW_TOK_DATA, out, back);
    rc = run(cmd, err, sizeof err);
    if (rc) fail_msg("exit %d: %s", rc, err);
    size_t a, b;
    char path[4096];
    snprintf(path, sizeof path, "%s/texts/gpl3.txt", QW_TOK_SRC_DATA);
    char *x = slurp(path, &a), *y = slurp(back, &b);
    assert_int_equal(a, b);
    assert_memory_equal(x, y, a);
    free(x);
    free(y);
}

static void invalid_utf8_names_file_and_offset(void **state) {
    (void)state;
    char text[512], out[512], cmd[8192], err[4096];
    snprintf(text, sizeof text, "%s/bad.txt", dir);
    snprintf(out, sizeof out, "%s/bad.tokens", dir);
    FILE *f = fopen(text, "wb");
    fwrite("good text\n\xc3(", 1, 12, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3/tokenizer.json' '%s' -o '%s'", QSWEEP_BIN,
             QW_TOK_DATA, text, out);
    assert_int_equal(run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "bad.txt"));
    assert_non_null(strstr(err, "byte offset 10"));
    assert_int_equal(access(out, F_OK), -1);
}

/* Files in dir (".", ".." and stderr.txt left out): no temporary file is left behind. */
static int count_outputs(void) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n +=
            strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, "stderr.txt");
    closedir(d);
    return n;
}

/* -o FILE is written whole then renamed over FILE, so only a regular file (or none) is
 * replaced: a FIFO, a device (mknod, when root) or a symlink is refused with exit 2 naming it
 * and left as it was, and so is FILE being the input (tokenize and --decode); an existing
 * file keeps its mode; a write that fails (a full device, when root) is an error, not exit 0. */
static void output_that_is_not_a_regular_file_is_refused(void **state) {
    (void)state;
    char text[512], fifo[512], link[512], toks[512], dev[512], cmd[8192], err[4096];
    snprintf(text, sizeof text, "%s/in.txt", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(link, sizeof link, "%s/link.tokens", dir);
    snprintf(toks, sizeof toks, "%s/out.tokens", dir);
    int before = count_outputs(); /* the other tests' files share dir */
    FILE *f = fopen(text, "wb");
    fputs("hello world\n", f);
    fclose(f);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *refused[] = {fifo, link, text};
    const char *why[] = {"fifo: exists and is not a regular file",
                         "link.tokens: is a symbolic link", "in.txt: is the input file"};
    assert_int_equal(symlink("out.tokens", link), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3/tokenizer.json' '%s' -o '%s'",
                 QSWEEP_BIN, QW_TOK_DATA, text, refused[i]);
        assert_int_equal(run(cmd, err, sizeof err), 2);
        if (!strstr(err, why[i])) fail_msg("%s: %s", refused[i], err);
    }
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    /* an existing regular file is replaced and keeps its mode */
    f = fopen(toks, "wb");
    fclose(f);
    assert_int_equal(chmod(toks, 0640), 0);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3/tokenizer.json' '%s' -o '%s'", QSWEEP_BIN,
             QW_TOK_DATA, text, toks);
    int rc = run(cmd, err, sizeof err);
    if (rc) fail_msg("exit %d: %s", rc, err);
    assert_int_equal(stat(toks, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_true(st.st_size > 64);
    /* --decode over its own token file, and into a FIFO */
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3/tokenizer.json' --decode '%s' -o '%s'",
             QSWEEP_BIN, QW_TOK_DATA, toks, toks);
    assert_int_equal(run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "out.tokens: is the input file"));
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3/tokenizer.json' --decode '%s' -o '%s'",
             QSWEEP_BIN, QW_TOK_DATA, toks, fifo);
    assert_int_equal(run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "fifo: exists and is not a regular file"));
    assert_int_equal(count_outputs(), before + 4); /* in.txt, fifo, link.tokens, out.tokens */
    if (geteuid() != 0) return;
    /* devices of our own: a null device is refused as -o; a full one as standard output makes
     * the write fail */
    snprintf(dev, sizeof dev, "%s/null", dir);
    assert_int_equal(mknod(dev, S_IFCHR | 0666, makedev(1, 3)), 0);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3/tokenizer.json' '%s' -o '%s'", QSWEEP_BIN,
             QW_TOK_DATA, text, dev);
    assert_int_equal(run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "null: exists and is not a regular file"));
    assert_int_equal(lstat(dev, &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    unlink(dev);
    snprintf(dev, sizeof dev, "%s/full", dir);
    assert_int_equal(mknod(dev, S_IFCHR | 0666, makedev(1, 7)), 0);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3/tokenizer.json' --decode '%s' >'%s'",
             QSWEEP_BIN, QW_TOK_DATA, toks, dev);
    assert_int_not_equal(run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "standard output: write failed"));
    unlink(dev);
}

static void usage_errors_exit_1(void **state) {
    (void)state;
    char cmd[8192], err[4096];
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s/llama3'", QSWEEP_BIN, QW_TOK_DATA);
    assert_int_equal(run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "usage"));
    snprintf(cmd, sizeof cmd, "'%s' tokenize --frobnicate", QSWEEP_BIN);
    assert_int_equal(run(cmd, err, sizeof err), 1);
    /* a model that is not there: bad input, named */
    snprintf(cmd, sizeof cmd, "'%s' tokenize /nonexistent/model.gguf x.txt -o y", QSWEEP_BIN);
    assert_int_equal(run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
}

/* `qsweep tokenize bytes`: every byte of the text (invalid UTF-8 too: the ids are bytes) is
 * its own id, in order, in a version 2 file of vocabulary 258 whose header names the bytes
 * tokenizer; --bos puts 256 first, as a training grid's `tokenizer: bytes` reads a text. The
 * expected digest is Python's hashlib.blake2b(b"qsweep bytes tokenizer: ids 0..255 bytes, 256
 * BOS, 257 EOS", digest_size=32), computed apart from the product. */
static void bytes_tokenizer_writes_the_bytes(void **state) {
    (void)state;
    static const unsigned char raw[] = {'I', 'n', ' ', 0xc3, '(', 0x00, 0xff, '\n'};
    char text[512], out[512], cmd[8192], err[4096];
    snprintf(text, sizeof text, "%s/raw.bin", dir);
    snprintf(out, sizeof out, "%s/raw.tokens", dir);
    FILE *f = fopen(text, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(raw, 1, sizeof raw, f), sizeof raw);
    fclose(f);
    for (int bos = 0; bos <= 1; bos++) {
        snprintf(cmd, sizeof cmd, "'%s' tokenize bytes '%s' -o '%s'%s", QSWEEP_BIN, text, out,
                 bos ? " --bos" : "");
        assert_int_equal(run(cmd, err, sizeof err), 0);
        qw_tokens tok;
        qs_error e = {0};
        assert_int_equal(qw_tokens_load(out, &tok, &e), QS_OK);
        assert_int_equal(tok.version, 2);
        assert_int_equal(tok.vocab_size, 258);
        assert_string_equal(tok.tokenizer_digest,
                            "7f73011814b3ba5b857b7063facec1d18f344539b8eabc8f2e51b10fc2aea0e6");
        assert_int_equal(tok.n, sizeof raw + (size_t)bos);
        if (bos) assert_int_equal(tok.ids[0], 256);
        for (size_t i = 0; i < sizeof raw; i++)
            assert_int_equal(tok.ids[i + (size_t)bos], raw[i]);
        qw_tokens_free(&tok);
    }
    snprintf(cmd, sizeof cmd, "'%s' tokenize bytes --decode '%s'", QSWEEP_BIN, out);
    assert_int_equal(run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "--decode"));
    snprintf(cmd, sizeof cmd, "'%s' tokenize bytes '%s/none.txt' -o '%s/none.tokens'", QSWEEP_BIN,
             dir, dir);
    assert_int_not_equal(run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "none.txt"));
    assert_int_equal(access(out, F_OK), 0);
    unlink(out);
    unlink(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpl3_smollm2_round_trip),
        cmocka_unit_test(invalid_utf8_names_file_and_offset),
        cmocka_unit_test(output_that_is_not_a_regular_file_is_refused),
        cmocka_unit_test(usage_errors_exit_1),
        cmocka_unit_test(bytes_tokenizer_writes_the_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
