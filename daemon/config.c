/*
 * spindle --config FILE.
 *
 * Theory of operation: the file is one JSON object whose keys are the
 * long options that build the daemon's state, each holding an array of
 * that option's arguments:
 *
 *   {"object": [...], "blockdev": [...], "chardev": [...],
 *    "monitor": [...], "export": [...]}
 *
 * Parsing turns each entry back into the text the command line option
 * would have had (an object into its JSON text, which every one of these
 * options accepts; a string as it is), so that an entry goes through
 * exactly the code that the same option on the command line does, and
 * says the same things when it is wrong.  The daemon (main.c) puts the
 * entries where --config stood on its command line, in a fixed order
 * that lets each kind use the ones before it (an export its node and
 * IOThread, a monitor its chardev), whatever order the file's keys come
 * in.  This file only checks the shape; nothing is created here.
 */
#include <string.h>
#include <json-glib/json-glib.h>

#include "daemon/config.h"

/* The keys, in the order their entries are processed. */
static const char *const daemon_config_keys[] = {
    "object", "blockdev", "chardev", "monitor", "export",
};

void daemon_config_entry_free(gpointer p)
{
    DaemonConfigEntry *e = p;

    if (!e) {
        return;                  /* stolen by daemon_config_parse() */
    }
    g_free(e->label);
    g_free(e->arg);
    g_free(e);
}

/* The entry's text for its option; NULL if it is neither kind. */
static char *daemon_config_entry_text(JsonNode *node)
{
    if (JSON_NODE_HOLDS_OBJECT(node)) {
        return json_to_string(node, FALSE);
    }
    if (JSON_NODE_HOLDS_VALUE(node) &&
        json_node_get_value_type(node) == G_TYPE_STRING) {
        return g_strdup(json_node_get_string(node));
    }
    return NULL;
}

/* What node is, for messages: "an array", "a number", ... */
static const char *daemon_config_node_kind(JsonNode *node)
{
    GType t;

    switch (JSON_NODE_TYPE(node)) {
    case JSON_NODE_OBJECT:
        return "an object";
    case JSON_NODE_ARRAY:
        return "an array";
    case JSON_NODE_NULL:
        return "null";
    case JSON_NODE_VALUE:
        break;
    }
    t = json_node_get_value_type(node);
    if (t == G_TYPE_STRING) {
        return "a string";
    }
    return t == G_TYPE_BOOLEAN ? "a boolean" : "a number";
}

static bool daemon_config_check_keys(const char *path, JsonObject *root,
                                     Error **errp)
{
    g_autoptr(GList) members = json_object_get_members(root);

    for (GList *m = members; m; m = m->next) {
        const char *key = m->data;
        bool known = false;
        JsonNode *value;

        for (size_t i = 0; i < G_N_ELEMENTS(daemon_config_keys); i++) {
            known |= !strcmp(key, daemon_config_keys[i]);
        }
        if (!known) {
            error_setg(errp, "%s: unknown key '%s' (the keys are object, "
                       "blockdev, chardev, monitor and export)", path, key);
            return false;
        }
        value = json_object_get_member(root, key);
        if (!JSON_NODE_HOLDS_ARRAY(value)) {
            error_setg(errp, "%s: key '%s' must hold an array of %s "
                       "options, got %s", path, key, key,
                       daemon_config_node_kind(value));
            return false;
        }
    }
    return true;
}

bool daemon_config_parse(const char *path, const char *text, GPtrArray *out,
                         Error **errp)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GPtrArray) entries =
        g_ptr_array_new_with_free_func(daemon_config_entry_free);
    GError *gerr = NULL;
    JsonNode *root;

    if (!json_parser_load_from_data(parser, text, -1, &gerr)) {
        error_setg(errp, "%s: invalid JSON: %s", path, gerr->message);
        g_error_free(gerr);
        return false;
    }
    root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
        error_setg(errp, "%s: expected a JSON object ({\"blockdev\": [...], "
                   "\"export\": [...], ...})", path);
        return false;
    }
    if (!daemon_config_check_keys(path, json_node_get_object(root), errp)) {
        return false;
    }
    for (size_t k = 0; k < G_N_ELEMENTS(daemon_config_keys); k++) {
        const char *key = daemon_config_keys[k];
        JsonObject *obj = json_node_get_object(root);
        JsonArray *arr;

        if (!json_object_has_member(obj, key)) {
            continue;
        }
        arr = json_object_get_array_member(obj, key);
        for (guint i = 0; i < json_array_get_length(arr); i++) {
            JsonNode *node = json_array_get_element(arr, i);
            DaemonConfigEntry *e = g_new0(DaemonConfigEntry, 1);

            e->key = key;
            e->label = g_strdup_printf("%s: %s[%u]", path, key, i);
            e->arg = daemon_config_entry_text(node);
            g_ptr_array_add(entries, e);
            if (!e->arg) {
                error_setg(errp, "%s: must be a JSON object (the option's "
                           "JSON form) or a string (its key=value form), "
                           "got %s", e->label, daemon_config_node_kind(node));
                return false;
            }
        }
    }
    for (guint i = 0; i < entries->len; i++) {
        g_ptr_array_add(out, g_steal_pointer(&entries->pdata[i]));
    }
    g_ptr_array_set_size(entries, 0);
    return true;
}

bool daemon_config_load(const char *path, GPtrArray *out, Error **errp)
{
    g_autofree char *text = NULL;
    GError *gerr = NULL;

    if (!g_file_get_contents(path, &text, NULL, &gerr)) {
        error_setg(errp, "%s: cannot read it: %s", path, gerr->message);
        g_error_free(gerr);
        return false;
    }
    return daemon_config_parse(path, text, out, errp);
}
