/*
 * spindle-vu-client: results and output.
 *
 * Theory of operation
 * -------------------
 * Each command fills a Result, a JSON object whose members are what a
 * test reads (--json) or a person reads (text).  At the end the results
 * are printed in order: with --json as one document {ok, error, results}
 * so that a failing command still shows everything up to it, else each
 * command's name and its members as indented "key: value" lines, nested
 * objects further indented and arrays of scalars on one line.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "vu-client-result.h"

#define ALIVE_WAIT_MS       2000

void res_int(Result *r, const char *key, int64_t v)
{
    json_object_set_int_member(r->obj, key, v);
}

void res_str(Result *r, const char *key, const char *v)
{
    json_object_set_string_member(r->obj, key, v);
}

void res_bool(Result *r, const char *key, bool v)
{
    json_object_set_boolean_member(r->obj, key, v);
}

void res_hex(Result *r, const char *key, uint64_t v)
{
    g_autofree char *s = g_strdup_printf("0x%016" PRIx64, v);

    res_str(r, key, s);
}

void res_mismatch(Result *r, uint64_t off, uint64_t want, uint64_t got)
{
    JsonObject *m = json_object_new();
    g_autofree char *w = g_strdup_printf("0x%016" PRIx64, want);
    g_autofree char *g = g_strdup_printf("0x%016" PRIx64, got);

    json_object_set_int_member(m, "offset", off);
    json_object_set_string_member(m, "expected", w);
    json_object_set_string_member(m, "found", g);
    json_object_set_object_member(r->obj, "mismatch", m);
}

void res_verified(Result *r, GChecksum *sum, bool have_seed, uint64_t seed,
                  bool zeroes)
{
    res_str(r, "sha256", g_checksum_get_string(sum));
    if (have_seed) {
        res_int(r, "seed", seed);
    }
    res_str(r, "verified", have_seed ? "pattern" : zeroes ? "zeroes" : "no");
}

void res_queue_stats(JsonObject *o, const VufQueueStats *s)
{
    json_object_set_int_member(o, "kicks", s->kicks);
    json_object_set_int_member(o, "kicks_avoided", s->kicks_avoided);
    json_object_set_int_member(o, "interrupts", s->interrupts);
    json_object_set_int_member(o, "wakeups", s->wakeups);
}

void res_alive(Result *r, VuFrontend *fe, bool closed)
{
    res_bool(r, "alive", !closed && vuf_check_alive(fe, ALIVE_WAIT_MS));
}

void res_queue_alive(Result *r, VuFrontend *fe, VufQueue *q, bool closed)
{
    res_bool(r, "queue_broken", vufq_broken(q));
    res_bool(r, "error_signalled", vufq_error_signalled(q));
    res_alive(r, fe, closed);
}

JsonArray *res_array(Result *r, const char *key)
{
    JsonArray *a = json_array_new();

    json_object_set_array_member(r->obj, key, a);
    return a;
}

JsonObject *res_queue_entry(JsonArray *a, unsigned queue)
{
    JsonObject *o = json_object_new();

    json_object_set_int_member(o, "queue", queue);
    json_array_add_object_element(a, o);
    return o;
}

JsonObject *res_fields_object(const void *s, const ResField *fields,
                              size_t n)
{
    JsonObject *o = json_object_new();

    for (size_t i = 0; i < n; i++) {
        const ResField *f = &fields[i];
        uint64_t v = 0;

        /* The low bytes of v on a little-endian host (vu-frontend.h). */
        memcpy(&v, (const uint8_t *)s + f->offset, f->size);
        if (f->scale) {
            json_object_set_int_member(o, f->name, v * f->scale);
        } else {
            json_object_set_boolean_member(o, f->name, v != 0);
        }
    }
    return o;
}

void res_fields(Result *r, const char *key, const void *s,
                const ResField *fields, size_t n)
{
    json_object_set_object_member(r->obj, key,
                                  res_fields_object(s, fields, n));
}

char *hex_string(const uint8_t *p, size_t n)
{
    GString *h = g_string_new(NULL);
    size_t i;

    for (i = 0; i < n; i++) {
        g_string_append_printf(h, "%02x", p[i]);
    }
    return g_string_free(h, FALSE);
}

static void print_node_text(const char *key, JsonNode *node, int indent);

static void print_object_text(JsonObject *obj, int indent)
{
    g_autoptr(GList) members = json_object_get_members(obj);
    GList *m;

    for (m = members; m; m = m->next) {
        print_node_text(m->data, json_object_get_member(obj, m->data),
                        indent);
    }
}

static void print_node_text(const char *key, JsonNode *node, int indent)
{
    if (JSON_NODE_HOLDS_OBJECT(node)) {
        printf("%*s%s:\n", indent, "", key);
        print_object_text(json_node_get_object(node), indent + 2);
    } else if (JSON_NODE_HOLDS_ARRAY(node)) {
        JsonArray *a = json_node_get_array(node);
        guint i, n = json_array_get_length(a);

        if (n && JSON_NODE_HOLDS_OBJECT(json_array_get_element(a, 0))) {
            printf("%*s%s:\n", indent, "", key);
            for (i = 0; i < n; i++) {
                g_autofree char *k = g_strdup_printf("[%u]", i);

                print_node_text(k, json_array_get_element(a, i), indent + 2);
            }
        } else {
            printf("%*s%s:", indent, "", key);
            for (i = 0; i < n; i++) {
                JsonNode *e = json_array_get_element(a, i);
                g_autofree char *s = json_node_get_value_type(e) ==
                                     G_TYPE_STRING
                                     ? g_strdup(json_node_get_string(e))
                                     : json_to_string(e, FALSE);

                printf("%s%s", i ? ", " : " ", s);
            }
            printf("\n");
        }
    } else if (JSON_NODE_HOLDS_NULL(node)) {
        printf("%*s%s: -\n", indent, "", key);
    } else if (json_node_get_value_type(node) == G_TYPE_STRING) {
        printf("%*s%s: %s\n", indent, "", key, json_node_get_string(node));
    } else {
        g_autofree char *s = json_to_string(node, FALSE);

        printf("%*s%s: %s\n", indent, "", key, s);
    }
}

void print_results(bool json, JsonArray *results, const char *error)
{
    guint i;

    if (json) {
        g_autoptr(JsonBuilder) b = json_builder_new();
        g_autoptr(JsonGenerator) gen = json_generator_new();
        g_autoptr(JsonNode) root = NULL;
        g_autofree char *text = NULL;

        json_builder_begin_object(b);
        json_builder_set_member_name(b, "ok");
        json_builder_add_boolean_value(b, !error);
        json_builder_set_member_name(b, "error");
        if (error) {
            json_builder_add_string_value(b, error);
        } else {
            json_builder_add_null_value(b);
        }
        json_builder_set_member_name(b, "results");
        json_builder_add_value(b, json_node_init_array(json_node_alloc(),
                                                       results));
        json_builder_end_object(b);
        root = json_builder_get_root(b);
        json_generator_set_root(gen, root);
        json_generator_set_pretty(gen, TRUE);
        text = json_generator_to_data(gen, NULL);
        printf("%s\n", text);
        return;
    }
    for (i = 0; i < json_array_get_length(results); i++) {
        JsonObject *obj = json_array_get_object_element(results, i);

        printf("%s\n", json_object_get_string_member(obj, "command"));
        print_object_text(obj, 2);
    }
    fflush(stdout);
    if (error) {
        fprintf(stderr, "spindle-vu-client: %s\n", error);
    }
}
