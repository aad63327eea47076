/* The step pass's saving columns summed per window in one pass (hlogap.trace.steps).

   window_sums(window, ps, op, kept, out, block_starts) adds to out[c, w], for every piece i
   and column c, its time ps[i] times kept[c, op[i]] (the share of its op's time column c
   would save), in the order numpy's path sums each column: np.bincount over each block (a
   sum per window, piece by piece from 0.0), each block's sums then added to `out`. window
   and op: int32 per piece; ps: float64 per piece; kept: float64 (columns, ops); out: float64
   (columns, windows); block_starts: int64, ascending from 0. The same products in the same
   order give the same doubles: built with -ffp-contract=off, no multiply-add is fused; a
   product of 0 (an op a change leaves alone) is skipped, as adding it changes no sum.
   numpy's path is three passes over millions of pieces a column (a gather, a product, the
   bincount); this is one for every column.

   longest_per_op(op, length, out, k) writes into out the indices of each op's k longest
   items (a tie: the earlier first), ordered by op, then longest first, then index: what a
   stable sort by (op, -length) keeps of each op's first k (the step pass's longest idle gaps
   by the op that ends them), in one pass where the sort took ~1 ms per 25 k gaps. op: int32,
   length: int64 per item; out: int64, k slots per op (op values index it); returns how many
   it wrote. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int check(Py_buffer *view, Py_ssize_t item, const char *name) {
    if (view->len % item) {
        PyErr_Format(PyExc_ValueError, "%s: not an array of %zd-byte items", name, item);
        return -1;
    }
    return 0;
}

static PyObject *window_sums(PyObject *self, PyObject *args) {
    Py_buffer window, ps, op, kept, out, starts;
    Py_ssize_t columns;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*y*n", &window, &ps, &op, &kept, &out, &starts,
                          &columns))
        return NULL;
    PyObject *result = NULL;
    double *partial = NULL;
    if (check(&window, sizeof(int32_t), "window") || check(&ps, sizeof(double), "ps") ||
        check(&op, sizeof(int32_t), "op") || check(&kept, sizeof(double), "kept") ||
        check(&out, sizeof(double), "out") || check(&starts, sizeof(int64_t), "block_starts"))
        goto done;
    Py_ssize_t pieces = ps.len / (Py_ssize_t)sizeof(double);
    Py_ssize_t blocks = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (columns < 1 || kept.len % (columns * (Py_ssize_t)sizeof(double)) ||
        out.len % (columns * (Py_ssize_t)sizeof(double))) {
        PyErr_SetString(PyExc_ValueError, "kept and out: not `columns` rows each");
        goto done;
    }
    Py_ssize_t ops = kept.len / (Py_ssize_t)sizeof(double) / columns;
    Py_ssize_t windows = out.len / (Py_ssize_t)sizeof(double) / columns;
    const int32_t *w = window.buf, *o = op.buf;
    const double *p = ps.buf, *k = kept.buf;
    const int64_t *low = starts.buf;
    double *sums = out.buf;
    if (window.len / (Py_ssize_t)sizeof(int32_t) != pieces ||
        op.len / (Py_ssize_t)sizeof(int32_t) != pieces) {
        PyErr_SetString(PyExc_ValueError, "window, ps and op differ in length");
        goto done;
    }
    for (Py_ssize_t b = 0; b < blocks; b++) {
        int64_t high = b + 1 < blocks ? low[b + 1] : pieces;
        if (low[b] < 0 || low[b] > high || high > pieces || (b == 0 && low[b] != 0)) {
            PyErr_SetString(PyExc_ValueError, "block_starts: not ascending from 0 in range");
            goto done;
        }
    }
    Py_ssize_t cells = columns * windows;
    partial = calloc(cells ? (size_t)cells : 1, sizeof(double));
    if (!partial) {
        PyErr_NoMemory();
        goto done;
    }
    int out_of_range = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < blocks && !out_of_range; b++) {
        int64_t high = b + 1 < blocks ? low[b + 1] : pieces;
        memset(partial, 0, (size_t)cells * sizeof(double));
        for (int64_t i = low[b]; i < high; i++) {
            if (w[i] < 0 || w[i] >= windows || o[i] < 0 || o[i] >= ops) {
                out_of_range = 1;
                break;
            }
            for (Py_ssize_t c = 0; c < columns; c++) {
                double saved = p[i] * k[c * ops + o[i]];
                if (saved != 0.0) partial[c * windows + w[i]] += saved;
            }
        }
        for (Py_ssize_t j = 0; j < cells; j++) sums[j] += partial[j];
    }
    Py_END_ALLOW_THREADS
    if (out_of_range) {
        PyErr_SetString(PyExc_IndexError, "window or op out of range");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    free(partial);
    PyBuffer_Release(&window);
    PyBuffer_Release(&ps);
    PyBuffer_Release(&op);
    PyBuffer_Release(&kept);
    PyBuffer_Release(&out);
    PyBuffer_Release(&starts);
    return result;
}

static PyObject *longest_per_op(PyObject *self, PyObject *args) {
    Py_buffer op, length, out;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "y*y*w*n", &op, &length, &out, &k)) return NULL;
    PyObject *result = NULL;
    if (check(&op, sizeof(int32_t), "op") || check(&length, sizeof(int64_t), "length") ||
        check(&out, sizeof(int64_t), "out"))
        goto done;
    Py_ssize_t items = op.len / (Py_ssize_t)sizeof(int32_t);
    Py_ssize_t slots = out.len / (Py_ssize_t)sizeof(int64_t);
    if (length.len / (Py_ssize_t)sizeof(int64_t) != items || k < 1 || slots % k) {
        PyErr_SetString(PyExc_ValueError, "op and length differ in length, or out is not k slots an op");
        goto done;
    }
    const int32_t *o = op.buf;
    const int64_t *len = length.buf;
    int64_t *kept = out.buf;
    Py_ssize_t ops = slots / k, written = 0;
    int out_of_range = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < slots; j++) kept[j] = -1;
    for (Py_ssize_t i = 0; i < items; i++) {
        if (o[i] < 0 || o[i] >= ops) {
            out_of_range = 1;
            break;
        }
        int64_t *best = kept + (Py_ssize_t)o[i] * k;
        /* Its place among the op's kept, longest first: after every one at least as long. */
        Py_ssize_t at = 0;
        while (at < k && best[at] >= 0 && len[best[at]] >= len[i]) at++;
        if (at == k) continue;
        memmove(best + at + 1, best + at, (size_t)(k - at - 1) * sizeof(int64_t));
        best[at] = i;
    }
    for (Py_ssize_t j = 0; j < slots && !out_of_range; j++)
        if (kept[j] >= 0) kept[written++] = kept[j];
    Py_END_ALLOW_THREADS
    if (out_of_range) {
        PyErr_SetString(PyExc_IndexError, "op out of range");
        goto done;
    }
    result = PyLong_FromSsize_t(written);
done:
    PyBuffer_Release(&op);
    PyBuffer_Release(&length);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"window_sums", window_sums, METH_VARARGS,
     "Add each piece's time times its op's kept share to its window's sum in every column, "
     "a block at a time."},
    {"longest_per_op", longest_per_op, METH_VARARGS,
     "The indices of each op's k longest items, by op, then longest first, then index."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_windowsums", "The step pass's saving columns summed per window, and its longest gaps per op.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__windowsums(void) { return PyModule_Create(&module); }
