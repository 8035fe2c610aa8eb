/*
 * Opts: structured options as one JSON tree, whichever way they were typed.
 *
 * Theory of operation
 *
 * Both spellings become a json-glib tree whose root is a JsonObject.  The
 * JSON form goes through JsonParser unchanged.  The key=value form is split
 * at single commas (",," is a literal comma), each element at its first
 * '='; a dotted key walks down, creating objects as needed, and the value
 * is stored as a JSON string.  So "cache.direct=on" and
 * {"cache": {"direct": "on"}} are the same tree, and the typed getters
 * accept a string wherever they accept a JSON number or boolean.
 *
 * An Opts is a reference on one object of such a tree plus a table of the
 * JsonNodes that were asked for, keyed by node pointer:
 *   OPTS_USED     a getter read this node; for an object or a list taken
 *                 with opts_get_child()/opts_get_list(), the whole subtree
 *                 is accounted for (its own Opts checks what is inside);
 *   OPTS_VISITED  a getter walked through this object on the way to a
 *                 deeper key (present or not), so the object itself is
 *                 expected, even if it turns out to be empty.
 * opts_check_unused() walks the tree in insertion order and reports the
 * first leaf (or empty, never visited object) whose node and ancestors
 * are all unmarked.  Marking nodes rather than key strings keeps a JSON
 * member name that contains a '.' from being confused with a nested key.
 *
 * A child Opts (an inline child node, an element of a list) shares the
 * tree, has its own table, and remembers the dotted path from the top
 * ("file.") so that its messages name keys as the user wrote them.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/cutils.h"
#include "util/keyval.h"
#include "util/opts.h"

enum {
    OPTS_VISITED = 1,
    OPTS_USED = 2,
};

struct Opts {
    JsonObject *obj;        /* a reference */
    char *prefix;           /* "" at the top, "file." for a child */
    GHashTable *marks;      /* JsonNode * -> OPTS_VISITED or OPTS_USED */
};

static Opts *opts_new(JsonObject *obj, const char *prefix)
{
    Opts *opts = g_new0(Opts, 1);

    opts->obj = json_object_ref(obj);
    opts->prefix = g_strdup(prefix);
    opts->marks = g_hash_table_new(g_direct_hash, g_direct_equal);
    return opts;
}

Opts *opts_new_from_object(JsonObject *obj)
{
    return opts_new(obj, "");
}

void opts_free(Opts *opts)
{
    if (!opts) {
        return;
    }
    g_hash_table_unref(opts->marks);
    json_object_unref(opts->obj);
    g_free(opts->prefix);
    g_free(opts);
}

/* ------------------------------------------------------------------------ */
/* key=value form                                                            */

/* Empty keys and empty dotted parts ("a..b", ".a", "a.") are errors. */
static bool opts_keyval_key_valid(const char *key, const char *value,
                                  Error **errp)
{
    if (!*key) {
        error_setg(errp, "Empty parameter name in '=%s'", value);
        return false;
    }
    if (key[0] == '.' || key[strlen(key) - 1] == '.' || strstr(key, "..")) {
        error_setg(errp, "Invalid parameter name '%s': empty part between "
                   "dots", key);
        return false;
    }
    return true;
}

/* parts[0..n-1] joined with dots. */
static char *opts_keyval_join(char **parts, int n)
{
    GString *key = g_string_new(parts[0]);

    for (int i = 1; i < n; i++) {
        g_string_append_printf(key, ".%s", parts[i]);
    }
    return g_string_free(key, FALSE);
}

/* The name of obj's first member (obj is not empty). */
static const char *opts_first_member(JsonObject *obj)
{
    JsonObjectIter iter;
    const char *name = NULL;
    JsonNode *node;

    json_object_iter_init_ordered(&iter, obj);
    json_object_iter_next_ordered(&iter, &name, &node);
    return name;
}

/* The object at parts[0..depth-1] below root, created where missing. */
static JsonObject *opts_keyval_parent(JsonObject *root, char **parts,
                                      int depth, const char *key,
                                      Error **errp)
{
    JsonObject *obj = root;

    for (int i = 0; i < depth; i++) {
        JsonNode *node = json_object_get_member(obj, parts[i]);
        JsonObject *child;

        if (!node) {
            child = json_object_new();
            json_object_set_object_member(obj, parts[i], child);
            obj = child;
        } else if (JSON_NODE_HOLDS_OBJECT(node)) {
            obj = json_node_get_object(node);
        } else {
            g_autofree char *conflict = opts_keyval_join(parts, i + 1);

            error_setg(errp, "Parameter '%s' is given a value and also "
                       "members ('%s')", conflict, key);
            return NULL;
        }
    }
    return obj;
}

static bool opts_keyval_insert(JsonObject *root, const char *key,
                               const char *value, Error **errp)
{
    g_auto(GStrv) parts = NULL;
    JsonObject *parent;
    JsonNode *old;
    int depth;

    if (!opts_keyval_key_valid(key, value, errp)) {
        return false;
    }
    parts = g_strsplit(key, ".", -1);
    depth = g_strv_length(parts) - 1;
    parent = opts_keyval_parent(root, parts, depth, key, errp);
    if (!parent) {
        return false;
    }
    old = json_object_get_member(parent, parts[depth]);
    if (old && JSON_NODE_HOLDS_OBJECT(old)) {
        error_setg(errp, "Parameter '%s' is given a value and also members "
                   "('%s.%s')", key, key,
                   opts_first_member(json_node_get_object(old)));
        return false;
    }
    if (old) {
        error_setg(errp, "Parameter '%s' is given twice", key);
        return false;
    }
    json_object_set_string_member(parent, parts[depth], value);
    return true;
}

Opts *opts_parse_keyval(const char *str, const char *implied_key, Error **errp)
{
    g_autoptr(JsonObject) root = json_object_new();
    const char *pos = str ? str : "";
    bool first = true;

    while (*pos) {
        g_autofree char *elem = keyval_next_element(&pos);
        char *eq = strchr(elem, '=');
        bool ok;

        if (eq) {
            *eq = '\0';
            ok = opts_keyval_insert(root, elem, eq + 1, errp);
        } else if (first && implied_key && *elem) {
            ok = opts_keyval_insert(root, implied_key, elem, errp);
        } else if (!*elem) {
            error_setg(errp, "Empty element at the start of '%s'", str);
            ok = false;
        } else {
            error_setg(errp, "Expected key=value, got '%s'", elem);
            ok = false;
        }
        if (!ok) {
            return NULL;
        }
        first = false;
    }
    return opts_new(root, "");
}

/* ------------------------------------------------------------------------ */
/* JSON form                                                                 */

/* "an array", "'foo'", "'5'": what the user gave, for error messages. */
static char *opts_describe_node(JsonNode *node)
{
    switch (JSON_NODE_TYPE(node)) {
    case JSON_NODE_OBJECT:
        return g_strdup("an object");
    case JSON_NODE_ARRAY:
        return g_strdup("a list");
    case JSON_NODE_NULL:
        return g_strdup("null");
    case JSON_NODE_VALUE:
        if (json_node_get_value_type(node) == G_TYPE_STRING) {
            return g_strdup_printf("'%s'", json_node_get_string(node));
        } else {
            g_autofree char *text = json_to_string(node, FALSE);

            return g_strdup_printf("'%s'", text);
        }
    }
    g_assert_not_reached();
}

Opts *opts_parse_json(const char *json, Error **errp)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    GError *parse_err = NULL;
    JsonNode *root;

    if (!json_parser_load_from_data(parser, json, -1, &parse_err)) {
        error_setg(errp, "Invalid JSON: %s", parse_err->message);
        g_error_free(parse_err);
        return NULL;
    }
    root = json_parser_get_root(parser);
    if (!root) {
        error_setg(errp, "Invalid JSON: expected an object, got nothing");
        return NULL;
    }
    if (!JSON_NODE_HOLDS_OBJECT(root)) {
        g_autofree char *got = opts_describe_node(root);

        error_setg(errp, "Expected a JSON object, got %s", got);
        return NULL;
    }
    return opts_new(json_node_get_object(root), "");
}

Opts *opts_parse(const char *str, const char *implied_key, Error **errp)
{
    const char *p = str ? str : "";

    while (g_ascii_isspace(*p)) {
        p++;
    }
    if (*p == '{') {
        return opts_parse_json(str, errp);
    }
    return opts_parse_keyval(str, implied_key, errp);
}

/* ------------------------------------------------------------------------ */
/* Lookup and marking                                                        */

static void opts_mark(Opts *opts, JsonNode *node, int mark)
{
    int old = GPOINTER_TO_INT(g_hash_table_lookup(opts->marks, node));

    if (mark > old) {
        g_hash_table_insert(opts->marks, node, GINT_TO_POINTER(mark));
    }
}

static int opts_mark_of(Opts *opts, JsonNode *node)
{
    return GPOINTER_TO_INT(g_hash_table_lookup(opts->marks, node));
}

/*
 * The node at dotted key, or NULL if it (or an object on the way) is
 * missing.  With mark, the objects walked through become OPTS_VISITED and
 * the node found OPTS_USED.
 */
static JsonNode *opts_lookup(Opts *opts, const char *key, bool mark)
{
    JsonObject *obj = opts->obj;
    const char *p = key;

    for (;;) {
        const char *dot = strchr(p, '.');
        g_autofree char *name = dot ? g_strndup(p, dot - p) : g_strdup(p);
        JsonNode *node = json_object_get_member(obj, name);

        if (!node) {
            return NULL;
        }
        if (!dot) {
            if (mark) {
                opts_mark(opts, node, OPTS_USED);
            }
            return node;
        }
        if (!JSON_NODE_HOLDS_OBJECT(node)) {
            return NULL;
        }
        if (mark) {
            opts_mark(opts, node, OPTS_VISITED);
        }
        obj = json_node_get_object(node);
        p = dot + 1;
    }
}

static bool opts_node_is(JsonNode *node, GType type)
{
    return JSON_NODE_HOLDS_VALUE(node) &&
           json_node_get_value_type(node) == type;
}

/* "Parameter 'file.x' expects <expected>, got <what node holds>" */
static void opts_type_error(Opts *opts, const char *key, JsonNode *node,
                            const char *expected, Error **errp)
{
    g_autofree char *got = opts_describe_node(node);

    error_setg(errp, "Parameter '%s%s' expects %s, got %s", opts->prefix, key,
               expected, got);
}

bool opts_has(Opts *opts, const char *key)
{
    return opts_lookup(opts, key, false) != NULL;
}

bool opts_take_null(Opts *opts, const char *key)
{
    JsonNode *node = opts_lookup(opts, key, false);

    if (!node || !JSON_NODE_HOLDS_NULL(node)) {
        return false;
    }
    opts_lookup(opts, key, true);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Typed getters                                                             */

bool opts_get_str(Opts *opts, const char *key, const char *def,
                  const char **out, Error **errp)
{
    JsonNode *node = opts_lookup(opts, key, true);

    if (!node) {
        *out = def;
        return true;
    }
    if (!opts_node_is(node, G_TYPE_STRING)) {
        opts_type_error(opts, key, node, "a string", errp);
        return false;
    }
    *out = json_node_get_string(node);
    return true;
}

bool opts_get_bool(Opts *opts, const char *key, bool def, bool *out,
                   Error **errp)
{
    JsonNode *node = opts_lookup(opts, key, true);
    g_autofree char *name = NULL;

    if (!node) {
        *out = def;
        return true;
    }
    if (opts_node_is(node, G_TYPE_BOOLEAN)) {
        *out = json_node_get_boolean(node);
        return true;
    }
    if (!opts_node_is(node, G_TYPE_STRING)) {
        opts_type_error(opts, key, node, "'on' or 'off'", errp);
        return false;
    }
    name = g_strconcat(opts->prefix, key, NULL);
    return parse_bool(name, json_node_get_string(node), out, errp);
}

bool opts_get_int(Opts *opts, const char *key, int64_t min, int64_t max,
                  int64_t def, int64_t *out, Error **errp)
{
    JsonNode *node = opts_lookup(opts, key, true);
    g_autofree char *name = NULL;
    char buf[32];
    const char *text;

    if (!node) {
        *out = def;
        return true;
    }
    if (opts_node_is(node, G_TYPE_INT64)) {
        /* Through the string parser so the range message is the same. */
        g_snprintf(buf, sizeof(buf), "%" PRId64, json_node_get_int(node));
        text = buf;
    } else if (opts_node_is(node, G_TYPE_STRING)) {
        text = json_node_get_string(node);
    } else {
        opts_type_error(opts, key, node, "an integer", errp);
        return false;
    }
    name = g_strconcat(opts->prefix, key, NULL);
    return parse_int64_in_range(name, text, min, max, out, errp);
}

/* The multiplier for a size suffix, or 0 if c is not one. */
static uint64_t opts_size_suffix(char c)
{
    switch (c) {
    case 'k':
    case 'K':
        return UINT64_C(1) << 10;
    case 'm':
    case 'M':
        return UINT64_C(1) << 20;
    case 'g':
    case 'G':
        return UINT64_C(1) << 30;
    case 't':
    case 'T':
        return UINT64_C(1) << 40;
    default:
        return 0;
    }
}

/*
 * Digits in base (10 or 16) from *p, advancing *p past them.  Returns
 * false if there is none; *too_big if the number exceeds INT64_MAX.
 */
static bool opts_size_digits(const char **p, unsigned base, uint64_t *out,
                             bool *too_big)
{
    const char *s = *p;
    uint64_t v = 0;

    *too_big = false;
    for (; g_ascii_isxdigit(*s); s++) {
        int d = base == 16 ? g_ascii_xdigit_value(*s)
                           : g_ascii_digit_value(*s);

        if (d < 0) {
            break;
        }
        if (v > (INT64_MAX - (uint64_t)d) / base) {
            *too_big = true;
        } else {
            v = v * base + d;
        }
    }
    *out = v;
    if (s == *p) {
        return false;
    }
    *p = s;
    return true;
}

/* "4096", "0x1000", "64k", "1G": a byte count up to INT64_MAX. */
static bool opts_parse_size(const char *name, const char *str, uint64_t *out,
                            Error **errp)
{
    const char *p = str;
    uint64_t v, mult = 1;
    bool too_big;
    bool ok;

    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        p += 2;
        ok = opts_size_digits(&p, 16, &v, &too_big);
    } else {
        ok = opts_size_digits(&p, 10, &v, &too_big);
        if (ok && *p) {
            mult = opts_size_suffix(*p);
            p += mult != 0;     /* an unknown suffix stays: junk below */
        }
    }
    if (!ok || *p) {
        error_setg(errp, "Parameter '%s' expects a size in bytes, optionally "
                   "with a suffix k, M, G or T (4096, 64k, 1G), got '%s'",
                   name, str);
        return false;
    }
    if (too_big || v > INT64_MAX / mult) {
        error_setg(errp, "Parameter '%s' is too large: '%s' (at most %"
                   PRId64 " bytes)", name, str, INT64_MAX);
        return false;
    }
    *out = v * mult;
    return true;
}

bool opts_get_size(Opts *opts, const char *key, uint64_t def, uint64_t *out,
                   Error **errp)
{
    JsonNode *node = opts_lookup(opts, key, true);
    g_autofree char *name = NULL;

    if (!node) {
        *out = def;
        return true;
    }
    name = g_strconcat(opts->prefix, key, NULL);
    if (opts_node_is(node, G_TYPE_INT64) && json_node_get_int(node) >= 0) {
        *out = json_node_get_int(node);
        return true;
    }
    if (!opts_node_is(node, G_TYPE_STRING)) {
        opts_type_error(opts, key, node, "a size in bytes (an integer of 0 "
                        "or more, or a string like '64k')", errp);
        return false;
    }
    return opts_parse_size(name, json_node_get_string(node), out, errp);
}

bool opts_get_enum(Opts *opts, const char *key, const char *const *choices,
                   int def, int *out, Error **errp)
{
    JsonNode *node = opts_lookup(opts, key, true);
    g_autoptr(GString) expected = g_string_new("one of ");

    if (!node) {
        *out = def;
        return true;
    }
    if (opts_node_is(node, G_TYPE_STRING)) {
        const char *value = json_node_get_string(node);

        for (int i = 0; choices[i]; i++) {
            if (!strcmp(value, choices[i])) {
                *out = i;
                return true;
            }
        }
    }
    for (int i = 0; choices[i]; i++) {
        g_string_append_printf(expected, "%s'%s'", i ? ", " : "", choices[i]);
    }
    opts_type_error(opts, key, node, expected->str, errp);
    return false;
}

/* ------------------------------------------------------------------------ */
/* Children and lists                                                        */

Opts *opts_get_child(Opts *opts, const char *key)
{
    JsonNode *node = opts_lookup(opts, key, false);
    g_autofree char *prefix = NULL;

    if (!node || !JSON_NODE_HOLDS_OBJECT(node)) {
        return NULL;
    }
    opts_lookup(opts, key, true);
    prefix = g_strconcat(opts->prefix, key, ".", NULL);
    return opts_new(json_node_get_object(node), prefix);
}

/*
 * Element i of the list at key: a node that must hold an object, or, with
 * implied_key, a string that stands for {implied_key: string}.
 */
static Opts *opts_list_element(Opts *opts, const char *key, guint i,
                               JsonNode *elem, const char *implied_key,
                               Error **errp)
{
    g_autofree char *name = g_strdup_printf("%s.%u", key, i);
    g_autofree char *prefix = NULL;

    prefix = g_strconcat(opts->prefix, name, ".", NULL);
    if (implied_key && opts_node_is(elem, G_TYPE_STRING)) {
        g_autoptr(JsonObject) obj = json_object_new();

        json_object_set_member(obj, implied_key, json_node_copy(elem));
        return opts_new(obj, prefix);
    }
    if (!JSON_NODE_HOLDS_OBJECT(elem)) {
        opts_type_error(opts, name, elem, implied_key
                        ? "an object or a string (a list element)"
                        : "an object (a list element)", errp);
        return NULL;
    }
    return opts_new(json_node_get_object(elem), prefix);
}

static GPtrArray *opts_list_from_array(Opts *opts, const char *key,
                                       JsonArray *array,
                                       const char *implied_key, Error **errp)
{
    guint n = json_array_get_length(array);
    g_autoptr(GPtrArray) list = g_ptr_array_new_full(n, (GDestroyNotify)
                                                     opts_free);

    for (guint i = 0; i < n; i++) {
        Opts *elem = opts_list_element(opts, key, i,
                                       json_array_get_element(array, i),
                                       implied_key, errp);
        if (!elem) {
            return NULL;
        }
        g_ptr_array_add(list, elem);
    }
    return g_steal_pointer(&list);
}

/* A list index as written: "0", "1", ... (no sign, no leading zero). */
static bool opts_list_index(const char *name, guint n, guint *out)
{
    guint64 v = 0;

    if (!g_ascii_isdigit(name[0]) || (name[0] == '0' && name[1])) {
        return false;
    }
    for (const char *p = name; *p; p++) {
        if (!g_ascii_isdigit(*p)) {
            return false;
        }
        v = v * 10 + g_ascii_digit_value(*p);
        if (v > G_MAXUINT) {
            v = G_MAXUINT;      /* certainly beyond n: reported as a gap */
        }
    }
    *out = v < n ? (guint)v : n;
    return true;
}

/*
 * An object whose members are "0" .. "n-1" in any order (key=value form:
 * "list.1.x=...,list.0.x=...").  Checked: every name is an index (in
 * insertion order, so the first bad one is reported), then no gap.
 */
static GPtrArray *opts_list_from_object(Opts *opts, const char *key,
                                        JsonObject *obj,
                                        const char *implied_key,
                                        Error **errp)
{
    guint n = json_object_get_size(obj);
    g_autofree JsonNode **slots = g_new0(JsonNode *, n + 1);
    g_autoptr(GPtrArray) list = g_ptr_array_new_full(n, (GDestroyNotify)
                                                     opts_free);
    JsonObjectIter iter;
    const char *name;
    JsonNode *node;

    json_object_iter_init_ordered(&iter, obj);
    while (json_object_iter_next_ordered(&iter, &name, &node)) {
        guint i;

        if (!opts_list_index(name, n, &i)) {
            error_setg(errp, "Parameter '%s%s.%s' is not a list index: "
                       "elements of '%s%s' are numbered %s%s.0, %s%s.1, ...",
                       opts->prefix, key, name, opts->prefix, key,
                       opts->prefix, key, opts->prefix, key);
            return NULL;
        }
        slots[i] = node;        /* slots[n] catches any index >= n */
    }
    for (guint i = 0; i < n; i++) {
        Opts *elem;

        if (!slots[i]) {
            error_setg(errp, "List '%s%s' has no element %u: elements must "
                       "be numbered from 0 without gaps", opts->prefix, key,
                       i);
            return NULL;
        }
        elem = opts_list_element(opts, key, i, slots[i], implied_key, errp);
        if (!elem) {
            return NULL;
        }
        g_ptr_array_add(list, elem);
    }
    return g_steal_pointer(&list);
}

GPtrArray *opts_get_list_implied(Opts *opts, const char *key,
                                 const char *implied_key, Error **errp)
{
    JsonNode *node = opts_lookup(opts, key, true);

    if (!node) {
        return g_ptr_array_new_with_free_func((GDestroyNotify)opts_free);
    }
    if (JSON_NODE_HOLDS_ARRAY(node)) {
        return opts_list_from_array(opts, key, json_node_get_array(node),
                                    implied_key, errp);
    }
    if (JSON_NODE_HOLDS_OBJECT(node)) {
        return opts_list_from_object(opts, key, json_node_get_object(node),
                                     implied_key, errp);
    }
    opts_type_error(opts, key, node, implied_key
                    ? "a list of objects or strings" : "a list of objects",
                    errp);
    return NULL;
}

GPtrArray *opts_get_list(Opts *opts, const char *key, Error **errp)
{
    return opts_get_list_implied(opts, key, NULL, errp);
}

/* ------------------------------------------------------------------------ */
/* Unused keys                                                               */

/*
 * The dotted path (from opts' object, starting with path) of the first
 * member of obj, in insertion order, that no getter accounts for; NULL if
 * there is none.
 */
static char *opts_find_unused(Opts *opts, JsonObject *obj, const char *path)
{
    JsonObjectIter iter;
    const char *name;
    JsonNode *node;

    json_object_iter_init_ordered(&iter, obj);
    while (json_object_iter_next_ordered(&iter, &name, &node)) {
        g_autofree char *full = g_strconcat(path, name, NULL);
        int mark = opts_mark_of(opts, node);
        JsonObject *child;

        if (mark == OPTS_USED) {
            continue;
        }
        if (!JSON_NODE_HOLDS_OBJECT(node)) {
            return g_steal_pointer(&full);
        }
        child = json_node_get_object(node);
        if (json_object_get_size(child) == 0) {
            if (mark == OPTS_VISITED) {
                continue;
            }
            return g_steal_pointer(&full);
        } else {
            g_autofree char *child_path = g_strconcat(full, ".", NULL);
            char *found = opts_find_unused(opts, child, child_path);

            if (found) {
                return found;
            }
        }
    }
    return NULL;
}

bool opts_check_unused(Opts *opts, const char *what, Error **errp)
{
    g_autofree char *key = opts_find_unused(opts, opts->obj, "");

    if (!key) {
        return true;
    }
    error_setg(errp, "%s%sInvalid parameter '%s%s'", what ? what : "",
               what ? ": " : "", opts->prefix, key);
    return false;
}
