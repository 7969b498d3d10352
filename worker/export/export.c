/* A policy written as a serving checkpoint: the layouts by name, and the write that makes
 * the folder appear complete or not at all (export.h). */
#include "export.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "export_internal.h"
#include "model.h"

/* The layouts by name: one row each. */
static const struct {
    const char *name;
    qw_export_layout layout;
} LAYOUTS[] = {{"compressed-tensors", QW_EXPORT_COMPRESSED_TENSORS},
               {"gguf", QW_EXPORT_GGUF},
               {"modelopt", QW_EXPORT_MODELOPT}};

qs_status qw_export_layout_by_name(const char *name, qw_export_layout *out, qs_error *err) {
    for (size_t i = 0; name && i < sizeof LAYOUTS / sizeof LAYOUTS[0]; i++)
        if (strcmp(name, LAYOUTS[i].name) == 0) {
            *out = LAYOUTS[i].layout;
            return QS_OK;
        }
    return qs_error_set(err, QS_EINVAL,
                        "export: unknown layout \"%s\" (compressed-tensors, gguf, modelopt)",
                        name ? name : "");
}

/* A method no layout holds: one that transforms each input online, so that the weights alone
 * are not the model the job measured. Errors: QS_EUNSUPPORTED naming the method (and, in a
 * per-linear plan, the linear). */
static qs_status check_method(const qw_method_plan *plan, qs_error *err) {
    int n = !plan ? 0 : plan->linear ? plan->n_linear : 1;
    for (int i = 0; i < n; i++) {
        const qw_method_plan *lp = plan->linear ? plan->linear[i] : plan;
        if (!lp || (!lp->rotate && !lp->smooth)) continue;
        char where[96] = "";
        if (plan->linear)
            snprintf(where, sizeof where, " (model.layers.%d.%s)", i / QW_LINEAR_KINDS,
                     qw_linear_module_name((qw_linear_kind)(i % QW_LINEAR_KINDS)));
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: method %s%s: it %s, a transform of the input at run time "
                            "that no serving layout holds (its weights alone are not the model "
                            "the job measured); gptq and rtn export",
                            lp->name, where,
                            lp->rotate ? "rotates each input by a Hadamard matrix"
                                       : "divides each input by SmoothQuant's channel scales");
    }
    return QS_OK;
}

/* Removes the temporary folder: only the plain files this export put there, then the folder. */
static void remove_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[4096];
            if (!qw_export_path_join(p, sizeof p, dir, e->d_name)) unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* The folder that will hold out_dir (out_dir with its trailing '/' dropped, in dir) must be a
 * directory this process can create in: checked before the model is loaded, so a mistyped -o
 * fails at once, naming the folder. Errors: QS_EINVAL. */
static qs_status check_out_dir(const char *out_dir, char *dir, size_t cap, qs_error *err) {
    struct stat sb;
    if (!out_dir || !*out_dir) return qs_error_set(err, QS_EINVAL, "export: no output folder");
    size_t n = strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/') n--;
    if (n >= cap)
        return qs_error_set(err, QS_EINVAL, "export: output path too long");
    memcpy(dir, out_dir, n);
    dir[n] = 0;
    if (stat(dir, &sb) == 0)
        return qs_error_set(err, QS_EINVAL,
                            "export: %s already exists: an export never writes over a %s", dir,
                            S_ISDIR(sb.st_mode) ? "folder" : "file");
    char parent[4096];
    const char *slash = strrchr(dir, '/');
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash == dir ? 1 : slash - dir) : 1,
             slash ? dir : ".");
    const char *why = stat(parent, &sb) != 0    ? strerror(errno)
                      : !S_ISDIR(sb.st_mode)       ? "is not a folder"
                      : access(parent, W_OK | X_OK) ? "is not writable"
                                                    : NULL;
    if (why) return qs_error_set(err, QS_EINVAL, "export: -o %s: %s: %s", dir, parent, why);
    return QS_OK;
}

qs_status qw_export_write(const qw_export_request *r, qs_error *err) {
    char out_dir[4096], tmp[sizeof out_dir + sizeof ".tmp-XXXXXX"];
    qs_status st = check_method(r->method, err);
    if (!st) st = check_out_dir(r->out_dir, out_dir, sizeof out_dir, err);
    if (st) return st;
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", out_dir);
    qw_checkpoint *ck = NULL;
    qw_model *m = NULL;
    qw_method_state *ms = NULL; /* the linears the job's method made */
    float *amax = NULL; /* modelopt: its inputs' calibration amax per linear */
    int calibrated = r->layout == QW_EXPORT_MODELOPT;
    int mctx = calibrated && r->calib_ctx > 1 ? r->calib_ctx : 1; /* the longest forward */
    if (r->method && r->method->ctx > mctx) mctx = r->method->ctx;
    st = qw_checkpoint_open(r->model_path, &ck, err);
    if (!st) st = qw_model_create(ck, mctx, r->threads, &m, err);
    if (!st && r->policy->n_layers != qw_checkpoint_config(ck)->n_layers)
        st = qs_error_set(err, QS_EINVAL,
                          "export: the policy is for a %d-block model, %s has %d blocks",
                          r->policy->n_layers, r->model_path, qw_checkpoint_config(ck)->n_layers);
    if (!st && calibrated) st = qw_export_modelopt_calibrate(r, m, &amax, err);
    if (!st) st = qw_model_apply_policy(m, r->policy, err);
    if (!st && r->method) { /* as the worker applies it, keeping GPTQ's codes and scales */
        qw_method_plan plan = *r->method;
        qw_method_info info;
        plan.packed = 1;
        st = qw_method_apply(m, &plan, &ms, &info, err);
    }
    int made = 0;
    if (!st) {
        if (!mkdtemp(tmp))
            st = qs_error_set(err, QS_EIO, "%s: %s", tmp, strerror(errno));
        else
            made = 1;
    }
    if (!st && r->layout == QW_EXPORT_GGUF)
        st = qw_export_gguf(r, ck, m, ms, tmp, err);
    else if (!st && r->layout == QW_EXPORT_MODELOPT)
        st = qw_export_modelopt(r, ck, m, ms, amax, tmp, err);
    else if (!st)
        st = qw_export_ct(r, ck, m, ms, tmp, err);
    if (!st && chmod(tmp, 0755) != 0) /* mkdtemp's 0700 would hide it from a serving user */
        st = qs_error_set(err, QS_EIO, "%s: %s", tmp, strerror(errno));
    /* the folder appears under its name complete, or not at all */
    if (!st && renameat2(AT_FDCWD, tmp, AT_FDCWD, out_dir, RENAME_NOREPLACE) != 0)
        st = qs_error_set(err, QS_EIO, "renaming %s to %s: %s", tmp, out_dir, strerror(errno));
    if (st && made) remove_tmp(tmp);
    free(amax);
    qw_method_state_free(ms);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    return st;
}
