/*
 * key=value option strings.  The string is split at single commas (a
 * doubled comma stands for a literal one), each element at its first '='.
 * The result keeps the user's order so errors can be reported in the order
 * the options were written.
 */
#include <string.h>
#include "util/keyval.h"

void keyval_pair_free(gpointer p)
{
    KeyvalPair *kv = p;

    g_free(kv->key);
    g_free(kv->value);
    g_free(kv);
}

void keyval_append(GPtrArray *opts, const char *key, char *value)
{
    KeyvalPair *kv = g_new(KeyvalPair, 1);

    kv->key = g_strdup(key);
    kv->value = value;
    g_ptr_array_add(opts, kv);
}

char *keyval_next_element(const char **pos)
{
    GString *out = g_string_new(NULL);
    const char *p = *pos;

    while (*p) {
        if (*p == ',') {
            if (p[1] == ',') {
                g_string_append_c(out, ',');
                p += 2;
                continue;
            }
            p++;
            break;
        }
        g_string_append_c(out, *p++);
    }
    *pos = p;
    return g_string_free(out, FALSE);
}

const char *keyval_lookup(GPtrArray *opts, const char *key)
{
    for (guint i = 0; i < opts->len; i++) {
        KeyvalPair *kv = g_ptr_array_index(opts, i);

        if (!strcmp(kv->key, key)) {
            return kv->value;
        }
    }
    return NULL;
}

GPtrArray *keyval_parse(const char *str, const char *implied_key, Error **errp)
{
    g_autoptr(GPtrArray) opts = g_ptr_array_new_with_free_func(keyval_pair_free);
    const char *pos = str;
    bool first = true;

    if (!str || !*str) {
        return g_steal_pointer(&opts);
    }
    while (*pos || first) {
        g_autofree char *elem = keyval_next_element(&pos);
        char *eq = strchr(elem, '=');
        KeyvalPair *kv;

        if (!eq && first && implied_key && *elem) {
            kv = g_new0(KeyvalPair, 1);
            kv->key = g_strdup(implied_key);
            kv->value = g_steal_pointer(&elem);
        } else if (!eq) {
            error_setg(errp, "Expected key=value, got '%s' in '%s'", elem, str);
            return NULL;
        } else if (eq == elem) {
            error_setg(errp, "Empty key in '%s'", str);
            return NULL;
        } else {
            *eq = '\0';
            kv = g_new0(KeyvalPair, 1);
            kv->key = g_strdup(elem);
            kv->value = g_strdup(eq + 1);
        }
        first = false;
        if (keyval_lookup(opts, kv->key)) {
            error_setg(errp, "Parameter '%s' given twice in '%s'", kv->key, str);
            keyval_pair_free(kv);
            return NULL;
        }
        g_ptr_array_add(opts, kv);
    }
    return g_steal_pointer(&opts);
}
