/* cmd_inspect.c: `strata-cli inspect FILE [--json]`: a GGUF file's header,
 * metadata, tensor table and totals, as text or JSON.
 *
 * Opening the file runs the reader's full validation (model/gguf.c), so
 * inspect doubles as a checker: a bad file gives one line naming the file,
 * the field and the value, and exit status 1. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "engine/cuda/weight_types.h"
#include "model/gguf.h"
#include "model/quant.h"
#include "text/unicode.h"

#define ARRAY_HEAD 8     /* array elements shown before "..." */
#define TEXT_STR_MAX 72  /* string bytes shown in text mode */

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli inspect [--json] FILE\n\n"
               "Print a GGUF file's header (version, alignment, counts, data offset,\n"
               "file size), every metadata key with its type and value (arrays: element\n"
               "type, length and the first %d elements), the tensor table (name, type,\n"
               "shape, offset, bytes, and what the CUDA backend does with the type:\n"
               "native, converted (to F16 at upload: no kernel for it) or unsupported)\n"
               "and totals (parameters, bytes, bits per weight by type).  The file is\n"
               "fully validated first.\n\n"
               "options:\n"
               "  --json      print the same as one JSON object\n"
               "  -h, --help  show this help\n\n"
               "exit status: 0 ok, 1 unreadable or malformed file, 2 usage error\n",
            ARRAY_HEAD);
}

/* ---- strings ---------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (n bytes left), 0 if invalid.
 * Strict, as JSON parsers are: overlong forms, surrogates (ED A0..BF),
 * values past U+10FFFF and the lead bytes C0, C1, F5..FF are invalid, not
 * only a bad continuation byte (text/unicode.c's decoder). */
static size_t utf8_len(const uint8_t *p, uint64_t n)
{
    uint32_t cp;
    size_t len = utf8_next(p, n, &cp);
    return cp == UNICODE_INVALID ? 0 : len;
}

/* A JSON string; each byte of an invalid UTF-8 sequence becomes U+FFFD so
 * the output parses. */
static void json_str(FILE *f, const char *s, uint64_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    fputc('"', f);
    for (uint64_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t len = utf8_len(p + i, n - i);
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else if (len == 0)
            fputs("\\ufffd", f);
        else
            fwrite(p + i, 1, len, f);
        i += len ? len : 1;
    }
    fputc('"', f);
}

/* A quoted, escaped, possibly shortened string for the text table. */
static void text_str(FILE *f, const char *s, uint64_t n)
{
    uint64_t shown = n > TEXT_STR_MAX ? TEXT_STR_MAX : n;
    fputc('"', f);
    for (uint64_t i = 0; i < shown; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
    if (shown < n)
        fprintf(f, "... (%" PRIu64 " bytes)", n);
}

/* ---- values ----------------------------------------------------------- */

/* One numeric or bool element of type t at p. */
static void print_scalar(FILE *f, uint32_t t, const uint8_t *p, bool json)
{
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    uint64_t u64; int64_t i64; float f32; double f64;
    switch (t) {
    case GGUF_U8: memcpy(&u8, p, 1); fprintf(f, "%u", u8); break;
    case GGUF_I8: memcpy(&i8, p, 1); fprintf(f, "%d", i8); break;
    case GGUF_U16: memcpy(&u16, p, 2); fprintf(f, "%u", u16); break;
    case GGUF_I16: memcpy(&i16, p, 2); fprintf(f, "%d", i16); break;
    case GGUF_U32: memcpy(&u32, p, 4); fprintf(f, "%u", u32); break;
    case GGUF_I32: memcpy(&i32, p, 4); fprintf(f, "%d", i32); break;
    case GGUF_U64: memcpy(&u64, p, 8); fprintf(f, "%" PRIu64, u64); break;
    case GGUF_I64: memcpy(&i64, p, 8); fprintf(f, "%" PRId64, i64); break;
    case GGUF_BOOL: fputs(p[0] ? "true" : "false", f); break;
    case GGUF_F32:
    case GGUF_F64:
        if (t == GGUF_F32) {
            memcpy(&f32, p, 4);
            f64 = f32;
        } else {
            memcpy(&f64, p, 8);
        }
        /* JSON has no NaN or infinity: print those as strings. */
        if (json && !isfinite(f64))
            fprintf(f, "\"%g\"", f64);
        else
            fprintf(f, t == GGUF_F32 ? "%.9g" : "%.17g", f64);
        break;
    default: fputs("?", f);
    }
}

static void print_string(FILE *f, gguf_str s, bool json)
{
    if (json)
        json_str(f, s.p, s.len);
    else
        text_str(f, s.p, s.len);
}

/* The first ARRAY_HEAD elements, then "..." in text mode. */
static void print_array_head(FILE *f, const gguf_kv *kv, bool json)
{
    uint64_t shown = kv->n < ARRAY_HEAD ? kv->n : ARRAY_HEAD;
    size_t esz = gguf_vtype_size(kv->arr_type);
    fputc('[', f);
    for (uint64_t i = 0; i < shown; i++) {
        if (i)
            fputs(", ", f);
        if (kv->arr_type == GGUF_STRING)
            print_string(f, kv->strs[i], json);
        else
            print_scalar(f, kv->arr_type, kv->data + i * esz, json);
    }
    if (!json && shown < kv->n)
        fputs(", ...", f);
    fputc(']', f);
}

static void print_value(FILE *f, const gguf_kv *kv, bool json)
{
    if (kv->type == GGUF_STRING)
        print_string(f, kv->str, json);
    else if (kv->type == GGUF_ARRAY)
        print_array_head(f, kv, json);
    else
        print_scalar(f, kv->type, kv->data, json);
}

/* ---- totals ----------------------------------------------------------- */

typedef struct type_total {
    uint64_t tensors, params, bytes;
} type_total;

static uint64_t tensor_params(const gguf_tensor *t)
{
    return (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
}

/* Per type id (the reader guarantees ids < GGML_TYPE_COUNT). */
static void sum_types(const gguf *g, type_total *by_type, type_total *all)
{
    memset(by_type, 0, GGML_TYPE_COUNT * sizeof *by_type);
    memset(all, 0, sizeof *all);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        type_total *tt = &by_type[t->type];
        tt->tensors++;
        tt->params += tensor_params(t);
        tt->bytes += t->nbytes;
        all->tensors++;
        all->params += tensor_params(t);
        all->bytes += t->nbytes;
    }
}

/* What the CUDA backend does with a tensor of this type. */
static const char *card_use(int type)
{
    const type_traits *tt = type_traits_get(type);
    if (cuda_type_native(type))
        return "native";
    return tt && tt->dequant ? "converted" : "unsupported";
}

static double bpw(const type_total *t)
{
    return t->params ? 8.0 * (double)t->bytes / (double)t->params : 0.0;
}

/* ---- text ------------------------------------------------------------- */

static void print_text(FILE *f, const gguf *g)
{
    fprintf(f, "file:        %s\n", gguf_path(g));
    fprintf(f, "version:     %u\n", gguf_version(g));
    fprintf(f, "alignment:   %u\n", gguf_alignment(g));
    fprintf(f, "kv count:    %" PRIu64 "\n", gguf_n_kv(g));
    fprintf(f, "tensors:     %" PRIu64 "\n", gguf_n_tensors(g));
    fprintf(f, "data offset: %" PRIu64 "\n", gguf_data_offset(g));
    fprintf(f, "file size:   %" PRIu64 "\n", gguf_file_size(g));

    fprintf(f, "\nmetadata (%" PRIu64 " keys):\n", gguf_n_kv(g));
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        char type[32];
        if (kv->type == GGUF_ARRAY)
            snprintf(type, sizeof type, "%s[%" PRIu64 "]", gguf_vtype_name(kv->arr_type), kv->n);
        else
            snprintf(type, sizeof type, "%s", gguf_vtype_name(kv->type));
        fprintf(f, "  %-40s %-16s ", kv->key, type);
        print_value(f, kv, false);
        fputc('\n', f);
    }

    fprintf(f, "\ntensors (%" PRIu64 "):\n", gguf_n_tensors(g));
    fprintf(f, "  %-5s %-32s %-8s %-24s %14s %12s  %s\n", "#", "name", "type", "shape", "offset",
            "bytes", "card");
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char shape[96] = "";
        for (uint32_t d = 0; d < t->n_dims; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRId64,
                     d ? " x " : "", t->ne[d]);
        fprintf(f, "  %-5" PRIu64 " %-32s %-8s %-24s %14" PRIu64 " %12" PRIu64 "  %s\n", i,
                t->name, type_name((int)t->type), shape, t->offset, t->nbytes,
                card_use((int)t->type));
    }

    type_total by_type[GGML_TYPE_COUNT], all;
    sum_types(g, by_type, &all);
    fprintf(f, "\ntotals:\n");
    fprintf(f, "  parameters: %" PRIu64 "\n", all.params);
    fprintf(f, "  bytes:      %" PRIu64 " (%.2f MiB)\n", all.bytes, (double)all.bytes / 1048576.0);
    fprintf(f, "  bits/weight: %.4f\n", bpw(&all));
    fprintf(f, "  %-8s %8s %14s %14s %12s  %s\n", "type", "tensors", "parameters", "bytes",
            "bits/weight", "card");
    for (int id = 0; id < GGML_TYPE_COUNT; id++)
        if (by_type[id].tensors)
            fprintf(f, "  %-8s %8" PRIu64 " %14" PRIu64 " %14" PRIu64 " %12.4f  %s\n",
                    type_name(id), by_type[id].tensors, by_type[id].params, by_type[id].bytes,
                    bpw(&by_type[id]), card_use(id));
}

/* ---- JSON ------------------------------------------------------------- */

static void json_kv(FILE *f, const gguf_kv *kv)
{
    fputs("    {\"key\": ", f);
    json_str(f, kv->key, strlen(kv->key));
    fprintf(f, ", \"type\": \"%s\"", gguf_vtype_name(kv->type));
    if (kv->type == GGUF_ARRAY) {
        fprintf(f, ", \"elem_type\": \"%s\", \"length\": %" PRIu64 ", \"head\": ",
                gguf_vtype_name(kv->arr_type), kv->n);
    } else {
        fputs(", \"value\": ", f);
    }
    print_value(f, kv, true);
    fputc('}', f);
}

static void json_tensor(FILE *f, const gguf_tensor *t)
{
    fputs("    {\"name\": ", f);
    json_str(f, t->name, strlen(t->name));
    fprintf(f, ", \"type\": \"%s\", \"type_id\": %u, \"shape\": [", type_name((int)t->type),
            t->type);
    for (uint32_t d = 0; d < t->n_dims; d++)
        fprintf(f, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    fprintf(f, "], \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"card\": \"%s\"}",
            t->offset, t->nbytes, card_use((int)t->type));
}

static void print_json(FILE *f, const gguf *g)
{
    fputs("{\n  \"file\": ", f);
    json_str(f, gguf_path(g), strlen(gguf_path(g)));
    fprintf(f, ",\n  \"version\": %u,\n  \"alignment\": %u,\n  \"n_kv\": %" PRIu64
               ",\n  \"n_tensors\": %" PRIu64 ",\n  \"data_offset\": %" PRIu64
               ",\n  \"file_size\": %" PRIu64 ",\n  \"metadata\": [",
            gguf_version(g), gguf_alignment(g), gguf_n_kv(g), gguf_n_tensors(g),
            gguf_data_offset(g), gguf_file_size(g));
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        fputs(i ? ",\n" : "\n", f);
        json_kv(f, gguf_kv_at(g, i));
    }
    fputs("\n  ],\n  \"tensors\": [", f);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        fputs(i ? ",\n" : "\n", f);
        json_tensor(f, gguf_tensor_at(g, i));
    }
    type_total by_type[GGML_TYPE_COUNT], all;
    sum_types(g, by_type, &all);
    fprintf(f, "\n  ],\n  \"totals\": {\"parameters\": %" PRIu64 ", \"bytes\": %" PRIu64
               ", \"bits_per_weight\": %.6f, \"by_type\": [",
            all.params, all.bytes, bpw(&all));
    bool first = true;
    for (int id = 0; id < GGML_TYPE_COUNT; id++) {
        if (!by_type[id].tensors)
            continue;
        fprintf(f, "%s\n    {\"type\": \"%s\", \"tensors\": %" PRIu64 ", \"parameters\": %" PRIu64
                   ", \"bytes\": %" PRIu64 ", \"bits_per_weight\": %.6f}",
                first ? "" : ",", type_name(id), by_type[id].tensors, by_type[id].params,
                by_type[id].bytes, bpw(&by_type[id]));
        first = false;
    }
    fputs("\n  ]}\n}\n", f);
}

/* ---- command ---------------------------------------------------------- */

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "strata-cli inspect: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        } else if (path) {
            fprintf(stderr, "strata-cli inspect: one FILE expected, got '%s' and '%s'\n", path,
                    argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    gguf *g = NULL;
    strata_error err = {0};
    if (gguf_open(path, &g, &err) != 0) {
        /* One line, whatever a hostile tensor name holds. */
        for (char *c = err.msg; *c; c++)
            if ((unsigned char)*c < 0x20)
                *c = '?';
        fprintf(stderr, "strata-cli inspect: %s\n", err.msg);
        return 1;
    }
    if (json)
        print_json(stdout, g);
    else
        print_text(stdout, g);
    gguf_close(g);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "strata-cli inspect: cannot write output\n");
        return 1;
    }
    return 0;
}
