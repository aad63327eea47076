/* Columnar decoding of one serialized XLine, straight from its bytes.

   The numpy decoder (columnar.py) needs upb to split a line into one Python bytes object per
   event first, then copies them into one array; here a line's events are walked once in place
   and their few wanted fields written into int64 columns. The wire format is protobuf's
   (https://protobuf.dev/programming-guides/encoding/), the messages xplane.proto's:

     XLine:  id=1, display_id=10, name=2, display_name=11, timestamp_ns=3, duration_ps=9,
             events=4 (repeated XEvent)
     XEvent: metadata_id=1, offset_ps=2 | num_occurrences=5, duration_ps=3, stats=4
     XStat:  metadata_id=1, double=2, uint64=3, int64=4, str=5, bytes=6, ref=7

   Fields may come in any order, a repeated scalar's last value wins, unknown fields are
   skipped, as upb does. An event this decoder does not answer for (a wanted stat that is not
   an integer, a uint64 past int64's range, num_occurrences, anything malformed) is returned
   with its bytes for upb to read: an odd file is slower, never wrong. A malformed line (an
   event running past its end) raises ValueError; the caller lets upb say what is wrong. Every
   read is checked against the end of the buffer it belongs to. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_protowire.h"

#define ABSENT INT64_MIN

/* Skip an unknown field's value of wire type `wire`; 0 if malformed: a field number outside
   1..2^29-1 (invalid on the wire), a value past the end, a group (upb decides). */
static int skip_value(uint64_t field, int wire, const uint8_t **p, const uint8_t *end) {
    return field != 0 && field < (1u << 29) && skip_wire_value(wire, p, end);
}

/* The stat metadata ids asked for (a negative id is never in a file), and for small ids the
   slot of each: a stat's id is looked up once, not compared with every wanted id. */
#define SMALL_IDS 4096
typedef struct {
    Py_ssize_t count;
    int64_t ids[64];
    int8_t slot[SMALL_IDS]; /* -1: not wanted */
    int repeated;           /* an id asked for twice: every slot is searched */
} Wanted;

enum { KIND_NONE, KIND_INTEGER, KIND_UINT64, KIND_OTHER };

/* A wanted stat's value; 0 if it is not an int64 (upb reads the event). */
static inline int store_stat(int kind, uint64_t value, int64_t *slot) {
    if (kind == KIND_OTHER || (kind == KIND_UINT64 && value >> 63)) return 0;
    /* No value: the numpy decoder's reading too (a zero value omitted on the wire). */
    *slot = kind == KIND_NONE ? 0 : (int64_t)value;
    return 1;
}

/* One XStat: if its metadata id is wanted, store its integer value in `stats` at `row`.
   0: an event upb must read (the stat is malformed, or a wanted one holds no int64). */
static int read_stat(const uint8_t *p, const uint8_t *end, const Wanted *wanted,
                     int64_t *stats, Py_ssize_t n, Py_ssize_t row) {
    /* Most stats are a one-byte id and one integer value, in that order (08 id, then 18, 20
       or 38 and a varint): read straight, without the general walk. */
    if (end - p >= 4 && p[0] == 0x08 && p[1] < 0x80 && !wanted->repeated &&
        (p[2] == 0x18 || p[2] == 0x20 || p[2] == 0x38)) {
        const uint8_t *q = p + 3;
        uint64_t value;
        if (read_varint(&q, end, &value) && q == end) {
            int k = wanted->slot[p[1]];
            return k < 0 ||
                   store_stat(p[2] == 0x18 ? KIND_UINT64 : KIND_INTEGER, value, stats + k * n + row);
        }
    }
    int64_t stat_id = -1;
    int kind = KIND_NONE;
    uint64_t value = 0;
    while (p < end) {
        uint64_t tag, v;
        if (!read_varint(&p, end, &tag)) return 0;
        uint64_t field = tag >> 3;
        int wire = (int)(tag & 7);
        if (wire == WIRE_VARINT && (field == 1 || field == 3 || field == 4 || field == 7)) {
            if (!read_varint(&p, end, &v)) return 0;
            if (field == 1) {
                stat_id = (int64_t)v;
            } else {
                kind = field == 3 ? KIND_UINT64 : KIND_INTEGER;
                value = v;
            }
        } else {
            if (!skip_value(field, wire, &p, end)) return 0;
            if ((field == 2 && wire == WIRE_FIXED64) ||
                ((field == 5 || field == 6) && wire == WIRE_LEN))
                kind = KIND_OTHER;
        }
    }
    if (stat_id >= 0 && stat_id < SMALL_IDS && !wanted->repeated) {
        int k = wanted->slot[stat_id];
        if (k >= 0) return store_stat(kind, value, stats + k * n + row);
        return 1;
    }
    for (Py_ssize_t k = 0; k < wanted->count; k++)
        if (wanted->ids[k] == stat_id && !store_stat(kind, value, stats + k * n + row)) return 0;
    return 1;
}

/* One XEvent into row `row` of the columns; 0: an event upb must read. */
static int read_event(const uint8_t *p, const uint8_t *end, const Wanted *wanted,
                      int64_t *columns, Py_ssize_t n, Py_ssize_t row) {
    while (p < end) {
        uint64_t tag, v;
        const uint8_t *body, *body_end;
        if (!read_varint(&p, end, &tag)) return 0;
        uint64_t field = tag >> 3;
        int wire = (int)(tag & 7);
        if (wire == WIRE_VARINT && field >= 1 && field <= 3) {
            if (!read_varint(&p, end, &v)) return 0;
            columns[(field - 1) * n + row] = (int64_t)v;
        } else if (wire == WIRE_VARINT && field == 5) {
            return 0; /* num_occurrences: an aggregated event, read whole by upb */
        } else if (wire == WIRE_LEN && field == 4) {
            if (!read_payload(&p, end, &body, &body_end)) return 0;
            if (!read_stat(body, body_end, wanted, columns + 3 * n, n, row)) return 0;
        } else if (!skip_value(field, wire, &p, end)) {
            return 0;
        }
    }
    return 1;
}

typedef struct {
    int64_t id, display_id, timestamp_ns, duration_ps;
    const uint8_t *name, *name_end, *display_name, *display_name_end;
    Py_ssize_t events;
} Head;

/* The head walk hands a mapped line's pages back every RELEASE_BYTES it has walked: a line of
   178 MB is otherwise all resident before its first event is decoded. */
#define RELEASE_BYTES ((Py_ssize_t)16 << 20)

/* forget(at, size), bytes of the line from its start; 0 with an exception set. */
static int call_forget(PyObject *forget, Py_ssize_t at, Py_ssize_t size) {
    PyObject *done = PyObject_CallFunction(forget, "nn", at, size);
    Py_XDECREF(done);
    return done != NULL;
}

/* Walk a line's fields for its head (the events only counted); with `forget` (else NULL),
   forget(at, size) is called for each RELEASE_BYTES walked, the line's tail left mapped (its
   events are decoded next). 0 with an exception set. */
static int walk_head(const uint8_t *start, const uint8_t *end, Head *head, PyObject *forget) {
    const uint8_t *p = start, *released = start;
    memset(head, 0, sizeof(*head));
    while (p < end) {
        uint64_t tag, v;
        const uint8_t *body, *body_end;
        if (!read_varint(&p, end, &tag)) goto malformed;
        uint64_t field = tag >> 3;
        int wire = (int)(tag & 7);
        if (wire == WIRE_LEN && field == 4) {
            if (!read_payload(&p, end, &body, &body_end)) goto malformed;
            head->events++;
        } else if (wire == WIRE_VARINT && (field == 1 || field == 10 || field == 3 || field == 9)) {
            if (!read_varint(&p, end, &v)) goto malformed;
            int64_t *slot = field == 1    ? &head->id
                            : field == 10 ? &head->display_id
                            : field == 3  ? &head->timestamp_ns
                                          : &head->duration_ps;
            *slot = (int64_t)v;
        } else if (wire == WIRE_LEN && (field == 2 || field == 11)) {
            if (!read_payload(&p, end, &body, &body_end)) goto malformed;
            if (field == 2) {
                head->name = body;
                head->name_end = body_end;
            } else {
                head->display_name = body;
                head->display_name_end = body_end;
            }
        } else if (!skip_value(field, wire, &p, end)) {
            goto malformed;
        }
        if (forget != NULL && p - released >= RELEASE_BYTES) {
            if (!call_forget(forget, released - start, p - released)) return 0;
            released = p;
        }
    }
    return 1;
malformed:
    PyErr_SetString(PyExc_ValueError, "malformed XLine");
    return 0;
}

/* Decode the next `n` events from *p into rows 0..n-1 of `columns`, passing over the line's
   other fields (walk_head read them), the events upb must read appended to `irregular` as
   (row, bytes); *p is left just past the n-th event. 0 with an exception set. */
static int walk_events(const uint8_t **p, const uint8_t *end, const Wanted *wanted,
                       int64_t *columns, Py_ssize_t n, PyObject *irregular) {
    Py_ssize_t row = 0;
    while (row < n && *p < end) {
        uint64_t tag;
        const uint8_t *body, *body_end;
        if (!read_varint(p, end, &tag)) goto malformed;
        uint64_t field = tag >> 3;
        int wire = (int)(tag & 7);
        if (wire != WIRE_LEN || field != 4) {
            if (!skip_value(field, wire, p, end)) goto malformed;
            continue;
        }
        if (!read_payload(p, end, &body, &body_end)) goto malformed;
        if (!read_event(body, body_end, wanted, columns, n, row)) {
            PyObject *item =
                Py_BuildValue("(ny#)", row, (const char *)body, (Py_ssize_t)(body_end - body));
            if (item == NULL) return 0;
            int failed = PyList_Append(irregular, item);
            Py_DECREF(item);
            if (failed) return 0;
        }
        row++;
    }
    if (row == n) return 1;
    PyErr_SetString(PyExc_ValueError, "the line has fewer events than out's length");
    return 0;
malformed:
    PyErr_SetString(PyExc_ValueError, "malformed XLine");
    return 0;
}

static PyObject *utf8(const uint8_t *start, const uint8_t *end) {
    if (start == NULL) return PyUnicode_FromStringAndSize("", 0);
    return PyUnicode_DecodeUTF8((const char *)start, (Py_ssize_t)(end - start), "strict");
}

/* line_head(data, forget) -> (id, display_id, name, display_name, timestamp_ns, duration_ps,
   events); forget None, or called as forget(at, size) on the bytes walked (walk_head). */
static PyObject *line_head(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    PyObject *forget;
    Head head;
    if (!PyArg_ParseTuple(args, "y*O", &data, &forget)) return NULL;
    const uint8_t *start = (const uint8_t *)data.buf;
    PyObject *result = NULL;
    if (walk_head(start, start + data.len, &head, forget == Py_None ? NULL : forget)) {
        PyObject *name = utf8(head.name, head.name_end);
        PyObject *display_name = name ? utf8(head.display_name, head.display_name_end) : NULL;
        if (name && display_name)
            result = Py_BuildValue("(LLOOLLn)", (long long)head.id, (long long)head.display_id,
                                   name, display_name, (long long)head.timestamp_ns,
                                   (long long)head.duration_ps, head.events);
        Py_XDECREF(name);
        Py_XDECREF(display_name);
    }
    PyBuffer_Release(&data);
    return result;
}

/* line_columns(data, wanted, out, at) -> (end, irregular): the events that begin at byte `at`
   of the line (0, or the `end` a previous call returned) into `out`, a writable buffer of int64
   rows (metadata_id, offset_ps, duration_ps, then one per wanted stat id, ABSENT where an event
   lacks it), as many events as the rows are long; `end` is the byte just past the last of
   them, irregular a list of (row, event bytes). The caller allocates `out` (numpy: huge pages
   for large arrays, where first-touch page faults otherwise cost as much as the decoding). */
static PyObject *line_columns(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    PyObject *wanted_seq;
    Py_ssize_t at;
    Wanted wanted;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*Ow*n", &data, &wanted_seq, &out, &at)) return NULL;
    PyObject *irregular = NULL, *fast = NULL, *result = NULL;
    fast = PySequence_Fast(wanted_seq, "wanted must be a sequence of ints");
    if (fast == NULL) goto done;
    wanted.count = PySequence_Fast_GET_SIZE(fast);
    if (wanted.count > 64) {
        PyErr_SetString(PyExc_ValueError, "at most 64 wanted stats");
        goto done;
    }
    memset(wanted.slot, -1, sizeof(wanted.slot));
    wanted.repeated = 0;
    for (Py_ssize_t k = 0; k < wanted.count; k++) {
        int64_t id = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, k));
        if (id == -1 && PyErr_Occurred()) goto done;
        wanted.ids[k] = id;
        if (id < 0) continue;
        for (Py_ssize_t j = 0; j < k; j++) wanted.repeated |= wanted.ids[j] == id;
        if (id < SMALL_IDS) wanted.slot[id] = (int8_t)k;
        else wanted.repeated = 1; /* a large id: search the slots */
    }
    Py_ssize_t rows = 3 + wanted.count;
    if (out.len % (8 * rows) != 0) {
        PyErr_SetString(PyExc_ValueError, "out is not rows of int64");
        goto done;
    }
    if (at < 0 || at > data.len) {
        PyErr_SetString(PyExc_ValueError, "at is not within the line");
        goto done;
    }
    Py_ssize_t n = out.len / (8 * rows);
    int64_t *columns = (int64_t *)out.buf;
    memset(columns, 0, (size_t)(3 * n) * 8);
    for (Py_ssize_t i = 3 * n; i < rows * n; i++) columns[i] = ABSENT;
    irregular = PyList_New(0);
    if (irregular == NULL) goto done;
    const uint8_t *start = (const uint8_t *)data.buf, *p = start + at;
    if (walk_events(&p, start + data.len, &wanted, columns, n, irregular))
        result = Py_BuildValue("(nO)", (Py_ssize_t)(p - start), irregular);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    Py_XDECREF(fast);
    Py_XDECREF(irregular);
    return result;
}

/* Walk an XPlane's top-level fields: each `lines` (field 3) payload's span, and the other
   fields' bytes (when `head` is given, copied there). 0 if malformed. */
static int walk_plane(const uint8_t *start, const uint8_t *end, Py_ssize_t *head_size,
                      Py_ssize_t *lines, uint8_t *head, PyObject *spans) {
    const uint8_t *p = start;
    *head_size = 0;
    *lines = 0;
    while (p < end) {
        const uint8_t *field_start = p, *body, *body_end;
        uint64_t tag;
        if (!read_varint(&p, end, &tag)) return 0;
        uint64_t field = tag >> 3;
        int wire = (int)(tag & 7);
        if (field == 3 && wire == WIRE_LEN) {
            if (!read_payload(&p, end, &body, &body_end)) return 0;
            if (spans != NULL) {
                PyObject *span = Py_BuildValue("(nn)", (Py_ssize_t)(body - start),
                                               (Py_ssize_t)(body_end - start));
                if (span == NULL) return -1;
                int failed = PyList_Append(spans, span);
                Py_DECREF(span);
                if (failed) return -1;
            }
            (*lines)++;
            continue;
        }
        if (!skip_value(field, wire, &p, end)) return 0;
        if (head != NULL) memcpy(head + *head_size, field_start, (size_t)(p - field_start));
        *head_size += p - field_start;
    }
    return 1;
}

/* plane_lines(data) -> (head, spans): an XPlane without its lines (for upb: the metadata), and
   each line's (start, end) in `data`, so that lines are views of the plane's bytes, not copies
   (upb copies every line into its arena, and again into a bytes object each time one is read).
   ValueError if malformed: the caller lets upb say what is wrong. */
static PyObject *plane_lines(PyObject *self, PyObject *arg) {
    Py_buffer data;
    Py_ssize_t head_size, lines;
    (void)self;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *start = (const uint8_t *)data.buf, *end = start + data.len;
    PyObject *head = NULL, *spans = NULL, *result = NULL;
    int walked = walk_plane(start, end, &head_size, &lines, NULL, NULL);
    if (walked == 1) {
        head = PyBytes_FromStringAndSize(NULL, head_size);
        spans = PyList_New(0);
        if (head != NULL && spans != NULL)
            walked = walk_plane(start, end, &head_size, &lines,
                                (uint8_t *)PyBytes_AS_STRING(head), spans);
        else
            walked = -1;
    }
    if (walked == 1)
        result = PyTuple_Pack(2, head, spans);
    else if (walked == 0)
        PyErr_SetString(PyExc_ValueError, "malformed XPlane");
    Py_XDECREF(head);
    Py_XDECREF(spans);
    PyBuffer_Release(&data);
    return result;
}

#ifndef _WIN32
#include <signal.h>
#include <unistd.h>

/* A mapped profile that shrinks under its reader (truncated while it is read) faults with
   SIGBUS on its missing pages; the access would fault again on return, so the handler says so
   in one line and ends the process with the input-error code. */
static char sigbus_message[1024];
static size_t sigbus_length;

static void on_sigbus(int signum) {
    (void)signum;
    ssize_t written = write(2, sigbus_message, sigbus_length);
    (void)written;
    _exit(3);
}
#endif

/* exit_on_sigbus(message) -> bool: from now on a SIGBUS writes `message` to stderr and exits
   with 3; False where there is no SIGBUS to catch (Windows). */
static PyObject *exit_on_sigbus(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer message;
    if (PyObject_GetBuffer(arg, &message, PyBUF_SIMPLE) < 0)
        return NULL;
#ifndef _WIN32
    size_t n = (size_t)message.len < sizeof sigbus_message ? (size_t)message.len
                                                           : sizeof sigbus_message;
    memcpy(sigbus_message, message.buf, n);
    sigbus_length = n;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigbus;
    sigemptyset(&action.sa_mask);
    int failed = sigaction(SIGBUS, &action, NULL);
    PyBuffer_Release(&message);
    return PyBool_FromLong(failed == 0);
#else
    PyBuffer_Release(&message);
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"line_head", line_head, METH_VARARGS, "A serialized XLine's head fields and event count."},
    {"plane_lines", plane_lines, METH_O, "A serialized XPlane's lines as spans, and the rest."},
    {"line_columns", line_columns, METH_VARARGS, "A serialized XLine's events in columns."},
    {"exit_on_sigbus", exit_on_sigbus, METH_O, "On SIGBUS: write the message, exit with 3."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_xline", "Columnar decoding of serialized XLines.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__xline(void) { return PyModule_Create(&module); }
