/* safetensors files (https://github.com/huggingface/safetensors, "Format"): little-endian
 * u64 N, N bytes of UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
 * "__metadata__": {...}}, then the byte buffer; offsets are relative to the buffer start. */
#include "checkpoint_internal.h"

#include <jansson.h>
#include <string.h>

static int qw_st_dtype(const char *s, qw_dtype *dt) {
    if (strcmp(s, "F32") == 0)
        *dt = QW_DT_F32;
    else if (strcmp(s, "F16") == 0)
        *dt = QW_DT_F16;
    else if (strcmp(s, "BF16") == 0)
        *dt = QW_DT_BF16;
    else
        return 0;
    return 1;
}

/* Reads a JSON integer in [0, INT64_MAX] into *out. */
static int qw_st_u63(json_t *v, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (int64_t)json_integer_value(v);
    return 1;
}

static qs_status qw_st_entry(const char *file, const char *name, json_t *info, const uint8_t *buf,
                             size_t buf_size, size_t buf_offset, int file_index,
                             qw_tensor_table *table, qs_error *err) {
    if (!json_is_object(info))
        return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": header entry is not an object",
                            file, name);
    json_t *dtype = json_object_get(info, "dtype");
    if (!json_is_string(dtype))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\": field \"dtype\" is missing or not a string", file,
                            name);
    qw_dtype dt = QW_DT_COUNT;
    int raw = !strcmp(json_string_value(dtype), "U8")        ? QW_RAW_U8
              : !strcmp(json_string_value(dtype), "F8_E4M3") ? QW_RAW_F8_E4M3
                                                             : QW_RAW_NONE;
    if (!raw && !qw_st_dtype(json_string_value(dtype), &dt))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: tensor \"%s\": dtype \"%s\" is not supported (F32, F16, BF16; "
                            "U8 and F8_E4M3 as parts of packed FP4 linears)",
                            file, name, json_string_value(dtype));
    json_t *shape = json_object_get(info, "shape");
    if (!json_is_array(shape))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\": field \"shape\" is missing or not a list", file,
                            name);
    size_t ndim = json_array_size(shape);
    if (ndim > QW_MAX_DIMS)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: tensor \"%s\": field \"shape\" has %zu dimensions (at most %d)",
                            file, name, ndim, QW_MAX_DIMS);
    int64_t dims[QW_MAX_DIMS] = {0}, numel = 1;
    for (size_t i = 0; i < ndim; i++) {
        if (!qw_st_u63(json_array_get(shape, i), &dims[i]))
            return qs_error_set(
                err, QS_EFORMAT,
                "%s: tensor \"%s\": field \"shape[%zu]\" is not a non-negative integer", file, name,
                i);
        if (dims[i] != 0 && numel > INT64_MAX / dims[i])
            return qs_error_set(err, QS_EFORMAT,
                                "%s: tensor \"%s\": field \"shape\" overflows 64 bits", file, name);
        numel *= dims[i];
    }
    json_t *offs = json_object_get(info, "data_offsets");
    int64_t begin, end;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !qw_st_u63(json_array_get(offs, 0), &begin) || !qw_st_u63(json_array_get(offs, 1), &end))
        return qs_error_set(
            err, QS_EFORMAT,
            "%s: tensor \"%s\": field \"data_offsets\" must be two non-negative integers", file,
            name);
    if (begin > end || (uint64_t)end > buf_size)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\": field \"data_offsets\" [%lld, %lld] lies outside "
                            "the %zu-byte data buffer "
                            "(file offset %zu)",
                            file, name, (long long)begin, (long long)end, buf_size, buf_offset);
    int overflow = 0;
    size_t want = raw ? (size_t)numel : qw_dtype_bytes(dt, numel, &overflow);
    if (overflow || want != (uint64_t)(end - begin))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\": field \"data_offsets\" spans %lld bytes but shape "
                            "x %s needs %lld (file offset %zu)",
                            file, name, (long long)(end - begin),
                            raw ? json_string_value(dtype) : qw_dtype_name(dt),
                            overflow ? -1LL : (long long)want, buf_offset + (size_t)begin);
    if (qw_table_find(table, name))
        return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\" appears twice in the checkpoint",
                            file, name);
    qw_tensor_entry *e = qw_table_add(table, name);
    if (!e)
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory adding tensor \"%s\"", file, name);
    e->dtype = dt;
    e->raw = raw;
    e->ndim = (int)ndim;
    memcpy(e->shape, dims, sizeof dims);
    e->numel = numel;
    e->src = buf + begin;
    e->nbytes = want;
    e->offset = buf_offset + (size_t)begin;
    e->file_index = file_index;
    return QS_OK;
}

qs_status qw_safetensors_parse(const char *file, const uint8_t *data, size_t size, int file_index,
                               qw_tensor_table *table, qs_error *err) {
    if (size < 8)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: truncated: %zu bytes, the 8-byte header length is missing", file,
                            size);
    uint64_t n;
    memcpy(&n, data, 8);
    if (n > size - 8)
        return qs_error_set(
            err, QS_EFORMAT,
            "%s: offset 0: header length %llu runs past the end of the %zu-byte file", file,
            (unsigned long long)n, size);
    json_error_t je;
    json_t *root = json_loadb((const char *)data + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: header (offset 8, %llu bytes): not valid JSON at byte %d: %s",
                            file, (unsigned long long)n, je.position, je.text);
    qs_status st = QS_OK;
    if (!json_is_object(root)) {
        st = qs_error_set(err, QS_EFORMAT, "%s: header (offset 8): not a JSON object", file);
    } else {
        const char *name;
        json_t *info;
        json_object_foreach(root, name, info) {
            if (strcmp(name, "__metadata__") == 0) continue;
            st = qw_st_entry(file, name, info, data + 8 + n, size - 8 - (size_t)n, 8 + (size_t)n,
                             file_index, table, err);
            if (st) break;
        }
    }
    json_decref(root);
    return st;
}
