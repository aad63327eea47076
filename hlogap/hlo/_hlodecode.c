/* A serialized HloProto / HloModuleProto -> hlogap's IR objects, straight from its bytes.

   hlogap/hlo/decode.py builds the IR from upb's messages, reading every field of every
   instruction through a Python object: ~16 us an instruction, 28x upb's own parse. Here the
   wire format (https://protobuf.dev/programming-guides/encoding/; the field numbers are
   hlogap/proto/hlo.proto's) is walked in place and each object is made directly: an
   Instruction's or a Computation's slots written (both are slots dataclasses), a frozen
   dataclass's fields set as its __init__ sets them. Shapes, metadata, literals and opcodes are
   made once per distinct serialized bytes (`Cache`), as decode.py caches shapes and metadata;
   what is rare or long to write (a sharding, frontend attributes, a backend config re-
   serialized, replica groups, an escaped custom-call target; a shape, metadata or literal
   outside the usual cases) is asked of decode.py's own functions (`hooks`), once per distinct
   bytes, each part parsed by upb where it sits in the whole message.

   Python's decoder stays the reference. An instruction carrying a field or an opcode whose
   attributes are not written here (a window, dot or convolution numbers, gather, scatter,
   sort, fft, rng, ...) is handed to it whole (`hooks.instruction`, its bytes parsed by upb);
   that is slower, never different. Anything else this decoder does not answer for (malformed
   bytes, a message field given twice, an unknown id, a wire type that does not match the
   schema, a group, invalid UTF-8) raises ValueError: the caller then decodes the module with
   upb and Python, which says what is wrong as it always did. Every read is checked against
   the end of the buffer it belongs to.

   The objects made here are not tracked by the cyclic garbage collector: by the IR's types
   none can be part of a reference cycle (instructions hold names, shapes and text; frozen
   objects hold ints, strs and tuples), and a module's 10^4-10^5 of them cost the collector's
   passes a third of the decode. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#include "../_protowire.h"

/* ---- the wire format ---- */

typedef struct {
    const uint8_t *p, *end;
} Span;

static int read_len(const uint8_t **p, const uint8_t *end, Span *body) {
    return read_payload(p, end, &body->p, &body->end);
}

/* A field's tag: its number and wire type; 0 for a number outside 1..2^29-1. */
static int read_tag(const uint8_t **p, const uint8_t *end, uint64_t *field, int *wire) {
    uint64_t tag;
    if (!read_varint(p, end, &tag)) return 0;
    *field = tag >> 3;
    *wire = (int)(tag & 7);
    return *field != 0 && *field < (1u << 29);
}

static int append_bytes(PyObject *list, const uint8_t *p, const uint8_t *end) {
    PyObject *raw = PyBytes_FromStringAndSize((const char *)p, end - p);
    if (raw == NULL) return 0;
    int failed = PyList_Append(list, raw);
    Py_DECREF(raw);
    return failed == 0;
}

static int unhandled(const char *why) {
    PyErr_SetString(PyExc_ValueError, why);
    return 0;
}

/* Valid UTF-8, as upb checks a proto3 string. */
static int valid_utf8(Span s) {
    const uint8_t *q = s.p;
    while (q < s.end && *q < 0x80) q++;
    if (q == s.end) return 1;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s.p, s.end - s.p, NULL);
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(text);
    return 1;
}

static PyObject *text_of(Span s) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s.p, s.end - s.p, NULL);
    if (text == NULL) {
        PyErr_Clear();
        unhandled("invalid UTF-8 in a string field");
    }
    return text;
}


/* An integer's decimal text (what str() of it gives). */
static PyObject *int_text(long long value) {
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%lld", value);
    return PyUnicode_FromStringAndSize(digits, n);
}

static PyObject *percent; /* "%", set up once */

/* `%name` */
static PyObject *percent_name(PyObject *name) { return PyUnicode_Concat(percent, name); }

/* ---- growable arrays ---- */

/* `items` (an array of *cap items of `size` bytes) with room for twice as many (`first` when
   empty): the new array and *cap updated; NULL with MemoryError set when memory runs out
   (`items` and *cap kept). */
static void *doubled(void *items, Py_ssize_t *cap, size_t size, Py_ssize_t first) {
    Py_ssize_t want = *cap ? 2 * *cap : first;
    void *grown = PyMem_Realloc(items, (size_t)want * size);
    if (grown == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *cap = want;
    return grown;
}

/* Growable int64 lists: a repeated field may come in several packed or single parts. */

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Vec;

static int vec_push(Vec *vec, int64_t value) {
    if (vec->n == vec->cap) {
        int64_t *grown = doubled(vec->v, &vec->cap, sizeof *grown, 16);
        if (grown == NULL) return 0;
        vec->v = grown;
    }
    vec->v[vec->n++] = value;
    return 1;
}

/* One part of a repeated varint field: 1, 0 (malformed), -1 (a wire type it cannot have). */
static int read_repeated(Vec *vec, int wire, const uint8_t **p, const uint8_t *end) {
    uint64_t v;
    if (wire == WIRE_VARINT) {
        if (!read_varint(p, end, &v)) return 0;
        return vec_push(vec, (int64_t)v) ? 1 : 0;
    }
    if (wire != WIRE_LEN) return -1;
    Span body;
    if (!read_len(p, end, &body)) return 0;
    while (body.p < body.end) {
        if (!read_varint(&body.p, body.end, &v) || !vec_push(vec, (int64_t)v)) return 0;
    }
    return 1;
}

/* ---- a cache of what Python made of a sub-message, by its bytes ---- */

typedef struct {
    uint64_t hash;
    const uint8_t *p;
    Py_ssize_t n;
    PyObject *value; /* NULL: empty slot */
} Slot;

/* Made in C where it can be (a new reference; NULL without an error: ask Python). */
typedef PyObject *(*Builder)(void *context, Span s, int depth);

typedef struct {
    Slot *slots;
    Py_ssize_t cap, used;
    Builder build;  /* or NULL */
    PyObject *make; /* hooks.NAME: bytes -> the value; NULL: `build` always answers */
    Slot last;      /* the last one asked for: neighbouring instructions often repeat it */
} Cache;

static uint64_t hash_bytes(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15u ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDu;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53u;
    return h ^ (h >> 29);
}

static void cache_free(Cache *c) {
    for (Py_ssize_t i = 0; i < c->cap; i++) Py_XDECREF(c->slots[i].value);
    PyMem_Free(c->slots);
    Py_XDECREF(c->make);
    memset(c, 0, sizeof *c);
}

static int cache_grow(Cache *c) {
    Py_ssize_t cap = c->cap ? 2 * c->cap : 64;
    Slot *slots = PyMem_Calloc((size_t)cap, sizeof *slots);
    if (slots == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    for (Py_ssize_t i = 0; i < c->cap; i++) {
        Slot s = c->slots[i];
        if (s.value == NULL) continue;
        Py_ssize_t k = (Py_ssize_t)(s.hash & (uint64_t)(cap - 1));
        while (slots[k].value != NULL) k = (k + 1) & (cap - 1);
        slots[k] = s;
    }
    PyMem_Free(c->slots);
    c->slots = slots;
    c->cap = cap;
    return 1;
}

/* The value for these bytes (borrowed: the cache holds it), made once. */
static PyObject *cached(Cache *c, void *context, Span s) {
    Py_ssize_t n = s.end - s.p;
    if (c->last.value != NULL && c->last.n == n && memcmp(c->last.p, s.p, (size_t)n) == 0)
        return c->last.value;
    uint64_t h = hash_bytes(s.p, n);
    if (2 * (c->used + 1) > c->cap && !cache_grow(c)) return NULL;
    Py_ssize_t k = (Py_ssize_t)(h & (uint64_t)(c->cap - 1));
    for (;; k = (k + 1) & (c->cap - 1)) {
        Slot *slot = &c->slots[k];
        if (slot->value == NULL) break;
        if (slot->hash == h && slot->n == n && memcmp(slot->p, s.p, (size_t)n) == 0) {
            c->last = *slot;
            return slot->value;
        }
    }
    PyObject *value = c->build != NULL ? c->build(context, s, 0) : NULL;
    if (value == NULL) {
        if (PyErr_Occurred()) return NULL;
        if (c->make == NULL) return unhandled("no maker"), NULL;
        PyObject *raw = PyBytes_FromStringAndSize((const char *)s.p, n);
        if (raw == NULL) return NULL;
        value = PyObject_CallOneArg(c->make, raw);
        Py_DECREF(raw);
        if (value == NULL) return NULL;
    }
    c->slots[k] = (Slot){h, s.p, n, value};
    c->used++;
    c->last = c->slots[k];
    return value;
}

/* ---- the IR classes' slots (set up once by `setup`) ---- */

enum {
    I_NAME, I_OPCODE, I_SHAPE, I_OPERANDS, I_OPERAND_SHAPES, I_IS_ROOT, I_CALLED, I_DOT_DIMS,
    I_CONV_DIMS, I_WINDOW, I_FEATURE_GROUP_COUNT, I_BATCH_GROUP_COUNT, I_DIMENSIONS, I_SLICE,
    I_REPLICA_GROUPS, I_CHANNEL_ID, I_FUSION_KIND, I_CUSTOM_CALL_TARGET, I_BACKEND_CONFIG,
    I_OP_NAME, I_SOURCE, I_PARAMETER_NUMBER, I_TUPLE_INDEX, I_LITERAL, I_ATTRS, I_COUNT
};
static const char *const instruction_fields[I_COUNT] = {
    "name", "opcode", "shape", "operands", "operand_shapes", "is_root", "called", "dot_dims",
    "conv_dims", "window", "feature_group_count", "batch_group_count", "dimensions", "slice",
    "replica_groups", "channel_id", "fusion_kind", "custom_call_target", "backend_config",
    "op_name", "source", "parameter_number", "tuple_index", "literal", "attrs",
};
enum { C_NAME, C_INSTRUCTIONS, C_IS_ENTRY, C_EXECUTION_THREAD, C_COUNT };
static const char *const computation_fields[C_COUNT] = {
    "name", "instructions", "is_entry", "execution_thread",
};

typedef struct {
    PyTypeObject *type;
    Py_ssize_t count;
    Py_ssize_t offsets[I_COUNT];
    PyObject *defaults[I_COUNT]; /* NULL: a fresh list or dict each time */
} Layout;

static Layout instruction_layout, computation_layout;

/* Attribute names and fixed values, made once. */
enum {
    K_INDEX, K_KIND, K_IOTA_DIMENSION, K_DIRECTION, K_TYPE, K_CHANNEL_ID, K_DIMENSIONS,
    K_USE_GLOBAL_DEVICE_IDS, K_FEATURE_GROUP_COUNT, K_BATCH_GROUP_COUNT, K_SLICE,
    K_DYNAMIC_SLICE_SIZES, K_OPERAND_PRECISION, K_CUSTOM_CALL_TARGET,
    K_CUSTOM_CALL_HAS_SIDE_EFFECT, K_API_VERSION, K_SHARDING, K_CONDITION, K_BODY, K_TO_APPLY,
    K_CALLED_COMPUTATIONS, K_CALLS, K_FRONTEND_ATTRIBUTES, K_CONTROL_PREDECESSORS, K_METADATA,
    K_BACKEND_CONFIG, K_REPLICA_GROUPS, K_PADDING, K_LHS_BATCH_DIMS, K_LHS_CONTRACTING_DIMS,
    K_RHS_BATCH_DIMS, K_RHS_CONTRACTING_DIMS, V_TRUE, V_FLOAT, V_SIGNED, V_UNSIGNED, V_API_2, V_API_3, V_API_4,
    S_COUNT
};
static const char *const string_values[S_COUNT] = {
    "index", "kind", "iota_dimension", "direction", "type", "channel_id", "dimensions",
    "use_global_device_ids", "feature_group_count", "batch_group_count", "slice",
    "dynamic_slice_sizes", "operand_precision", "custom_call_target",
    "custom_call_has_side_effect", "api_version", "sharding", "condition", "body", "to_apply",
    "called_computations", "calls", "frontend_attributes", "control-predecessors", "metadata",
    "backend_config", "replica_groups", "padding", "lhs_batch_dims", "lhs_contracting_dims",
    "rhs_batch_dims", "rhs_contracting_dims", "true", "FLOAT", "SIGNED", "UNSIGNED", "API_VERSION_STATUS_RETURNING",
    "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI",
};
static PyObject *strings[S_COUNT];
static PyObject *empty_tuple;

/* A new object of a slots dataclass, its slots set from `values` (references stolen). */
static PyObject *make_object(const Layout *layout, PyObject **values) {
    PyObject *obj = layout->type->tp_alloc(layout->type, 0);
    if (obj == NULL) {
        for (Py_ssize_t i = 0; i < layout->count; i++) Py_XDECREF(values[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < layout->count; i++)
        *(PyObject **)((char *)obj + layout->offsets[i]) = values[i];
    return obj;
}

/* Frozen dataclasses (Shape, Layout, SliceDim): their fields, in order, set as their
   generated __init__ sets them (object.__setattr__), without the call into Python. */
typedef struct {
    PyObject *type;
    PyObject *names[8];
    Py_ssize_t count;
} Frozen;

static Frozen shape_class, layout_class, slice_dim_class, file_location_class, stack_frame_class,
    stack_frame_index_class, dot_dims_class;

static PyObject *make_frozen(const Frozen *frozen, PyObject *const *values) {
    PyTypeObject *type = (PyTypeObject *)frozen->type;
    PyObject *obj = type->tp_new(type, empty_tuple, NULL);
    if (obj == NULL) return NULL;
    for (Py_ssize_t i = 0; i < frozen->count; i++) {
        if (PyObject_GenericSetAttr(obj, frozen->names[i], values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    /* Frozen, its fields ints, strs and tuples of them or of other such objects: it can be
       part of no reference cycle, and the collector need not pass over it. */
    PyObject_GC_UnTrack(obj);
    return obj;
}

/* (type, field names) from setup: the names as `dataclasses.fields` lists them. */
static int set_frozen(Frozen *frozen, PyObject *spec, Py_ssize_t count) {
    PyObject *type, *names;
    if (!PyArg_ParseTuple(spec, "OO!", &type, &PyTuple_Type, &names)) return 0;
    if (!PyType_Check(type) || PyTuple_GET_SIZE(names) != count)
        return unhandled("setup: a frozen IR class's fields changed");
    frozen->type = Py_NewRef(type);
    frozen->count = count;
    for (Py_ssize_t i = 0; i < count; i++) {
        frozen->names[i] = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(frozen->names[i])) return unhandled("setup: field names");
        Py_INCREF(frozen->names[i]);
        PyUnicode_InternInPlace(&frozen->names[i]);
    }
    return 1;
}

/* A slots dataclass whose fields (`fields`, as dataclasses.fields lists them) are `names`,
   each set here (or from `defaults` where it has one). */
static int set_layout(Layout *layout, PyObject *type, PyObject *fields, PyObject *defaults,
                      const char *const *names, Py_ssize_t count) {
    if (!PyType_Check(type) || !PyTuple_Check(fields) || !PyDict_Check(defaults))
        return unhandled("setup wants the IR classes, their fields and their defaults");
    if (PyTuple_GET_SIZE(fields) != count)
        return unhandled("setup: an IR class's fields changed");
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, names[i]) != 0)
            return unhandled("setup: an IR class's fields changed");
    }
    layout->type = (PyTypeObject *)type;
    Py_INCREF(type);
    layout->count = count;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *descr = PyObject_GetAttrString(type, names[i]);
        if (descr == NULL) return 0;
        int is_slot = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                      ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (is_slot) layout->offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!is_slot) return unhandled("an IR class field is not a slot");
        PyObject *value = PyDict_GetItemString(defaults, names[i]);
        Py_XINCREF(value);
        layout->defaults[i] = value;
    }
    return 1;
}


static inline int len_field(int wire, const uint8_t **p, const uint8_t *end, Span *out,
                            uint64_t *seen, uint64_t field) {
    /* A field given twice: a message merges, a string's last wins; upb decides both. */
    uint64_t bit = 1ull << (field & 63);
    if (wire != WIRE_LEN || (*seen & bit)) return -1;
    *seen |= bit;
    return read_len(p, end, out) ? 1 : 0;
}

/* ---- shapes and metadata, made here in the usual case ---- */

static PyObject *element_names; /* decode.py's _ELEMENT_NAMES: PrimitiveType -> name */
#define UNBOUNDED INT64_MIN /* xla::Shape::kUnboundedSize, a `?` dimension */

static PyObject *tuple_of_ints(const int64_t *v, Py_ssize_t n) {
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    PyObject_GC_UnTrack(out); /* ints: CPython's collector would untrack it itself */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLongLong(v[i]);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

static void vec_free(Vec *vec) { PyMem_Free(vec->v); }

/* A LayoutProto with only minor_to_major, tiles, memory space, element size and tail padding
   (anything else: NULL, Python's `_layout`). `*is_default`: Layout() with no dims. */
static PyObject *build_layout(Span s, Py_ssize_t rank, int *is_default) {
    Vec order = {0}, tiles = {0}, tile_ends = {0};
    int64_t memory_space = 0, element_bits = 0, tail_padding = 0;
    PyObject *layout = NULL, *tile_tuple = NULL, *order_tuple = NULL;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field, v;
        int wire, ok = 0;
        if (!read_tag(&p, s.end, &field, &wire)) goto out;
        switch (field) {
        case 1:
            ok = read_repeated(&order, wire, &p, s.end) == 1;
            break;
        case 6: {
            Span tile;
            if (wire != WIRE_LEN || !read_len(&p, s.end, &tile)) goto out;
            ok = 1;
            while (ok && tile.p < tile.end) {
                uint64_t f2;
                int w2;
                if (!read_tag(&tile.p, tile.end, &f2, &w2)) ok = 0;
                else if (f2 == 1) ok = read_repeated(&tiles, w2, &tile.p, tile.end) == 1;
                else ok = skip_wire_value(w2, &tile.p, tile.end);
            }
            ok = ok && vec_push(&tile_ends, tiles.n);
            break;
        }
        case 7: case 8: case 16:
            ok = wire == WIRE_VARINT && read_varint(&p, s.end, &v);
            if (ok && field == 7) element_bits = (int64_t)v;
            if (ok && field == 8) memory_space = (int64_t)v;
            if (ok && field == 16) tail_padding = (int64_t)v;
            break;
        case 9: case 10: case 11: case 12: case 15: case 17: /* the extra items */
            break;
        default:
            ok = skip_wire_value(wire, &p, s.end);
            break;
        }
        if (!ok) goto out;
    }
    /* minor_to_major must be a permutation of the dims (else Python says so). */
    if (order.n != rank) goto out;
    for (Py_ssize_t i = 0; i < order.n; i++) {
        if (order.v[i] < 0 || order.v[i] >= rank) goto out;
        for (Py_ssize_t k = 0; k < i; k++)
            if (order.v[k] == order.v[i]) goto out;
    }
    for (Py_ssize_t i = 0; i < tiles.n; i++)
        if (tiles.v[i] < 1 && tiles.v[i] != -1) goto out;
    if (tail_padding == 0) tail_padding = 1;
    *is_default = rank == 0 && tile_ends.n == 0 && memory_space == 0 && element_bits == 0 &&
                  tail_padding == 1;
    if (*is_default) {
        layout = Py_NewRef(Py_None);
        goto out;
    }
    order_tuple = tuple_of_ints(order.v, order.n);
    tile_tuple = PyTuple_New(tile_ends.n);
    if (order_tuple == NULL || tile_tuple == NULL) goto out;
    for (Py_ssize_t i = 0, from = 0; i < tile_ends.n; from = tile_ends.v[i++]) {
        PyObject *tile = tuple_of_ints(tiles.v + from, tile_ends.v[i] - from);
        if (tile == NULL) goto out;
        PyTuple_SET_ITEM(tile_tuple, i, tile);
    }
    PyObject *numbers[3] = {PyLong_FromLongLong(memory_space), PyLong_FromLongLong(element_bits),
                            PyLong_FromLongLong(tail_padding)};
    if (numbers[0] != NULL && numbers[1] != NULL && numbers[2] != NULL) {
        PyObject *fields[6] = {order_tuple, tile_tuple, numbers[0], empty_tuple, numbers[1],
                               numbers[2]};
        layout = make_frozen(&layout_class, fields);
    }
    for (int k = 0; k < 3; k++) Py_XDECREF(numbers[k]);
out:
    Py_XDECREF(order_tuple);
    Py_XDECREF(tile_tuple);
    vec_free(&order);
    vec_free(&tiles);
    vec_free(&tile_ends);
    return layout;
}

/* decode.py's `_shape` of a ShapeProto, or NULL (no error) for Python to make it. */
static PyObject *build_shape(void *context, Span s, int depth) {
    (void)context;
    if (depth > 64) return NULL;
    Vec dims = {0}, dynamic = {0}, tuple_spans = {0};
    Span layout_span = {NULL, NULL};
    int64_t element = 0;
    PyObject *shape = NULL, *name = NULL, *dims_tuple = NULL, *dynamic_tuple = NULL,
             *layout = NULL, *children = NULL;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field, v;
        int wire, ok = 0;
        if (!read_tag(&p, s.end, &field, &wire)) goto out;
        switch (field) {
        case 2:
            ok = wire == WIRE_VARINT && read_varint(&p, s.end, &v);
            if (ok) element = (int32_t)(uint32_t)v; /* an int32 enum */
            break;
        case 3: ok = read_repeated(&dims, wire, &p, s.end) == 1; break;
        case 6: ok = read_repeated(&dynamic, wire, &p, s.end) == 1; break;
        case 4: {
            Span child;
            ok = wire == WIRE_LEN && read_len(&p, s.end, &child) &&
                 vec_push(&tuple_spans, child.p - s.p) && vec_push(&tuple_spans, child.end - s.p);
            break;
        }
        case 5:
            ok = wire == WIRE_LEN && layout_span.p == NULL && read_len(&p, s.end, &layout_span);
            break;
        default: ok = skip_wire_value(wire, &p, s.end); break;
        }
        if (!ok) goto out;
    }
    PyObject *key = PyLong_FromLongLong(element);
    if (key == NULL) goto out;
    name = PyDict_GetItemWithError(element_names, key);
    Py_DECREF(key);
    if (name == NULL) goto out;
    Py_INCREF(name);
    int is_tuple = PyUnicode_CompareWithASCIIString(name, "tuple") == 0;
    /* A layout decode.py ignores is still upb's to check. */
    if (layout_span.p != NULL && (is_tuple || PyUnicode_CompareWithASCIIString(name, "token") == 0 ||
                                  PyUnicode_CompareWithASCIIString(name, "opaque") == 0))
        goto out;
    if (is_tuple) {
        Py_ssize_t n = tuple_spans.n / 2;
        children = PyTuple_New(n);
        if (children == NULL) goto out;
        for (Py_ssize_t i = 0; i < n; i++) {
            Span child = {s.p + tuple_spans.v[2 * i], s.p + tuple_spans.v[2 * i + 1]};
            PyObject *made = build_shape(context, child, depth + 1);
            if (made == NULL) goto out;
            PyTuple_SET_ITEM(children, i, made);
        }
        PyObject *fields[5] = {name, empty_tuple, empty_tuple, Py_None, children};
        shape = make_frozen(&shape_class, fields);
        goto out;
    }
    if (dynamic.n != 0 && dynamic.n != dims.n) goto out;
    int any_dynamic = 0;
    for (Py_ssize_t i = 0; i < dims.n; i++) {
        if (dims.v[i] == UNBOUNDED) dims.v[i] = -1;
        else if (dims.v[i] < 0) goto out;
    }
    for (Py_ssize_t i = 0; i < dynamic.n; i++) any_dynamic |= dynamic.v[i] != 0;
    if (layout_span.p != NULL) {
        int is_default = 0;
        layout = build_layout(layout_span, dims.n, &is_default);
        if (layout == NULL) goto out;
    } else {
        layout = Py_NewRef(Py_None);
    }
    dims_tuple = tuple_of_ints(dims.v, dims.n);
    if (dims_tuple == NULL) goto out;
    if (any_dynamic) {
        dynamic_tuple = PyTuple_New(dynamic.n);
        if (dynamic_tuple == NULL) goto out;
        for (Py_ssize_t i = 0; i < dynamic.n; i++)
            PyTuple_SET_ITEM(dynamic_tuple, i, PyBool_FromLong(dynamic.v[i] != 0));
    } else {
        dynamic_tuple = Py_NewRef(empty_tuple);
    }
    PyObject *fields[5] = {name, dims_tuple, dynamic_tuple, layout, empty_tuple};
    shape = make_frozen(&shape_class, fields);
out:
    Py_XDECREF(name);
    Py_XDECREF(dims_tuple);
    Py_XDECREF(dynamic_tuple);
    Py_XDECREF(layout);
    Py_XDECREF(children);
    vec_free(&dims);
    vec_free(&dynamic);
    vec_free(&tuple_spans);
    return shape;
}

/* Printable ASCII that escaping leaves as it is (no quote, no backslash). */
/* Printable ASCII: `printable` (hlogap.units) leaves it as it is, and escaping it needs only
   the named escapes of a quote and a backslash. */
static int plain(Span s) {
    for (const uint8_t *q = s.p; q < s.end; q++)
        if (*q < 0x20 || *q > 0x7E) return 0;
    return 1;
}

typedef struct {
    char *text;
    Py_ssize_t n, cap;
} Text;

static int put(Text *t, const char *p, Py_ssize_t n) {
    if (t->n + n > t->cap) {
        Py_ssize_t cap = 2 * (t->n + n) + 64;
        char *grown = PyMem_Realloc(t->text, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        t->text = grown;
        t->cap = cap;
    }
    memcpy(t->text + t->n, p, (size_t)n);
    t->n += n;
    return 1;
}

/* `key="value"`, the value escaped as hlogap.hlo.printer.escape (absl::CEscape) does for
   printable ASCII: `"`, `'` and `\\` get a backslash. */
static int put_str(Text *t, const char *key, Span value) {
    if (!((t->n <= 1 || put(t, " ", 1)) && put(t, key, (Py_ssize_t)strlen(key)) &&
          put(t, "=\"", 2)))
        return 0;
    const uint8_t *run = value.p;
    for (const uint8_t *q = value.p; q < value.end; q++) {
        if (*q != '"' && *q != '\'' && *q != '\\') continue;
        char escaped[2] = {'\\', (char)*q};
        if (!put(t, (const char *)run, q - run) || !put(t, escaped, 2)) return 0;
        run = q + 1;
    }
    return put(t, (const char *)run, value.end - run) && put(t, "\"", 1);
}

static int put_int(Text *t, const char *key, long long value) {
    char number[32];
    int n = snprintf(number, sizeof number, "%lld", value);
    return (t->n <= 1 || put(t, " ", 1)) && put(t, key, (Py_ssize_t)strlen(key)) &&
           put(t, "=", 1) && put(t, number, n);
}

/* decode.py's `_metadata` of an OpMetadata whose strings are plain and whose source is its
   own file (not a stack frame): (text, op_name, source); NULL (no error) for Python. */
static PyObject *build_metadata(void *context, Span s, int depth) {
    (void)context;
    (void)depth;
    enum { OP_TYPE, OP_NAME, SOURCE_FILE, DEDUPLICATED, SCHEDULING, N_TEXTS };
    static const int text_fields[N_TEXTS] = {1, 2, 3, 12, 16};
    Span texts[N_TEXTS];
    int32_t line = 0, end_line = 0, column = 0, end_column = 0, frame = 0;
    uint64_t seen = 0;
    memset(texts, 0, sizeof texts);
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field, v;
        int wire, ok = -1;
        if (!read_tag(&p, s.end, &field, &wire)) return NULL;
        for (int k = 0; k < N_TEXTS; k++)
            if ((uint64_t)text_fields[k] == field)
                ok = len_field(wire, &p, s.end, &texts[k], &seen, field) == 1 && plain(texts[k]);
        if (ok == -1) {
            switch (field) {
            case 4: case 17: case 18: case 19: case 15: case 8: case 9:
                ok = wire == WIRE_VARINT && read_varint(&p, s.end, &v);
                if (!ok) break;
                if (field == 4) line = (int32_t)(uint32_t)v;
                if (field == 17) end_line = (int32_t)(uint32_t)v;
                if (field == 18) column = (int32_t)(uint32_t)v;
                if (field == 19) end_column = (int32_t)(uint32_t)v;
                if (field == 15) frame = (int32_t)(uint32_t)v;
                break;
            default: ok = skip_wire_value(wire, &p, s.end); break;
            }
        }
        if (!ok) return NULL;
    }
    int has_file = texts[SOURCE_FILE].end > texts[SOURCE_FILE].p;
    if (!has_file && frame) return NULL; /* the source is a stack frame's: Python's */
    Text t = {NULL, 0, 0};
    PyObject *out = NULL, *text = NULL, *op_name = NULL, *source = NULL;
    int ok = put(&t, "{", 1);
    static const char *const keys[N_TEXTS] = {"op_type", "op_name", "source_file",
                                              "deduplicated_name", "scheduling_name"};
    for (int k = 0; ok && k < SOURCE_FILE + 1; k++)
        if (texts[k].end > texts[k].p) ok = put_str(&t, keys[k], texts[k]);
    const char *number_keys[] = {"source_line", "source_end_line", "source_column",
                                 "source_end_column"};
    int32_t numbers[] = {line, end_line, column, end_column};
    for (int k = 0; ok && k < 4; k++)
        if (numbers[k]) ok = put_int(&t, number_keys[k], numbers[k]);
    for (int k = DEDUPLICATED; ok && k < N_TEXTS; k++)
        if (texts[k].end > texts[k].p) ok = put_str(&t, keys[k], texts[k]);
    if (ok && frame) ok = put_int(&t, "stack_frame_id", frame);
    if (ok) ok = put(&t, "}", 1);
    if (!ok) goto out;
    text = t.n > 2 ? PyUnicode_FromStringAndSize(t.text, t.n) : Py_NewRef(Py_None);
    Span name = texts[OP_NAME];
    op_name = name.end > name.p ? PyUnicode_FromStringAndSize((const char *)name.p,
                                                              name.end - name.p)
                                : Py_NewRef(Py_None);
    if (has_file) {
        Span file = texts[SOURCE_FILE];
        Py_ssize_t at = t.n; /* after the text, in the same buffer */
        char number[16];
        int n = line ? snprintf(number, sizeof number, ":%d", (int)line) : 0;
        if (!put(&t, (const char *)file.p, file.end - file.p) || !put(&t, number, n)) goto out;
        source = PyUnicode_FromStringAndSize(t.text + at, t.n - at);
    } else {
        source = Py_NewRef(Py_None);
    }
    if (text != NULL && op_name != NULL && source != NULL)
        out = PyTuple_Pack(3, text, op_name, source);
out:
    PyMem_Free(t.text);
    Py_XDECREF(text);
    Py_XDECREF(op_name);
    Py_XDECREF(source);
    return out;
}

/* An opcode's text: one str object per distinct opcode of the module. */
static PyObject *build_text(void *context, Span s, int depth) {
    (void)context;
    (void)depth;
    return text_of(s);
}

/* ---- constants' literals, made here for scalars and arrays of pred and 32/64-bit types ---- */

/* XLA's RoundTripFpToString of an f32 as decode.py's `_float` writes it: `%g` with 6 digits,
   9 when 6 do not read back; Python's own float formatting (PyOS_double_to_string) makes it. */
static PyObject *f32_text(float value) {
    double v = (double)value;
    if (isnan(v)) return PyUnicode_FromString(signbit(v) ? "-nan" : "nan");
    if (isinf(v)) return PyUnicode_FromString(v > 0 ? "inf" : "-inf");
    char *text = PyOS_double_to_string(v, 'g', 6, 0, NULL);
    if (text == NULL) return NULL;
    double back = PyOS_string_to_double(text, NULL, NULL);
    if (back == -1.0 && PyErr_Occurred()) {
        PyMem_Free(text);
        return NULL;
    }
    float rounded = (float)back;
    if (isinf(rounded) && !isinf(back)) rounded = (float)copysign(INFINITY, back);
    if ((double)rounded != v) {
        PyMem_Free(text);
        text = PyOS_double_to_string(v, 'g', 9, 0, NULL);
        if (text == NULL) return NULL;
    }
    PyObject *out = PyUnicode_FromString(text);
    PyMem_Free(text);
    return out;
}

/* decode.py's `_nest`: `{1, 2}`, `{ { 1, 2 }, { 3, 4 } }`. */
static PyObject *nest(PyObject *values, Py_ssize_t from, Py_ssize_t to, const int64_t *dims,
                      Py_ssize_t rank, const char *pad) {
    PyObject *items;
    if (rank == 1) {
        items = PyList_GetSlice(values, from, to);
    } else {
        Py_ssize_t step = dims[0] ? (to - from) / dims[0] : 0;
        items = PyList_New(dims[0]);
        for (Py_ssize_t k = 0; items != NULL && k < dims[0]; k++) {
            PyObject *item = nest(values, from + k * step, from + (k + 1) * step, dims + 1,
                                  rank - 1, pad);
            if (item == NULL) Py_CLEAR(items);
            else PyList_SET_ITEM(items, k, item);
        }
    }
    if (items == NULL) return NULL;
    PyObject *separator = PyUnicode_FromString(", "), *out = NULL;
    if (separator != NULL) {
        PyObject *joined = PyUnicode_Join(separator, items);
        if (joined != NULL) out = PyUnicode_FromFormat("{%s%U%s}", pad, joined, pad);
        Py_XDECREF(joined);
    }
    Py_XDECREF(separator);
    Py_DECREF(items);
    return out;
}


/* ---- the module's stack frames ---- */

static PyObject *int32_items(Span item, const int *order, int count) {
    /* The int32 fields 1..count of a flat message, as the dataclass orders them. */
    int32_t numbers[8] = {0};
    const uint8_t *p = item.p;
    while (p < item.end) {
        uint64_t field, v;
        int wire;
        if (!read_tag(&p, item.end, &field, &wire)) return NULL;
        if (field >= 1 && field <= (uint64_t)count) {
            if (wire != WIRE_VARINT || !read_varint(&p, item.end, &v)) return NULL;
            numbers[field - 1] = (int32_t)(uint32_t)v;
        } else if (!skip_wire_value(wire, &p, item.end)) {
            return NULL;
        }
    }
    PyObject *values[8];
    for (int k = 0; k < count; k++) {
        values[k] = PyLong_FromLong(numbers[order[k]]);
        if (values[k] == NULL) {
            while (k--) Py_DECREF(values[k]);
            return NULL;
        }
    }
    PyObject *made =
        make_frozen(count == 6 ? &file_location_class : &stack_frame_class, values);
    for (int k = 0; k < count; k++) Py_DECREF(values[k]);
    return made;
}

/* decode.py's `_frames` of a StackFrameIndexProto; NULL (no error) for Python to make it. */
static PyObject *build_frames(Span s) {
    /* FileLocation: file_name_id=1, function_name_id=2, line=3, column=4, end_line=5,
       end_column=6; the dataclass has line, end_line, column, end_column. */
    static const int location_order[6] = {0, 1, 2, 4, 3, 5};
    static const int frame_order[2] = {0, 1};
    PyObject *lists[4] = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0)};
    PyObject *tuples[4] = {NULL, NULL, NULL, NULL}, *out = NULL;
    for (int k = 0; k < 4; k++)
        if (lists[k] == NULL) goto out;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field;
        int wire;
        Span item;
        if (!read_tag(&p, s.end, &field, &wire)) goto out;
        if (field < 1 || field > 4) {
            if (!skip_wire_value(wire, &p, s.end)) goto out;
            continue;
        }
        if (wire != WIRE_LEN || !read_len(&p, s.end, &item)) goto out;
        PyObject *made = field <= 2 ? text_of(item)
                         : field == 3 ? int32_items(item, location_order, 6)
                                      : int32_items(item, frame_order, 2);
        if (made == NULL) {
            PyErr_Clear();
            goto out;
        }
        int failed = PyList_Append(lists[field - 1], made) < 0;
        Py_DECREF(made);
        if (failed) goto out;
    }
    for (int k = 0; k < 4; k++)
        if ((tuples[k] = PyList_AsTuple(lists[k])) == NULL) goto out;
    out = make_frozen(&stack_frame_index_class, tuples);
out:
    for (int k = 0; k < 4; k++) {
        Py_XDECREF(lists[k]);
        Py_XDECREF(tuples[k]);
    }
    if (out == NULL) PyErr_Clear(); /* Python makes it, and says what is wrong */
    return out;
}

/* ---- program shapes: checked here as upb would parse them (nothing of them is decoded) ---- */

/* Checks below this nesting only: deeper ones go to upb, whose limit (100 levels from the
   top message) is then the one that applies. */
#define CHECK_DEPTH 32

/* Fields of `s`: `varints` may be varints or packed, `messages` are checked by `check`,
   `strings` are UTF-8; any other known field with another wire type, or malformed bytes:
   0 (upb's to read). */
typedef struct {
    uint8_t number;
    char kind; /* 'v' varint (repeated or not), 's' string, 'S' shape, 'L' layout, 't' tile,
                  'c' split config */
} FieldKind;

static int check_message(Span s, const FieldKind *kinds, int depth);

static const FieldKind tile_fields[] = {{1, 'v'}, {0, 0}};
static const FieldKind split_fields[] = {{1, 'v'}, {2, 'v'}, {0, 0}};
static const FieldKind layout_fields[] = {{1, 'v'}, {9, 'v'}, {6, 't'}, {16, 'v'}, {7, 'v'},
                                          {8, 'v'}, {11, 'v'}, {12, 'v'}, {10, 'S'},
                                          {15, 'v'}, {17, 'c'}, {0, 0}};
static const FieldKind shape_fields[] = {{2, 'v'}, {3, 'v'}, {6, 'v'}, {4, 'S'}, {5, 'L'}, {0, 0}};
static const FieldKind program_shape_fields[] = {{1, 'S'}, {2, 'S'}, {3, 's'}, {0, 0}};

static int check_message(Span s, const FieldKind *kinds, int depth) {
    if (depth > CHECK_DEPTH) return 0;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field, v;
        int wire;
        if (!read_tag(&p, s.end, &field, &wire)) return 0;
        const FieldKind *kind = kinds;
        while (kind->number && kind->number != field) kind++;
        if (!kind->number) { /* unknown: skipped */
            if (!skip_wire_value(wire, &p, s.end)) return 0;
            continue;
        }
        if (kind->kind == 'v') {
            Span packed;
            if (wire == WIRE_VARINT) {
                if (!read_varint(&p, s.end, &v)) return 0;
            } else if (wire == WIRE_LEN && read_len(&p, s.end, &packed)) {
                while (packed.p < packed.end)
                    if (!read_varint(&packed.p, packed.end, &v)) return 0;
            } else {
                return 0;
            }
            continue;
        }
        Span body;
        if (wire != WIRE_LEN || !read_len(&p, s.end, &body)) return 0;
        int ok;
        switch (kind->kind) {
        case 's': ok = valid_utf8(body); break;
        case 'S': ok = check_message(body, shape_fields, depth + 1); break;
        case 'L': ok = check_message(body, layout_fields, depth + 1); break;
        case 't': ok = check_message(body, tile_fields, depth + 1); break;
        default: ok = check_message(body, split_fields, depth + 1); break;
        }
        if (!ok) return 0;
    }
    return 1;
}

/* ---- opcodes ---- */

enum {
    OP_OTHER, OP_PARAMETER, OP_CONSTANT, OP_GTE, OP_FUSION, OP_IOTA, OP_COMPARE, OP_SLICE,
    OP_DYNAMIC_SLICE, OP_CUSTOM_CALL, OP_WHILE, OP_PAD, OP_PYTHON
};
enum { ALWAYS_DIMENSIONS = 1, TO_APPLY = 2, COLLECTIVE = 4 };
typedef struct {
    const char *name;
    int kind, flags;
} Opcode;
/* Opcodes with attributes written here, and those left to Python (OP_PYTHON): their text
   holds attributes decode.py writes even from absent fields. */
static const Opcode opcodes[] = {
    {"parameter", OP_PARAMETER, 0},
    {"constant", OP_CONSTANT, 0},
    {"get-tuple-element", OP_GTE, 0},
    {"fusion", OP_FUSION, 0},
    {"iota", OP_IOTA, 0},
    {"compare", OP_COMPARE, 0},
    {"slice", OP_SLICE, 0},
    {"dynamic-slice", OP_DYNAMIC_SLICE, 0},
    {"custom-call", OP_CUSTOM_CALL, 0},
    {"while", OP_WHILE, 0},
    {"broadcast", OP_OTHER, ALWAYS_DIMENSIONS},
    {"concatenate", OP_OTHER, ALWAYS_DIMENSIONS},
    {"reverse", OP_OTHER, ALWAYS_DIMENSIONS},
    {"transpose", OP_OTHER, ALWAYS_DIMENSIONS},
    {"map", OP_OTHER, ALWAYS_DIMENSIONS | TO_APPLY},
    {"reduce", OP_OTHER, ALWAYS_DIMENSIONS | TO_APPLY},
    {"call", OP_OTHER, TO_APPLY},
    {"reduce-window", OP_OTHER, TO_APPLY},
    {"fft", OP_PYTHON, 0},
    {"all-reduce", OP_OTHER, COLLECTIVE | TO_APPLY},
    {"all-reduce-start", OP_OTHER, COLLECTIVE | TO_APPLY},
    {"all-gather", OP_OTHER, COLLECTIVE | ALWAYS_DIMENSIONS},
    {"all-gather-start", OP_OTHER, COLLECTIVE | ALWAYS_DIMENSIONS},
    {"reduce-scatter", OP_OTHER, COLLECTIVE | ALWAYS_DIMENSIONS | TO_APPLY},
    {"all-to-all", OP_OTHER, COLLECTIVE},
    {"ragged-all-to-all", OP_OTHER, COLLECTIVE},
    {"collective-broadcast", OP_OTHER, COLLECTIVE},
    {"collective-permute", OP_PYTHON, 0},
    {"collective-permute-start", OP_PYTHON, 0},
    {"sort", OP_PYTHON, 0},
    {"pad", OP_PAD, 0},
    {"gather", OP_PYTHON, 0},
    {"scatter", OP_PYTHON, 0},
    {"reduce-precision", OP_PYTHON, 0},
    {"rng", OP_PYTHON, 0},
    {"rng-bit-generator", OP_PYTHON, 0},
    {"topk", OP_PYTHON, 0},
    {"select-and-scatter", OP_PYTHON, 0},
    {"conditional", OP_PYTHON, 0},
};

static size_t opcode_lengths[sizeof opcodes / sizeof *opcodes]; /* set up once */

static const Opcode *opcode_of(Span s) {
    static const Opcode other = {"", OP_OTHER, 0};
    size_t n = (size_t)(s.end - s.p);
    for (size_t i = 0; i < sizeof opcodes / sizeof *opcodes; i++) {
        if (opcode_lengths[i] == n && memcmp(opcodes[i].name, s.p, n) == 0)
            return &opcodes[i];
    }
    return &other;
}

/* ---- one module ---- */

typedef struct {
    int64_t id;
    Span bytes;
    PyObject *name;  /* owned */
    PyObject *shape; /* borrowed from the shape cache */
} Inst;

enum { CACHE_SHAPE, CACHE_METADATA, CACHE_LITERAL, CACHE_BACKEND, CACHE_FRONTEND,
       CACHE_SHARDING, CACHE_STRING, CACHE_OPCODE, CACHE_GROUPS, CACHE_COUNT };
static const char *const cache_hooks[CACHE_COUNT] = {
    "shape", "metadata", "literal", "backend_config", "frontend_attributes", "sharding",
    "string", NULL, "replica_groups",
};
static PyObject *build_literal(void *context, Span s, int depth);
static const Builder cache_builders[CACHE_COUNT] = {
    build_shape, build_metadata, build_literal, NULL, NULL, NULL, NULL, build_text, NULL,
};

typedef struct {
    PyObject *hooks;
    Cache caches[CACHE_COUNT];
    PyObject *comp_names; /* dict: computation id -> name (the last of an id, as Python's) */
    PyObject *defined;    /* dict: id -> (name, shape), made for the first instruction
                             handed to Python */
    Inst *insts;
    Py_ssize_t n_insts, cap_insts;
    /* Instruction id -> position in insts + 1: by id - min_id where the ids are dense (as XLA
       numbers them), else open addressing. */
    Py_ssize_t *index;
    Py_ssize_t index_cap;
    int dense;
    int64_t min_id;
    Vec operands, controls, called, dims, slice_sizes, precision, slices, slice_values;
} Module;

static Py_ssize_t index_slot(const Module *m, int64_t id) {
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15u;
    Py_ssize_t k = (Py_ssize_t)((h ^ (h >> 31)) & (uint64_t)(m->index_cap - 1));
    while (m->index[k] && m->insts[m->index[k] - 1].id != id) k = (k + 1) & (m->index_cap - 1);
    return k;
}

static const Inst *find(const Module *m, int64_t id) {
    if (m->dense) {
        uint64_t k = (uint64_t)id - (uint64_t)m->min_id;
        return k < (uint64_t)m->index_cap && m->index[k] ? &m->insts[m->index[k] - 1] : NULL;
    }
    Py_ssize_t at = m->index[index_slot(m, id)];
    return at ? &m->insts[at - 1] : NULL;
}

static void module_free(Module *m) {
    for (int i = 0; i < CACHE_COUNT; i++) cache_free(&m->caches[i]);
    Py_XDECREF(m->comp_names);
    Py_XDECREF(m->defined);
    for (Py_ssize_t i = 0; i < m->n_insts; i++) Py_XDECREF(m->insts[i].name);
    PyMem_Free(m->insts);
    PyMem_Free(m->index);
    Vec *vecs[] = {&m->operands, &m->controls, &m->called, &m->dims, &m->slice_sizes,
                   &m->precision, &m->slices, &m->slice_values};
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) PyMem_Free(vecs[i]->v);
}

enum { LIT_PRED = 2, LIT_S32 = 4, LIT_S64 = 5, LIT_U32 = 6, LIT_U64 = 7, LIT_F32 = 8 };

/* decode.py's `_literal` of a LiteralProto holding a shape and the values of its element type
   (pred, s32, s64, u32, u64, f32) and nothing else; NULL (no error) for Python. */
static PyObject *build_literal(void *context, Span s, int depth) {
    Cache *shapes = &((Module *)context)->caches[CACHE_SHAPE];
    (void)depth;
    Span shape_span = {NULL, NULL};
    uint64_t value_field = 0;
    Vec values = {0};
    PyObject *out = NULL, *texts = NULL, *element = NULL, *dims = NULL;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field;
        int wire;
        if (!read_tag(&p, s.end, &field, &wire)) goto out;
        if (field == 1) {
            if (wire != WIRE_LEN || shape_span.p != NULL || !read_len(&p, s.end, &shape_span))
                goto out;
        } else if (field >= LIT_PRED && field <= LIT_U64 && field != 3) {
            if ((value_field && value_field != field) ||
                read_repeated(&values, wire, &p, s.end) != 1)
                goto out;
            value_field = field;
        } else if (field == LIT_F32) {
            if (value_field && value_field != field) goto out;
            value_field = field;
            Span packed;
            if (wire == WIRE_FIXED32) {
                packed.p = p;
                packed.end = p + 4;
                if (s.end - p < 4) goto out;
                p += 4;
            } else if (wire != WIRE_LEN || !read_len(&p, s.end, &packed) ||
                       (packed.end - packed.p) % 4) {
                goto out;
            }
            for (const uint8_t *q = packed.p; q < packed.end; q += 4) {
                uint32_t bits;
                memcpy(&bits, q, 4);
                if (!vec_push(&values, bits)) goto out;
            }
        } else {
            goto out; /* another field: Python's (and upb's) to read */
        }
    }
    if (shape_span.p == NULL) goto out;
    PyObject *shape = cached(shapes, context, shape_span);
    if (shape == NULL) goto out;
    element = PyObject_GetAttrString(shape, "element_type");
    dims = element != NULL ? PyObject_GetAttrString(shape, "dims") : NULL;
    if (dims == NULL || !PyTuple_Check(dims)) goto out;
    static const char *const names[] = {"", "", "pred", "", "s32", "s64", "u32", "u64", "f32"};
    int64_t kind = 0;
    for (int k = LIT_PRED; k <= LIT_F32; k++)
        if (names[k][0] && PyUnicode_CompareWithASCIIString(element, names[k]) == 0) kind = k;
    if (kind == 0 || (value_field && (int64_t)value_field != kind)) goto out;
    Py_ssize_t rank = PyTuple_GET_SIZE(dims);
    int64_t sizes[64], count = 1;
    if (rank > 64) goto out;
    for (Py_ssize_t i = 0; i < rank; i++) {
        long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(dims, i));
        if (d < 0 || (d && count > INT64_MAX / d)) {
            PyErr_Clear();
            goto out;
        }
        sizes[i] = d;
        count *= d;
    }
    if (count != values.n) { /* data that does not fit the shape */
        out = PyUnicode_FromString("{...}");
        goto out;
    }
    texts = PyList_New(values.n);
    if (texts == NULL) goto out;
    for (Py_ssize_t i = 0; i < values.n; i++) {
        uint64_t v = (uint64_t)values.v[i];
        PyObject *text;
        switch (kind) {
        case LIT_PRED: text = PyUnicode_FromString(v ? "true" : "false"); break;
        case LIT_S32: text = PyLong_FromLong((long)(int32_t)(uint32_t)v); break;
        case LIT_S64: text = PyLong_FromLongLong((long long)v); break;
        case LIT_U32: text = PyLong_FromUnsignedLong((unsigned long)(uint32_t)v); break;
        case LIT_U64: text = PyLong_FromUnsignedLongLong((unsigned long long)v); break;
        default: {
            float f;
            uint32_t bits = (uint32_t)v;
            memcpy(&f, &bits, 4);
            text = f32_text(f);
        }
        }
        if (text != NULL && PyLong_Check(text)) Py_SETREF(text, PyObject_Str(text));
        if (text == NULL) goto out;
        PyList_SET_ITEM(texts, i, text);
    }
    if (rank == 0) out = Py_NewRef(PyList_GET_ITEM(texts, 0));
    else out = nest(texts, 0, values.n, sizes, rank, rank > 1 ? " " : "");
out:
    Py_XDECREF(texts);
    Py_XDECREF(element);
    Py_XDECREF(dims);
    vec_free(&values);
    return out;
}

/* Field numbers of HloInstructionProto (hlo.proto). */
enum {
    F_NAME = 1, F_OPCODE = 2, F_SHAPE = 3, F_METADATA = 7, F_LITERAL = 8,
    F_PARAMETER_NUMBER = 9, F_FUSION_KIND = 11, F_TUPLE_INDEX = 13, F_DIMENSIONS = 14,
    F_SLICE_DIMENSIONS = 17, F_DYNAMIC_SLICE_SIZES = 20, F_CHANNEL_ID = 26,
    F_CUSTOM_CALL_TARGET = 28, F_ID = 35, F_OPERAND_IDS = 36, F_CONTROL_PREDECESSOR_IDS = 37,
    F_CALLED_COMPUTATION_IDS = 38, F_SHARDING = 40, F_BACKEND_CONFIG = 43,
    F_FEATURE_GROUP_COUNT = 50, F_PRECISION_CONFIG = 51, F_BATCH_GROUP_COUNT = 58,
    F_COMPARISON_DIRECTION = 63, F_CUSTOM_CALL_HAS_SIDE_EFFECT = 65, F_DELTA = 66,
    F_FRONTEND_ATTRIBUTES = 68, F_USE_GLOBAL_DEVICE_IDS = 71, F_COMPARISON_TYPE = 72,
    F_CUSTOM_CALL_API_VERSION = 77, F_ASYNC_EXECUTION_THREAD = 79, F_IS_COMPOSITE = 89,
    F_DOT_DIMENSION_NUMBERS = 30, F_PADDING_CONFIG = 21, F_REPLICA_GROUPS = 49, F_COLLECTIVE_DEVICE_LIST = 87,
    F_IOTA_COLLECTIVE_DEVICE_LIST = 92, F_MESH_AXES_REPLICA_GROUP_LIST = 93,
};
/* The other fields hlo.proto knows: an instruction carrying one goes to Python. */
static const uint8_t python_fields[] = {15, 16, 18, 19, 23, 31, 32, 33, 34, 47, 48,
                                        52, 60, 67, 69, 70, 81, 85};

static int is_python_field(uint64_t field) {
    for (size_t i = 0; i < sizeof python_fields; i++)
        if (python_fields[i] == field) return 1;
    return 0;
}

/* What one instruction's bytes hold. Repeated fields are in the module's vectors. */
typedef struct {
    Span opcode, shape, metadata, literal, fusion_kind, custom_call_target, backend_config,
        sharding, frontend, direction, comparison_type, precision, padding, dot;
    /* The replica groups' fields (49, 87, 92, 93), tags and all: one run of them, or
       groups_split (another field between them: Python's). */
    Span groups;
    int groups_split;
    int has_metadata, has_literal, has_sharding, has_precision, has_frontend, has_padding,
        has_dot;
    int64_t parameter_number, tuple_index, channel_id, feature_group_count, batch_group_count;
    int32_t api_version;
    int side_effect, global_ids;
} Fields;

/* One instruction's fields: 1, or 0 to hand it to Python (which upb then reads: malformed
   bytes are its to report). */
static int read_fields(Module *m, Span bytes, Fields *f) {
    memset(f, 0, sizeof *f);
    m->operands.n = m->controls.n = m->called.n = m->dims.n = m->slice_sizes.n = 0;
    m->slices.n = 0;
    const uint8_t *p = bytes.p, *end = bytes.end;
    uint64_t seen_low = 0, seen_high = 0;
    while (p < end) {
        uint64_t field, v;
        int wire, ok;
        const uint8_t *start = p;
        if (!read_tag(&p, end, &field, &wire)) return 0;
        uint64_t *seen = field < 64 ? &seen_low : &seen_high;
        int is_groups = field == F_REPLICA_GROUPS || field == F_COLLECTIVE_DEVICE_LIST ||
                        field == F_IOTA_COLLECTIVE_DEVICE_LIST ||
                        field == F_MESH_AXES_REPLICA_GROUP_LIST;
        if (is_groups) {
            if (f->groups.p == NULL) f->groups.p = start;
            else if (f->groups.end != start) f->groups_split = 1;
            ok = wire == WIRE_LEN && skip_wire_value(wire, &p, end);
            f->groups.end = p;
            if (!ok) return 0;
            continue;
        }
        switch (field) {
        case F_NAME:
            ok = wire == WIRE_LEN && skip_wire_value(wire, &p, end); /* pass 1 read it */
            break;
        case F_OPCODE: ok = len_field(wire, &p, end, &f->opcode, seen, field); break;
        case F_SHAPE: ok = len_field(wire, &p, end, &f->shape, seen, field); break;
        case F_METADATA:
            ok = f->has_metadata = len_field(wire, &p, end, &f->metadata, seen, field);
            break;
        case F_LITERAL:
            ok = f->has_literal = len_field(wire, &p, end, &f->literal, seen, field);
            break;
        case F_FUSION_KIND: ok = len_field(wire, &p, end, &f->fusion_kind, seen, field); break;
        case F_CUSTOM_CALL_TARGET:
            ok = len_field(wire, &p, end, &f->custom_call_target, seen, field);
            break;
        case F_SHARDING:
            ok = f->has_sharding = len_field(wire, &p, end, &f->sharding, seen, field);
            break;
        case F_BACKEND_CONFIG:
            ok = len_field(wire, &p, end, &f->backend_config, seen, field);
            break;
        case F_DOT_DIMENSION_NUMBERS:
            ok = f->has_dot = len_field(wire, &p, end, &f->dot, seen, field);
            break;
        case F_PADDING_CONFIG:
            ok = f->has_padding = len_field(wire, &p, end, &f->padding, seen, field);
            break;
        case F_PRECISION_CONFIG:
            ok = f->has_precision = len_field(wire, &p, end, &f->precision, seen, field);
            break;
        case F_FRONTEND_ATTRIBUTES:
            ok = f->has_frontend = len_field(wire, &p, end, &f->frontend, seen, field);
            break;
        case F_COMPARISON_DIRECTION:
            ok = len_field(wire, &p, end, &f->direction, seen, field);
            break;
        case F_COMPARISON_TYPE:
            ok = len_field(wire, &p, end, &f->comparison_type, seen, field);
            break;
        case F_ASYNC_EXECUTION_THREAD: {
            Span ignored;
            ok = len_field(wire, &p, end, &ignored, seen, field);
            if (ok == 1 && !valid_utf8(ignored)) ok = 0;
            break;
        }
        case F_SLICE_DIMENSIONS: {
            Span dim;
            ok = wire == WIRE_LEN && read_len(&p, end, &dim) &&
                 vec_push(&m->slices, dim.p - bytes.p) && vec_push(&m->slices, dim.end - bytes.p);
            break;
        }
        case F_OPERAND_IDS: ok = read_repeated(&m->operands, wire, &p, end); break;
        case F_CONTROL_PREDECESSOR_IDS: ok = read_repeated(&m->controls, wire, &p, end); break;
        case F_CALLED_COMPUTATION_IDS: ok = read_repeated(&m->called, wire, &p, end); break;
        case F_DIMENSIONS: ok = read_repeated(&m->dims, wire, &p, end); break;
        case F_DYNAMIC_SLICE_SIZES: ok = read_repeated(&m->slice_sizes, wire, &p, end); break;
        case F_PARAMETER_NUMBER: case F_TUPLE_INDEX: case F_CHANNEL_ID: case F_ID:
        case F_FEATURE_GROUP_COUNT: case F_BATCH_GROUP_COUNT: case F_CUSTOM_CALL_API_VERSION:
        case F_CUSTOM_CALL_HAS_SIDE_EFFECT: case F_USE_GLOBAL_DEVICE_IDS: case F_DELTA:
        case F_IS_COMPOSITE:
            /* A scalar's last value wins, as in upb. */
            ok = wire == WIRE_VARINT && read_varint(&p, end, &v);
            if (!ok) break;
            switch (field) {
            case F_PARAMETER_NUMBER: f->parameter_number = (int64_t)v; break;
            case F_TUPLE_INDEX: f->tuple_index = (int64_t)v; break;
            case F_CHANNEL_ID: f->channel_id = (int64_t)v; break;
            case F_FEATURE_GROUP_COUNT: f->feature_group_count = (int64_t)v; break;
            case F_BATCH_GROUP_COUNT: f->batch_group_count = (int64_t)v; break;
            case F_CUSTOM_CALL_API_VERSION: f->api_version = (int32_t)(uint32_t)v; break;
            case F_CUSTOM_CALL_HAS_SIDE_EFFECT: f->side_effect = v != 0; break;
            case F_USE_GLOBAL_DEVICE_IDS: f->global_ids = v != 0; break;
            default: break;
            }
            break;
        default:
            /* A field hlo.proto does not know: skipped, as upb does. */
            ok = !is_python_field(field) && skip_wire_value(wire, &p, end);
            break;
        }
        if (ok != 1) {
            if (PyErr_Occurred()) return -1;
            return 0;
        }
    }
    /* Strings are checked as upb checks them, whether or not they are read here. */
    Span texts[] = {f->fusion_kind, f->custom_call_target, f->direction, f->comparison_type};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        if (texts[i].p != NULL && !valid_utf8(texts[i])) return 0;
    return 1;
}

/* `{1,2,3}` */
static PyObject *int_list(const int64_t *v, Py_ssize_t n) {
    char small[256], *text = small;
    size_t cap = sizeof small, used = 0;
    if ((size_t)n * 22 + 2 > cap) {
        cap = (size_t)n * 22 + 2;
        text = PyMem_Malloc(cap);
        if (text == NULL) return PyErr_NoMemory();
    }
    text[used++] = '{';
    for (Py_ssize_t i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, cap - used, i ? ",%lld" : "%lld", (long long)v[i]);
    text[used++] = '}';
    PyObject *out = PyUnicode_FromStringAndSize(text, (Py_ssize_t)used);
    if (text != small) PyMem_Free(text);
    return out;
}

/* `{a, b}` of the given strs, each prefixed by `prefix`. */
static PyObject *joined_names(PyObject *names, const char *prefix, const char *sep) {
    Py_ssize_t n = PyList_GET_SIZE(names);
    PyObject *parts = PyList_New(n), *text = NULL;
    if (parts == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyUnicode_FromFormat("%s%U", prefix, PyList_GET_ITEM(names, i));
        if (item == NULL) goto done;
        PyList_SET_ITEM(parts, i, item);
    }
    PyObject *separator = PyUnicode_FromString(sep), *joined;
    if (separator == NULL) goto done;
    joined = PyUnicode_Join(separator, parts);
    Py_DECREF(separator);
    if (joined == NULL) goto done;
    text = PyUnicode_FromFormat("{%U}", joined);
    Py_DECREF(joined);
done:
    Py_DECREF(parts);
    return text;
}

static int set_attr(PyObject *attrs, int key, PyObject *value) {
    if (value == NULL) return 0;
    int failed = PyDict_SetItem(attrs, strings[key], value);
    Py_DECREF(value);
    return failed == 0;
}

static inline void set_value(PyObject **values, int field, PyObject *value) {
    Py_XSETREF(values[field], value);
}

/* `slice` (a tuple of SliceDim) and its text, from the slice_dimensions parts. 0: Python. */
static int slice_attrs(Module *m, Span bytes, PyObject **values, PyObject *attrs) {
    Py_ssize_t n = m->slices.n / 2;
    int strided = 0;
    m->slice_values.n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = bytes.p + m->slices.v[2 * i], *end = bytes.p + m->slices.v[2 * i + 1];
        int64_t triple[3] = {0, 0, 0}; /* start, limit, stride */
        while (p < end) {
            uint64_t field, v;
            int wire;
            if (!read_tag(&p, end, &field, &wire)) return 0;
            if (field >= 1 && field <= 3) {
                if (wire != WIRE_VARINT || !read_varint(&p, end, &v)) return 0;
                triple[field - 1] = (int64_t)v;
            } else if (!skip_wire_value(wire, &p, end)) {
                return 0;
            }
        }
        strided |= triple[2] != 1;
        for (int k = 0; k < 3; k++)
            if (!vec_push(&m->slice_values, triple[k])) return -1;
    }
    PyObject *dims = PyTuple_New(n), *parts = PyList_New(n), *separator = NULL, *joined = NULL;
    int done = -1;
    if (dims == NULL || parts == NULL) goto out;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long start = m->slice_values.v[3 * i], limit = m->slice_values.v[3 * i + 1],
                  stride = m->slice_values.v[3 * i + 2];
        PyObject *numbers[3] = {PyLong_FromLongLong(start), PyLong_FromLongLong(limit),
                                PyLong_FromLongLong(stride)};
        PyObject *dim = NULL;
        if (numbers[0] != NULL && numbers[1] != NULL && numbers[2] != NULL)
            dim = make_frozen(&slice_dim_class, numbers);
        for (int k = 0; k < 3; k++) Py_XDECREF(numbers[k]);
        if (dim == NULL) goto out;
        PyTuple_SET_ITEM(dims, i, dim);
        PyObject *part = strided ? PyUnicode_FromFormat("[%lld:%lld:%lld]", start, limit, stride)
                                 : PyUnicode_FromFormat("[%lld:%lld]", start, limit);
        if (part == NULL) goto out;
        PyList_SET_ITEM(parts, i, part);
    }
    separator = PyUnicode_FromString(", ");
    if (separator == NULL) goto out;
    joined = PyUnicode_Join(separator, parts);
    if (joined == NULL) goto out;
    set_value(values, I_SLICE, dims);
    dims = NULL;
    done = set_attr(attrs, K_SLICE, PyUnicode_FromFormat("{%U}", joined)) ? 1 : -1;
out:
    Py_XDECREF(dims);
    Py_XDECREF(parts);
    Py_XDECREF(separator);
    Py_XDECREF(joined);
    return done;
}

/* `dot_dims` and its attrs (batch dims only when there are some, as XLA prints them). 0:
   Python. */
static int dot_attrs(Span s, PyObject **values, PyObject *attrs) {
    /* DotDimensionNumbers: lhs_contracting=1, rhs_contracting=2, lhs_batch=3, rhs_batch=4 */
    Vec dims[4] = {{0}, {0}, {0}, {0}};
    PyObject *tuples[4] = {NULL, NULL, NULL, NULL};
    int done = 0;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field;
        int wire;
        if (!read_tag(&p, s.end, &field, &wire)) goto out;
        if (field >= 1 && field <= 4) {
            int ok = read_repeated(&dims[field - 1], wire, &p, s.end);
            if (ok != 1) {
                done = PyErr_Occurred() ? -1 : 0;
                goto out;
            }
        } else if (!skip_wire_value(wire, &p, s.end)) {
            goto out;
        }
    }
    done = -1;
    static const int order[4] = {2, 3, 0, 1}; /* DotDims: lhs_batch, rhs_batch, lhs_c, rhs_c */
    for (int k = 0; k < 4; k++)
        if ((tuples[k] = tuple_of_ints(dims[order[k]].v, dims[order[k]].n)) == NULL) goto out;
    PyObject *made = make_frozen(&dot_dims_class, tuples);
    if (made == NULL) goto out;
    set_value(values, I_DOT_DIMS, made);
    if ((dims[2].n && !set_attr(attrs, K_LHS_BATCH_DIMS, int_list(dims[2].v, dims[2].n))) ||
        !set_attr(attrs, K_LHS_CONTRACTING_DIMS, int_list(dims[0].v, dims[0].n)) ||
        (dims[3].n && !set_attr(attrs, K_RHS_BATCH_DIMS, int_list(dims[3].v, dims[3].n))) ||
        !set_attr(attrs, K_RHS_CONTRACTING_DIMS, int_list(dims[1].v, dims[1].n)))
        goto out;
    done = 1;
out:
    for (int k = 0; k < 4; k++) {
        Py_XDECREF(tuples[k]);
        vec_free(&dims[k]);
    }
    return done;
}

/* `padding`: `0_1x2_3` (low_high), `_interior` on every dim when any has some. 0: Python. */
static int padding_attr(Span s, PyObject *attrs) {
    Vec numbers = {0}; /* low, high, interior per dim */
    int interior = 0, done = 0;
    Text t = {NULL, 0, 0};
    for (const uint8_t *p = s.p; p != NULL && p < s.end;) {
        uint64_t field, v;
        int wire;
        Span dim;
        if (!read_tag(&p, s.end, &field, &wire)) goto out;
        if (field != 1) {
            if (!skip_wire_value(wire, &p, s.end)) goto out;
            continue;
        }
        if (wire != WIRE_LEN || !read_len(&p, s.end, &dim)) goto out;
        int64_t three[3] = {0, 0, 0};
        while (dim.p < dim.end) {
            if (!read_tag(&dim.p, dim.end, &field, &wire)) goto out;
            if (field >= 1 && field <= 3) {
                if (wire != WIRE_VARINT || !read_varint(&dim.p, dim.end, &v)) goto out;
                three[field - 1] = (int64_t)v;
            } else if (!skip_wire_value(wire, &dim.p, dim.end)) {
                goto out;
            }
        }
        interior |= three[2] != 0;
        for (int k = 0; k < 3; k++)
            if (!vec_push(&numbers, three[k])) {
                done = -1;
                goto out;
            }
    }
    for (Py_ssize_t i = 0; i < numbers.n; i += 3) {
        char part[80];
        int n = interior ? snprintf(part, sizeof part, "%s%lld_%lld_%lld", i ? "x" : "",
                                    (long long)numbers.v[i], (long long)numbers.v[i + 1],
                                    (long long)numbers.v[i + 2])
                         : snprintf(part, sizeof part, "%s%lld_%lld", i ? "x" : "",
                                    (long long)numbers.v[i], (long long)numbers.v[i + 1]);
        if (!put(&t, part, n)) {
            done = -1;
            goto out;
        }
    }
    done = set_attr(attrs, K_PADDING, PyUnicode_FromStringAndSize(t.text ? t.text : "", t.n))
               ? 1
               : -1;
out:
    PyMem_Free(t.text);
    vec_free(&numbers);
    return done;
}

/* `operand_precision` when any operand's is not DEFAULT. 0: Python. */
static int precision_attr(Module *m, Span s, PyObject *attrs) {
    static const char *const names[] = {"default", "high", "highest"};
    m->precision.n = 0;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t field, v;
        int wire;
        if (!read_tag(&p, s.end, &field, &wire)) return 0;
        if (field == 1) {
            int ok = read_repeated(&m->precision, wire, &p, s.end);
            if (ok != 1) return PyErr_Occurred() ? -1 : 0;
        } else if (field == 2) {
            if (wire != WIRE_VARINT || !read_varint(&p, s.end, &v)) return 0;
        } else if (!skip_wire_value(wire, &p, s.end)) {
            return 0;
        }
    }
    int any = 0;
    for (Py_ssize_t i = 0; i < m->precision.n; i++) any |= (int32_t)m->precision.v[i] != 0;
    if (!any) return 1;
    PyObject *names_list = PyList_New(m->precision.n);
    if (names_list == NULL) return -1;
    for (Py_ssize_t i = 0; i < m->precision.n; i++) {
        int32_t x = (int32_t)m->precision.v[i];
        PyObject *name = 0 <= x && x < 3 ? PyUnicode_FromString(names[x])
                                         : PyUnicode_FromFormat("%d", (int)x);
        if (name == NULL) {
            Py_DECREF(names_list);
            return -1;
        }
        PyList_SET_ITEM(names_list, i, name);
    }
    PyObject *text = joined_names(names_list, "", ",");
    Py_DECREF(names_list);
    return set_attr(attrs, K_OPERAND_PRECISION, text) ? 1 : -1;
}

static PyObject *defined_table(Module *m) {
    if (m->defined != NULL) return m->defined;
    PyObject *defined = PyDict_New();
    if (defined == NULL) return NULL;
    for (Py_ssize_t i = 0; i < m->n_insts; i++) {
        PyObject *id = PyLong_FromLongLong(m->insts[i].id);
        PyObject *pair = PyTuple_Pack(2, m->insts[i].name, m->insts[i].shape);
        int failed = id == NULL || pair == NULL || PyDict_SetItem(defined, id, pair) < 0;
        Py_XDECREF(id);
        Py_XDECREF(pair);
        if (failed) {
            Py_DECREF(defined);
            return NULL;
        }
    }
    return m->defined = defined;
}

/* The instruction decode.py builds from these bytes (upb parses them). */
static PyObject *python_instruction(Module *m, Span bytes, int is_root) {
    PyObject *defined = defined_table(m);
    if (defined == NULL) return NULL;
    return PyObject_CallMethod(m->hooks, "instruction", "y#OOO", (const char *)bytes.p,
                               (Py_ssize_t)(bytes.end - bytes.p), is_root ? Py_True : Py_False,
                               defined, m->comp_names);
}

static PyObject *element_type(PyObject *shape) {
    return shape == NULL || shape == Py_None ? PyUnicode_FromString("")
                                             : PyObject_GetAttrString(shape, "element_type");
}

/* decode.py's `_default_comparison` of an operand's element type. */
static int default_comparison(PyObject *element) {
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(element, &n);
    if (text == NULL) return -1;
    if ((n >= 1 && (text[0] == 'f' || text[0] == 'c')) || (n >= 2 && !strncmp(text, "bf", 2)))
        return V_FLOAT;
    return n >= 1 && text[0] == 's' ? V_SIGNED : V_UNSIGNED;
}

/* The Instruction at position `at`, built here or by Python. */
static PyObject *instruction(Module *m, const Inst *inst, int is_root) {
    Fields f;
    int read = read_fields(m, inst->bytes, &f);
    if (read < 0) return NULL;
    const Opcode *op = read ? opcode_of(f.opcode) : NULL;
    if (!read || op->kind == OP_PYTHON || (f.has_literal && op->kind != OP_CONSTANT) ||
        (m->slices.n && op->kind != OP_SLICE) || (f.has_padding && op->kind != OP_PAD) ||
        (f.groups.p != NULL && (f.groups_split || !(op->flags & COLLECTIVE))))
        return python_instruction(m, inst->bytes, is_root);

    /* The fields set below; the others get their defaults at the end. */
    PyObject *values[I_COUNT] = {NULL};
    PyObject *operands = PyList_New(m->operands.n);
    PyObject *shapes = PyList_New(m->operands.n);
    PyObject *called = PyList_New(m->called.n);
    PyObject *attrs = PyDict_New();
    PyObject *opcode = NULL;
    set_value(values, I_OPERANDS, operands);
    set_value(values, I_OPERAND_SHAPES, shapes);
    set_value(values, I_CALLED, called);
    set_value(values, I_ATTRS, attrs);
    if (operands == NULL || shapes == NULL || called == NULL || attrs == NULL) goto failed;
    Py_INCREF(inst->name);
    set_value(values, I_NAME, inst->name);
    Py_INCREF(inst->shape);
    set_value(values, I_SHAPE, inst->shape);
    set_value(values, I_IS_ROOT, PyBool_FromLong(is_root));

    opcode = cached(&m->caches[CACHE_OPCODE], m, f.opcode);
    if (opcode == NULL) goto failed;
    set_value(values, I_OPCODE, Py_NewRef(opcode));

    for (Py_ssize_t i = 0; i < m->operands.n; i++) {
        const Inst *found = find(m, m->operands.v[i]);
        if (found == NULL) {
            unhandled("an operand id no instruction has");
            goto failed;
        }
        Py_INCREF(found->name);
        PyList_SET_ITEM(operands, i, found->name);
        Py_INCREF(found->shape);
        PyList_SET_ITEM(shapes, i, found->shape);
    }
    for (Py_ssize_t i = 0; i < m->called.n; i++) {
        PyObject *id = PyLong_FromLongLong(m->called.v[i]);
        if (id == NULL) goto failed;
        PyObject *name = PyDict_GetItemWithError(m->comp_names, id);
        Py_DECREF(id);
        if (name == NULL) {
            if (!PyErr_Occurred()) unhandled("a called computation id no computation has");
            goto failed;
        }
        Py_INCREF(name);
        PyList_SET_ITEM(called, i, name);
    }

    /* decode.py's `_opcode_attrs`, in its order. */
    switch (op->kind) {
    case OP_PARAMETER:
        set_value(values, I_PARAMETER_NUMBER, PyLong_FromLongLong(f.parameter_number));
        if (values[I_PARAMETER_NUMBER] == NULL) goto failed;
        break;
    case OP_CONSTANT:
        if (f.has_literal) {
            PyObject *literal = cached(&m->caches[CACHE_LITERAL], m, f.literal);
            if (literal == NULL) goto failed;
            Py_INCREF(literal);
            set_value(values, I_LITERAL, literal);
        }
        break;
    case OP_GTE:
        set_value(values, I_TUPLE_INDEX, PyLong_FromLongLong(f.tuple_index));
        if (values[I_TUPLE_INDEX] == NULL ||
            !set_attr(attrs, K_INDEX, int_text(f.tuple_index)))
            goto failed;
        break;
    case OP_FUSION: {
        PyObject *kind = f.fusion_kind.p ? text_of(f.fusion_kind) : PyUnicode_FromString("");
        if (kind == NULL) goto failed;
        Py_INCREF(kind);
        set_value(values, I_FUSION_KIND, kind);
        if (!set_attr(attrs, K_KIND, kind)) goto failed;
        break;
    }
    case OP_IOTA:
        if (m->dims.n && !set_attr(attrs, K_IOTA_DIMENSION,
                                   int_text(m->dims.v[0])))
            goto failed;
        break;
    case OP_COMPARE: {
        PyObject *direction =
            f.direction.p ? text_of(f.direction) : PyUnicode_FromString("");
        if (!set_attr(attrs, K_DIRECTION, direction)) goto failed;
        if (f.comparison_type.p && f.comparison_type.end > f.comparison_type.p) {
            PyObject *element = element_type(m->operands.n ? PyList_GET_ITEM(shapes, 0) : NULL);
            if (element == NULL) goto failed;
            int fallback = default_comparison(element);
            Py_DECREF(element);
            if (fallback < 0) goto failed;
            PyObject *type = text_of(f.comparison_type);
            if (type == NULL) goto failed;
            int same = PyUnicode_Compare(type, strings[fallback]) == 0;
            if (same) Py_DECREF(type);
            else if (!set_attr(attrs, K_TYPE, type)) goto failed;
        }
        break;
    }
    default:
        break;
    }
    if (f.channel_id > 0) {
        set_value(values, I_CHANNEL_ID, PyLong_FromLongLong(f.channel_id));
        if (values[I_CHANNEL_ID] == NULL ||
            !set_attr(attrs, K_CHANNEL_ID, int_text(f.channel_id)))
            goto failed;
    }
    if (op->flags & COLLECTIVE) {
        /* (ReplicaGroups, its text), by the bytes of the groups' fields */
        Span groups = f.groups;
        if (groups.p == NULL) groups.p = groups.end = inst->bytes.p; /* none: `{}` */
        PyObject *found = cached(&m->caches[CACHE_GROUPS], m, groups);
        if (found == NULL) goto failed;
        if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 2) {
            unhandled("replica groups hook");
            goto failed;
        }
        set_value(values, I_REPLICA_GROUPS, Py_NewRef(PyTuple_GET_ITEM(found, 0)));
        if (!set_attr(attrs, K_REPLICA_GROUPS, Py_NewRef(PyTuple_GET_ITEM(found, 1))))
            goto failed;
    }
    if (op->kind != OP_IOTA && (m->dims.n || (op->flags & ALWAYS_DIMENSIONS))) {
        PyObject *dims = PyTuple_New(m->dims.n);
        if (dims == NULL) goto failed;
        set_value(values, I_DIMENSIONS, dims);
        for (Py_ssize_t i = 0; i < m->dims.n; i++) {
            PyObject *d = PyLong_FromLongLong(m->dims.v[i]);
            if (d == NULL) goto failed;
            PyTuple_SET_ITEM(dims, i, d);
        }
        PyObject_GC_UnTrack(dims); /* ints: CPython's collector would untrack it itself */
        if (!set_attr(attrs, K_DIMENSIONS, int_list(m->dims.v, m->dims.n))) goto failed;
    }
    if (f.global_ids && !set_attr(attrs, K_USE_GLOBAL_DEVICE_IDS, Py_NewRef(strings[V_TRUE])))
        goto failed;
    {
        int64_t groups[2] = {f.feature_group_count ? f.feature_group_count : 1,
                             f.batch_group_count ? f.batch_group_count : 1};
        int slots[2] = {I_FEATURE_GROUP_COUNT, I_BATCH_GROUP_COUNT};
        int keys[2] = {K_FEATURE_GROUP_COUNT, K_BATCH_GROUP_COUNT};
        for (int k = 0; k < 2; k++) {
            if (groups[k] == 1) continue;
            set_value(values, slots[k], PyLong_FromLongLong(groups[k]));
            if (values[slots[k]] == NULL ||
                !set_attr(attrs, keys[k], int_text(groups[k])))
                goto failed;
        }
    }
    if (f.has_dot) {
        int done = dot_attrs(f.dot, values, attrs);
        if (done < 0) goto failed;
        if (done == 0) goto python;
    }
    if (op->kind == OP_SLICE) {
        int done = slice_attrs(m, inst->bytes, values, attrs);
        if (done < 0) goto failed;
        if (done == 0) goto python;
    }
    if (op->kind == OP_PAD) {
        int done = padding_attr(f.has_padding ? f.padding : (Span){NULL, NULL}, attrs);
        if (done < 0) goto failed;
        if (done == 0) goto python;
    }
    if (op->kind == OP_DYNAMIC_SLICE &&
        !set_attr(attrs, K_DYNAMIC_SLICE_SIZES, int_list(m->slice_sizes.v, m->slice_sizes.n)))
        goto failed;
    if (f.has_precision) {
        int done = precision_attr(m, f.precision, attrs);
        if (done < 0) goto failed;
        if (done == 0) goto python;
    }
    if (op->kind == OP_CUSTOM_CALL) {
        PyObject *target;
        if (f.custom_call_target.p) target = text_of(f.custom_call_target);
        else target = PyUnicode_FromString("");
        if (target == NULL) goto failed;
        set_value(values, I_CUSTOM_CALL_TARGET, target);
        Span raw = f.custom_call_target;
        if (raw.p == NULL) raw.p = raw.end = f.opcode.p; /* empty */
        PyObject *quoted = cached(&m->caches[CACHE_STRING], m, raw);
        if (quoted == NULL || !set_attr(attrs, K_CUSTOM_CALL_TARGET, Py_NewRef(quoted)))
            goto failed;
        if (f.side_effect &&
            !set_attr(attrs, K_CUSTOM_CALL_HAS_SIDE_EFFECT, Py_NewRef(strings[V_TRUE])))
            goto failed;
        if (f.api_version >= 2 && f.api_version <= 4 &&
            !set_attr(attrs, K_API_VERSION, Py_NewRef(strings[V_API_2 + f.api_version - 2])))
            goto failed;
    }
    if (f.has_sharding) {
        PyObject *text = cached(&m->caches[CACHE_SHARDING], m, f.sharding);
        if (text == NULL || !set_attr(attrs, K_SHARDING, Py_NewRef(text))) goto failed;
    }

    /* `_called_attrs` */
    if (m->called.n) {
        Py_ssize_t n = m->called.n;
        if (op->kind == OP_WHILE && n == 2) {
            PyObject *body = PyList_GET_ITEM(called, 0), *condition = PyList_GET_ITEM(called, 1);
            if (!set_attr(attrs, K_CONDITION, percent_name(condition)) ||
                !set_attr(attrs, K_BODY, percent_name(body)))
                goto failed;
            PyList_SET_ITEM(called, 0, condition); /* the text's order: condition, body */
            PyList_SET_ITEM(called, 1, body);
        } else if (op->flags & TO_APPLY) {
            if (!set_attr(attrs, K_TO_APPLY,
                          percent_name(PyList_GET_ITEM(called, 0))))
                goto failed;
        } else if (op->kind == OP_CUSTOM_CALL) {
            if (!set_attr(attrs, K_CALLED_COMPUTATIONS, joined_names(called, "%", ", ")))
                goto failed;
        } else if (n == 1) {
            if (!set_attr(attrs, K_CALLS,
                          percent_name(PyList_GET_ITEM(called, 0))))
                goto failed;
        } else if (!set_attr(attrs, K_CALLS, joined_names(called, "%", ", "))) {
            goto failed;
        }
    }
    if (f.has_frontend && f.frontend.end > f.frontend.p) {
        PyObject *text = cached(&m->caches[CACHE_FRONTEND], m, f.frontend);
        if (text == NULL) goto failed;
        if (text != Py_None && !set_attr(attrs, K_FRONTEND_ATTRIBUTES, Py_NewRef(text)))
            goto failed;
    }
    if (m->controls.n) {
        PyObject *names = PyList_New(m->controls.n);
        if (names == NULL) goto failed;
        for (Py_ssize_t i = 0; i < m->controls.n; i++) {
            const Inst *found = find(m, m->controls.v[i]);
            if (found == NULL) {
                Py_DECREF(names);
                unhandled("a control predecessor id no instruction has");
                goto failed;
            }
            Py_INCREF(found->name);
            PyList_SET_ITEM(names, i, found->name);
        }
        PyObject *text = joined_names(names, "%", ", ");
        Py_DECREF(names);
        if (!set_attr(attrs, K_CONTROL_PREDECESSORS, text)) goto failed;
    }
    if (f.has_metadata) {
        /* (text, op_name, source): each None when absent */
        PyObject *found = cached(&m->caches[CACHE_METADATA], m, f.metadata);
        if (found == NULL) goto failed;
        if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 3) {
            unhandled("metadata hook");
            goto failed;
        }
        PyObject *text = PyTuple_GET_ITEM(found, 0), *op_name = PyTuple_GET_ITEM(found, 1),
                 *source = PyTuple_GET_ITEM(found, 2);
        if (op_name != Py_None) set_value(values, I_OP_NAME, Py_NewRef(op_name));
        if (source != Py_None) set_value(values, I_SOURCE, Py_NewRef(source));
        if (text != Py_None && !set_attr(attrs, K_METADATA, Py_NewRef(text))) goto failed;
    }
    if (f.backend_config.end > f.backend_config.p) {
        /* (config, its attr text) */
        PyObject *found = cached(&m->caches[CACHE_BACKEND], m, f.backend_config);
        if (found == NULL) goto failed;
        if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 2) {
            unhandled("backend config hook");
            goto failed;
        }
        set_value(values, I_BACKEND_CONFIG, Py_NewRef(PyTuple_GET_ITEM(found, 0)));
        if (!set_attr(attrs, K_BACKEND_CONFIG, Py_NewRef(PyTuple_GET_ITEM(found, 1))))
            goto failed;
    }
    /* Not tracked by the cyclic collector: by the IR's types an instruction and its lists
       (names, shapes) can be part of no reference cycle, and a module's 10^4-10^5 of them
       made at once cost the collector's passes over them a third of the decode. */
    PyObject_GC_UnTrack(operands);
    PyObject_GC_UnTrack(shapes);
    PyObject_GC_UnTrack(called);
    for (int i = 0; i < I_COUNT; i++) {
        if (values[i] == NULL) values[i] = Py_XNewRef(instruction_layout.defaults[i]);
    }
    PyObject *made = make_object(&instruction_layout, values);
    if (made != NULL) PyObject_GC_UnTrack(made);
    return made;

python:
    for (int i = 0; i < I_COUNT; i++) Py_XDECREF(values[i]);
    return python_instruction(m, inst->bytes, is_root);
failed:
    for (int i = 0; i < I_COUNT; i++) Py_XDECREF(values[i]);
    return NULL;
}

/* ---- computations and the module ---- */

typedef struct {
    Span bytes, name, execution_thread;
    int64_t id, root_id;
    Py_ssize_t first, count; /* its instructions in Module.insts */
} Comp;

/* A computation's fields; instructions' spans, ids, names and shapes into `m`. The program
   shape (field 4) is appended, tag and all, to `rest` for upb to check. */
static int read_computation(Module *m, Comp *c, PyObject *rest) {
    const uint8_t *p = c->bytes.p, *end = c->bytes.end;
    c->first = m->n_insts;
    uint64_t seen = 0;
    while (p < end) {
        const uint8_t *start = p;
        uint64_t field, v;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return unhandled("a malformed computation");
        if (field == 2) {
            Span body;
            if (wire != WIRE_LEN || !read_len(&p, end, &body))
                return unhandled("a malformed instruction");
            if (m->n_insts == m->cap_insts) {
                Inst *grown = doubled(m->insts, &m->cap_insts, sizeof *grown, 256);
                if (grown == NULL) return 0;
                m->insts = grown;
            }
            Inst *inst = &m->insts[m->n_insts];
            *inst = (Inst){0, body, NULL, NULL};
            Span name = {NULL, NULL}, shape = {NULL, NULL};
            uint64_t inst_seen = 0;
            const uint8_t *q = body.p;
            while (q < body.end) {
                uint64_t f2;
                int w2;
                if (!read_tag(&q, body.end, &f2, &w2)) return unhandled("a malformed instruction");
                if (f2 == F_NAME || f2 == F_SHAPE) {
                    if (len_field(w2, &q, body.end, f2 == F_NAME ? &name : &shape, &inst_seen,
                                  f2) != 1)
                        return unhandled("an odd name or shape");
                } else if (f2 == F_ID) {
                    if (w2 != WIRE_VARINT || !read_varint(&q, body.end, &v))
                        return unhandled("an odd instruction id");
                    inst->id = (int64_t)v;
                } else if (!skip_wire_value(w2, &q, body.end)) {
                    return unhandled("a malformed instruction");
                }
            }
            if (name.p == NULL) name = (Span){body.p, body.p};
            if (shape.p == NULL) shape = (Span){body.p, body.p};
            inst->name = text_of(name);
            if (inst->name == NULL) return 0;
            m->n_insts++;
            inst->shape = cached(&m->caches[CACHE_SHAPE], m, shape);
            if (inst->shape == NULL) return 0;
            continue;
        }
        int ok;
        switch (field) {
        case 1: case 8:
            ok = len_field(wire, &p, end, field == 1 ? &c->name : &c->execution_thread, &seen,
                           field) == 1;
            break;
        case 4: { /* program_shape: checked here, or by upb */
            Span body;
            ok = wire == WIRE_LEN && read_len(&p, end, &body);
            if (ok && !check_message(body, program_shape_fields, 0) &&
                !append_bytes(rest, start, p))
                return 0;
            break;
        }
        case 5: case 6: case 7:
            ok = wire == WIRE_VARINT && read_varint(&p, end, &v);
            if (ok && field == 5) c->id = (int64_t)v;
            if (ok && field == 6) c->root_id = (int64_t)v;
            break;
        default:
            ok = skip_wire_value(wire, &p, end);
            break;
        }
        if (!ok) return unhandled("an odd computation field");
    }
    c->count = m->n_insts - c->first;
    return 1;
}

/* decode(data, wrapped, hooks) -> (name, entry, computations, rest, program shapes) */
static PyObject *decode(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    int wrapped;
    PyObject *hooks;
    if (instruction_layout.type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*pO", &view, &wrapped, &hooks)) return NULL;
    Module m;
    memset(&m, 0, sizeof m);
    m.hooks = hooks;
    Comp *comps = NULL;
    Py_ssize_t n_comps = 0, cap_comps = 0;
    PyObject *result = NULL, *module_rest = PyList_New(0), *comp_rest = PyList_New(0);
    PyObject *computations = NULL, *name = NULL, *entry = NULL;
    m.comp_names = PyDict_New();
    if (module_rest == NULL || comp_rest == NULL || m.comp_names == NULL)
        goto done;
    for (int i = 0; i < CACHE_COUNT; i++) {
        m.caches[i].build = cache_builders[i];
        if (cache_hooks[i] == NULL) continue;
        m.caches[i].make = PyObject_GetAttrString(hooks, cache_hooks[i]);
        if (m.caches[i].make == NULL) goto done;
    }

    Span module = {view.buf, (const uint8_t *)view.buf + view.len};
    if (wrapped) { /* HloProto: hlo_module = 1, once */
        const uint8_t *p = module.p, *end = module.end;
        int found = 0;
        Span body = {NULL, NULL};
        while (p < end) {
            uint64_t field;
            int wire;
            if (!read_tag(&p, end, &field, &wire)) goto malformed;
            if (field == 1) {
                if (wire != WIRE_LEN || found++ || !read_len(&p, end, &body)) goto malformed;
            } else if (!skip_wire_value(wire, &p, end)) {
                goto malformed;
            }
        }
        if (!found) goto malformed;
        module = body;
    }

    /* The module's own fields. */
    Span module_name = {NULL, NULL}, entry_name = {NULL, NULL};
    const uint8_t *frames_start = NULL, *frames_end = NULL;
    int frames_count = 0;
    int64_t entry_id = 0;
    uint64_t seen = 0;
    const uint8_t *p = module.p;
    while (p < module.end) {
        const uint8_t *start = p;
        uint64_t field, v;
        int wire, ok;
        if (!read_tag(&p, module.end, &field, &wire)) goto malformed;
        switch (field) {
        case 1: case 2:
            ok = len_field(wire, &p, module.end, field == 1 ? &module_name : &entry_name, &seen,
                           field) == 1;
            break;
        case 3:
            if (n_comps == cap_comps) {
                Comp *grown = doubled(comps, &cap_comps, sizeof *grown, 64);
                if (grown == NULL) goto done;
                comps = grown;
            }
            memset(&comps[n_comps], 0, sizeof *comps);
            ok = wire == WIRE_LEN && read_len(&p, module.end, &comps[n_comps++].bytes);
            break;
        case 5: case 6:
            ok = wire == WIRE_VARINT && read_varint(&p, module.end, &v);
            if (ok && field == 6) entry_id = (int64_t)v;
            break;
        case 17: /* stack_frame_index: made here when given once, else merged by upb */
            ok = wire == WIRE_LEN && skip_wire_value(wire, &p, module.end);
            if (ok && frames_count == 1) ok = append_bytes(module_rest, frames_start, frames_end);
            if (ok && frames_count >= 1) ok = append_bytes(module_rest, start, p);
            if (ok && frames_count == 0) {
                frames_start = start;
                frames_end = p;
            }
            frames_count++;
            break;
        case 4: case 15: case 19: /* for upb and decode.py */
            ok = wire == WIRE_LEN && skip_wire_value(wire, &p, module.end);
            if (ok && !append_bytes(module_rest, start, p)) goto done;
            break;
        default:
            ok = skip_wire_value(wire, &p, module.end);
            break;
        }
        if (!ok) goto malformed;
    }
    if (n_comps == 0) goto malformed;
    name = module_name.p ? text_of(module_name) : PyUnicode_FromString("");
    if (name == NULL) goto done;
    /* The module's stack frames (metadata reads them) and device assignment, first. */
    if (frames_count == 1) {
        const uint8_t *q = frames_start;
        uint64_t field;
        int wire;
        Span body;
        PyObject *frames = NULL;
        if (read_tag(&q, frames_end, &field, &wire) && read_len(&q, frames_end, &body))
            frames = build_frames(body);
        if (frames == NULL && !append_bytes(module_rest, frames_start, frames_end)) goto done;
        if (frames != NULL) {
            int failed = PyObject_SetAttrString(hooks, "frames", frames) < 0;
            Py_DECREF(frames);
            if (failed) goto done;
        }
    }
    PyObject *head = PyObject_CallMethod(hooks, "head", "O", module_rest);
    if (head == NULL) goto done;
    Py_DECREF(head);

    for (Py_ssize_t i = 0; i < n_comps; i++) {
        if (!read_computation(&m, &comps[i], comp_rest)) goto done;
        PyObject *id = PyLong_FromLongLong(comps[i].id);
        PyObject *cname = comps[i].name.p ? text_of(comps[i].name) : PyUnicode_FromString("");
        int failed = id == NULL || cname == NULL || PyDict_SetItem(m.comp_names, id, cname) < 0;
        Py_XDECREF(id);
        Py_XDECREF(cname);
        if (failed) goto done;
    }
    PyObject *checked = PyObject_CallMethod(hooks, "computations", "O", comp_rest);
    if (checked == NULL) goto done;
    Py_DECREF(checked);

    /* Instruction ids are unique in a module. */
    int64_t min_id = INT64_MAX, max_id = INT64_MIN;
    for (Py_ssize_t i = 0; i < m.n_insts; i++) {
        if (m.insts[i].id < min_id) min_id = m.insts[i].id;
        if (m.insts[i].id > max_id) max_id = m.insts[i].id;
    }
    m.dense = m.n_insts > 0 && (uint64_t)max_id - (uint64_t)min_id < 4 * (uint64_t)m.n_insts + 1024;
    m.min_id = min_id;
    if (m.dense) {
        m.index_cap = (Py_ssize_t)((uint64_t)max_id - (uint64_t)min_id) + 1;
    } else {
        m.index_cap = 16;
        while (m.index_cap < 2 * m.n_insts) m.index_cap *= 2;
    }
    m.index = PyMem_Calloc((size_t)m.index_cap, sizeof *m.index);
    if (m.index == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < m.n_insts; i++) {
        Py_ssize_t k = m.dense ? (Py_ssize_t)((uint64_t)m.insts[i].id - (uint64_t)min_id)
                               : index_slot(&m, m.insts[i].id);
        if (m.index[k]) {
            unhandled("repeated instruction ids");
            goto done;
        }
        m.index[k] = i + 1;
    }

    if (entry_name.end > entry_name.p) {
        entry = text_of(entry_name);
    } else {
        PyObject *id = PyLong_FromLongLong(entry_id);
        if (id == NULL) goto done;
        entry = PyDict_GetItemWithError(m.comp_names, id);
        Py_DECREF(id);
        if (entry == NULL && PyErr_Occurred()) goto done;
        entry = Py_NewRef(entry != NULL ? entry : Py_None);
    }
    if (entry == NULL) goto done;

    computations = PyList_New(n_comps);
    if (computations == NULL) goto done;
    for (Py_ssize_t i = 0; i < n_comps; i++) {
        Comp *c = &comps[i];
        PyObject *values[C_COUNT] = {NULL, NULL, NULL, NULL};
        values[C_NAME] = c->name.p ? text_of(c->name) : PyUnicode_FromString("");
        values[C_EXECUTION_THREAD] =
            c->execution_thread.p ? text_of(c->execution_thread) : PyUnicode_FromString("");
        values[C_INSTRUCTIONS] = PyList_New(c->count);
        int failed = values[C_NAME] == NULL || values[C_EXECUTION_THREAD] == NULL ||
                     values[C_INSTRUCTIONS] == NULL;
        if (!failed) {
            int is_entry = entry != Py_None && PyUnicode_Compare(values[C_NAME], entry) == 0;
            values[C_IS_ENTRY] = PyBool_FromLong(is_entry);
        }
        for (Py_ssize_t k = 0; !failed && k < c->count; k++) {
            const Inst *inst = &m.insts[c->first + k];
            PyObject *built = instruction(&m, inst, inst->id == c->root_id);
            if (built == NULL) failed = 1;
            else PyList_SET_ITEM(values[C_INSTRUCTIONS], k, built);
        }
        if (failed) {
            for (int k = 0; k < C_COUNT; k++) Py_XDECREF(values[k]);
            goto done;
        }
        /* Untracked, as its instructions: by the IR's types a computation and its list of
           instructions can be part of no reference cycle. */
        PyObject_GC_UnTrack(values[C_INSTRUCTIONS]);
        PyObject *comp = make_object(&computation_layout, values);
        if (comp == NULL) goto done;
        PyObject_GC_UnTrack(comp);
        PyList_SET_ITEM(computations, i, comp);
    }
    result = PyTuple_Pack(3, name, entry, computations);
    goto done;

malformed:
    if (!PyErr_Occurred()) unhandled("malformed or unusual bytes");
done:
    Py_XDECREF(name);
    Py_XDECREF(entry);
    Py_XDECREF(computations);
    Py_XDECREF(module_rest);
    Py_XDECREF(comp_rest);
    PyMem_Free(comps);
    module_free(&m);
    PyBuffer_Release(&view);
    return result;
}

/* setup(Instruction, its field names, its defaults, Computation, its field names, its
         defaults, then (class, field names) of
         SliceDim, Shape, Layout, FileLocation, StackFrame, StackFrameIndex, DotDims; element
         names) */
static PyObject *setup(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *inst, *inst_defaults, *comp, *comp_defaults, *slice_dim, *shape, *layout, *names,
        *file_location, *stack_frame, *stack_frame_index, *dot_dims;
    PyObject *inst_fields, *comp_fields;
    if (!PyArg_ParseTuple(args, "OOOOOOO!O!O!O!O!O!O!O!", &inst, &inst_fields, &inst_defaults,
                          &comp, &comp_fields, &comp_defaults, &PyTuple_Type, &slice_dim,
                          &PyTuple_Type, &shape, &PyTuple_Type, &layout, &PyTuple_Type,
                          &file_location, &PyTuple_Type, &stack_frame, &PyTuple_Type,
                          &stack_frame_index, &PyTuple_Type, &dot_dims, &PyDict_Type, &names))
        return NULL;
    for (size_t i = 0; i < sizeof opcodes / sizeof *opcodes; i++)
        opcode_lengths[i] = strlen(opcodes[i].name);
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL || !set_frozen(&shape_class, shape, 5) ||
        !set_frozen(&layout_class, layout, 6) || !set_frozen(&slice_dim_class, slice_dim, 3) ||
        !set_frozen(&file_location_class, file_location, 6) ||
        !set_frozen(&stack_frame_class, stack_frame, 2) ||
        !set_frozen(&stack_frame_index_class, stack_frame_index, 4) ||
        !set_frozen(&dot_dims_class, dot_dims, 4))
        return NULL;
    element_names = Py_NewRef(names);
    if (!set_layout(&instruction_layout, inst, inst_fields, inst_defaults, instruction_fields,
                    I_COUNT) ||
        !set_layout(&computation_layout, comp, comp_fields, comp_defaults, computation_fields,
                    C_COUNT))
        return NULL;
    percent = PyUnicode_InternFromString("%");
    if (percent == NULL) return NULL;
    for (int i = 0; i < S_COUNT; i++) {
        strings[i] = PyUnicode_InternFromString(string_values[i]);
        if (strings[i] == NULL) return NULL;
    }
    Py_RETURN_NONE;
}


static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "The IR classes whose objects decode makes."},
    {"decode", decode, METH_VARARGS, "A serialized HLO module's name, entry and computations."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_hlodecode", "Serialized HLO modules decoded into hlogap's IR.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hlodecode(void) { return PyModule_Create(&module_def); }
