/* qsweep cache: what qsweep keeps under ${XDG_CACHE_HOME:-~/.cache}/qsweep, its size, and the
 * pruning of what a worker computes again when it needs it (cli.h). */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "exit_status.h"

/* One folder of the cache: its environment override (as the worker reads it,
 * worker/jobs/jobs.c and worker/tokenizer/text_dataset.c), its leaf under qsweep/, and whether
 * qsweep computes its files again (derived: prune and clear remove them) or not (a fetched
 * model, a trained checkpoint: listed only). */
static const struct {
    const char *name, *env, *leaf;
    bool derived;
    const char *what;
} folders[] = {
    {"baselines", "QSWEEP_BASELINE_DIR", "baselines", true,
     "the unquantized model's log-probabilities per (model, text), computed again when missing"},
    {"tokens", "QSWEEP_TOKENS_DIR", "tokens", true,
     "texts tokenized for a model, tokenized again when missing"},
    {"models", NULL, "models", false, "fetched checkpoints (tools/fetch_smollm2.sh)"},
    {"train", NULL, "train", false, "checkpoints of training jobs, which later jobs may name"},
};
enum { N_FOLDERS = sizeof folders / sizeof folders[0] };

static qs_status folder_path(size_t i, char *out, size_t cap, qs_error *err) {
    const char *env = folders[i].env ? getenv(folders[i].env) : NULL;
    if (env && *env) {
        if ((size_t)snprintf(out, cap, "%s", env) >= cap)
            return qs_error_set(err, QS_EINVAL, "%s: path too long", folders[i].env);
        return QS_OK;
    }
    return qsweep_xdg_path("XDG_CACHE_HOME", ".cache", folders[i].leaf, out, cap, err);
}

typedef struct {
    int64_t bytes;   /* of the regular files seen */
    int64_t files;   /* regular files seen */
    int64_t removed; /* bytes removed */
} tally;

/* Walks dir (recursively); a regular file older than cutoff (mtime, 0: none is) is removed
 * when remove is set. A folder that does not exist holds nothing. */
static qs_status walk(const char *dir, bool remove_old, time_t cutoff, tally *t, qs_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return QS_OK;
        return qs_error_set(err, QS_EIO, "%s: %s", dir, strerror(errno));
    }
    qs_status st = QS_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) {
            st = qs_error_set(err, QS_EINVAL, "%s/%s: path too long", dir, e->d_name);
            break;
        }
        struct stat sb;
        if (lstat(path, &sb) != 0) continue; /* gone meanwhile */
        if (S_ISDIR(sb.st_mode)) {
            st = walk(path, remove_old, cutoff, t, err);
            continue;
        }
        if (!S_ISREG(sb.st_mode)) continue;
        if (remove_old && (cutoff == 0 || sb.st_mtime < cutoff)) {
            if (unlink(path) != 0)
                st = qs_error_set(err, QS_EIO, "removing %s: %s", path, strerror(errno));
            else
                t->removed += (int64_t)sb.st_size;
            continue;
        }
        t->bytes += (int64_t)sb.st_size;
        t->files++;
    }
    closedir(d);
    return st;
}

void qsweep_format_bytes(int64_t bytes, char *out, size_t cap) {
    if (bytes >= 1000000000)
        snprintf(out, cap, "%.2f GB", (double)bytes / 1e9);
    else if (bytes >= 1000000)
        snprintf(out, cap, "%.1f MB", (double)bytes / 1e6);
    else if (bytes >= 1000)
        snprintf(out, cap, "%.1f kB", (double)bytes / 1e3);
    else
        snprintf(out, cap, "%lld B", (long long)bytes);
}

qs_status qsweep_cache_derived_bytes(int64_t *bytes, qs_error *err) {
    *bytes = 0;
    for (size_t i = 0; i < N_FOLDERS; i++) {
        if (!folders[i].derived) continue;
        char dir[4096];
        tally t = {0};
        qs_status st = folder_path(i, dir, sizeof dir, err);
        if (!st) st = walk(dir, false, 0, &t, err);
        if (st) return st;
        *bytes += t.bytes;
    }
    return QS_OK;
}

static void cache_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep cache [list]\n"
            "       qsweep cache prune --older-than DAYS\n"
            "       qsweep cache clear\n"
            "  list   each folder of ${XDG_CACHE_HOME:-~/.cache}/qsweep: files, size, path\n"
            "  prune  removes the files of baselines and tokens not written for DAYS days\n"
            "  clear  removes every file of baselines and tokens (a worker computes them again\n"
            "         when a job needs them); models and train are never removed here\n");
}

int qsweep_cmd_cache(int argc, char **argv) {
    static const struct option opts[] = {
        {"older-than", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int days = -1, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (qsweep_parse_int("cache", "--older-than", optarg, 0, 36500, &days) != 0)
                return QS_EXIT_USAGE;
            break;
        case 'h':
            cache_usage(stdout);
            return QS_EXIT_OK;
        default:
            cache_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    const char *action = optind < argc ? argv[optind] : "list";
    if (optind + 1 < argc) {
        fprintf(stderr, "qsweep cache: unexpected argument '%s'\n", argv[optind + 1]);
        return QS_EXIT_USAGE;
    }
    bool list = !strcmp(action, "list"), prune = !strcmp(action, "prune"),
         clear = !strcmp(action, "clear");
    if (!list && !prune && !clear) {
        fprintf(stderr, "qsweep cache: unknown action '%s' (list, prune or clear)\n", action);
        return QS_EXIT_USAGE;
    }
    if (prune != (days >= 0)) {
        fprintf(stderr, prune ? "qsweep cache prune: --older-than DAYS is required\n"
                              : "qsweep cache: --older-than goes with prune only\n");
        return QS_EXIT_USAGE;
    }
    time_t cutoff = prune ? time(NULL) - (time_t)days * 86400 : 0;
    if (prune && cutoff <= 0) cutoff = 1;
    qs_error err = {0};
    int64_t total = 0, removed = 0;
    for (size_t i = 0; i < N_FOLDERS; i++) {
        char dir[4096], size[32];
        tally t = {0};
        qs_status st = folder_path(i, dir, sizeof dir, &err);
        if (!st) st = walk(dir, (prune || clear) && folders[i].derived, cutoff, &t, &err);
        if (st) return qsweep_fail("cache", &err);
        total += t.bytes;
        removed += t.removed;
        qsweep_format_bytes(t.bytes, size, sizeof size);
        printf("%-10s %6lld files %10s  %s\n           %s\n", folders[i].name, (long long)t.files,
               size, dir, folders[i].what);
    }
    char size[32];
    qsweep_format_bytes(total, size, sizeof size);
    printf("total      %s\n", size);
    if (prune || clear) {
        qsweep_format_bytes(removed, size, sizeof size);
        printf("removed    %s\n", size);
    }
    return QS_EXIT_OK;
}
