/*
 * json_util.h — reading and writing small JSON documents (specs, plans, fits) with cJSON, with
 * messages that name the file, the line and the field.
 *
 *   - json_slurp refuses files over JSON_MAX_BYTES, so a wrong path to a huge file fails fast;
 *   - json_parse_object reports "FILE:LINE: malformed JSON" using cJSON's error position, and
 *     nesting deeper than cJSON's limit (1000) is malformed, not a crash; it is strict where
 *     cJSON is lenient: a key repeated in one object, a \u0000 escape (cJSON would cut the
 *     string there) and anything after the document are errors;
 *   - json_int / json_double / json_bool read one field with a range check: "FILE: field
 *     \"hidden_size\" must be a whole number in [1, 16777216]". A default of JSON_REQUIRED makes
 *     the field mandatory.
 */
#ifndef JSON_UTIL_H
#define JSON_UTIL_H

#include <cjson/cJSON.h>

#include "dp.h"

#define JSON_MAX_BYTES (256u << 20)
#define JSON_REQUIRED (-1)

/* Reads a whole file into a NUL-terminated malloc'd buffer ("-" is stdin). */
dp_status json_slurp(const char *path, char **text, dp_err *err);

/* Parses text that must hold one JSON object. */
dp_status json_parse_object(const char *text, const char *name, cJSON **out, dp_err *err);

/* The strict checks of json_parse_object on a parsed value and its text (for readers that parse
 * themselves, such as JSONL): text that is not UTF-8 (RFC 8259; cJSON itself refuses a lone
 * surrogate escape), a repeated key or a \u0000 escape is DP_ERR_PARSE, named at name:line. */
dp_status json_strict(const cJSON *v, const char *text, const char *name, long line, dp_err *err);

/* Integer field in [lo, hi]; absent → def, or an error when def is JSON_REQUIRED (-1). */
dp_status json_int(const cJSON *obj, const char *key, const char *name, int lo, int hi, int def,
                   int *out, dp_err *err);

/* Finite number field in [lo, hi]; absent → def unless required. */
dp_status json_double(const cJSON *obj, const char *key, const char *name, double lo, double hi,
                      int required, double def, double *out, dp_err *err);

/* Boolean field (true/false, or 0/1); absent → def. */
dp_status json_bool(const cJSON *obj, const char *key, const char *name, int def, int *out,
                    dp_err *err);

/* A string field that names one of two choices: *out 0 for first (also when absent), 1 for
 * second; anything else: "FILE: field \"KEY\" must be \"FIRST\" or \"SECOND\"". */
dp_status json_choice(const cJSON *obj, const char *key, const char *name, const char *first,
                      const char *second, int *out, dp_err *err);

/* Pretty-prints obj to path ("-" is stdout) with a final newline. */
dp_status json_write_file(const cJSON *obj, const char *path, dp_err *err);

#endif /* JSON_UTIL_H */
