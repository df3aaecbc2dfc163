/* The two loops of the .ireeprof bundle reader that touch every byte of a
 * profile: walking its records, and splitting its host execution events
 * (152 bytes each, a million per million dispatches) into the compact tables
 * of sectionmark.profiling.ireeprof. numpy needs one pass over the file per
 * field for the second; this does it in one. Built when a C compiler is
 * present; ireeprof.py does the same with numpy when it is not, and
 * tests/test_ireeprof_fast.py checks that both give identical results.
 *
 * No numpy C API: the caller allocates the output arrays and passes them as
 * writable buffers; all validation (and every error message) stays in Python,
 * which gets the first offending index of each kind.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .ireeprof layout is little-endian; the numpy reader handles other hosts"
#endif

#define RECORD_HEADER_SIZE 104
#define HOST_EVENT_SIZE 152
#define DISPATCH_SIZE 56   /* ireeprof.DISPATCH_DTYPE */
#define SUBMISSION_SIZE 32 /* ireeprof.SUBMISSION_DTYPE */
#define QUEUE_OP_SIZE 36   /* ireeprof.QUEUE_OP_DTYPE */
#define EVENT_DISPATCH 2
#define EVENT_EXECUTE 3
#define EVENT_TYPES 11

static uint32_t u32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t u64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* record_offsets(data, start, end) -> bytes: the int64 offsets of the records of data[start:end].
 * The walk stops after a record whose header is cut short or whose length is below a header's or
 * runs past ``end``: its offset is the last one, for the caller to report. */
static PyObject *record_offsets(PyObject *module, PyObject *args) {
    Py_buffer data;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &data, &start, &end)) return NULL;
    if (start < 0 || end > data.len || start > end) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "record_offsets: range outside the data");
        return NULL;
    }
    Py_ssize_t capacity = 1024, count = 0;
    int64_t *offsets = PyMem_Malloc(capacity * sizeof(int64_t));
    const char *bytes = data.buf;
    Py_ssize_t offset = start;
    while (offsets && offset < end) {
        if (count == capacity) {
            capacity *= 2;
            int64_t *grown = PyMem_Realloc(offsets, capacity * sizeof(int64_t));
            if (!grown) { PyMem_Free(offsets); offsets = NULL; break; }
            offsets = grown;
        }
        offsets[count++] = offset;
        if (end - offset < RECORD_HEADER_SIZE) break;
        uint64_t length = u64(bytes + offset);
        if (length < RECORD_HEADER_SIZE || length > (uint64_t)(end - offset)) break;
        offset += (Py_ssize_t)length;
    }
    PyBuffer_Release(&data);
    if (!offsets) return PyErr_NoMemory();
    PyObject *result = PyBytes_FromStringAndSize((const char *)offsets, count * (Py_ssize_t)sizeof(int64_t));
    PyMem_Free(offsets);
    return result;
}

/* host_events(data, positions, dispatches, submissions, queue_ops, streams, event_ids, executables, ordinals)
 *   -> (dispatch rows, submission rows, queue-op rows, first bad length, first bad type, first failed)
 *
 * ``positions`` (int64): byte offset of each record in ``data``. Each record goes to
 * the dispatch, submission or queue-op table by its type (``key`` of a dispatch row is left 0; its
 * executable id and function ordinal go to ``executables``/``ordinals``); every record's stream and
 * event id go to ``streams``/``event_ids``. The last three: index of the first record whose length is
 * not 152, whose type is unknown, whose status is not OK; -1 for none. */
static PyObject *host_events(PyObject *module, PyObject *args) {
    Py_buffer in[2], out[7];
    int got_in = 0, got_out = 0;
    PyObject *objects[9];
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &objects[6], &objects[7], &objects[8]))
        return NULL;
    for (; got_in < 2; got_in++)
        if (PyObject_GetBuffer(objects[got_in], &in[got_in], PyBUF_SIMPLE) < 0) goto done;
    for (; got_out < 7; got_out++)
        if (PyObject_GetBuffer(objects[2 + got_out], &out[got_out], PyBUF_SIMPLE | PyBUF_WRITABLE) < 0) goto done;
    {
        const char *bytes = in[0].buf;
        const int64_t *positions = in[1].buf;
        Py_ssize_t total = in[1].len / (Py_ssize_t)sizeof(int64_t);
        for (Py_ssize_t i = 0; i < total; i++) {
            if (positions[i] < 0 || positions[i] > in[0].len - HOST_EVENT_SIZE) {
                PyErr_SetString(PyExc_ValueError, "host_events: a record lies outside the data");
                goto done;
            }
        }
        if (out[0].len < total * DISPATCH_SIZE || out[1].len < total * SUBMISSION_SIZE ||
            out[2].len < total * QUEUE_OP_SIZE || out[3].len < total * 8 || out[4].len < total * 8 ||
            out[5].len < total * 8 || out[6].len < total * 4) {
            PyErr_SetString(PyExc_ValueError, "host_events: an output is too small");
            goto done;
        }
        char *dispatches = out[0].buf, *submissions = out[1].buf, *queue_ops = out[2].buf;
        uint64_t *streams = out[3].buf, *event_ids = out[4].buf, *executables = out[5].buf;
        uint32_t *ordinals = out[6].buf;
        Py_ssize_t nd = 0, ns = 0, nq = 0, bad_length = -1, bad_type = -1, failed = -1;
        for (Py_ssize_t index = 0; index < total; index++) {
            const char *record = bytes + positions[index];
            {
                uint32_t type = u32(record + 4);
                if (bad_length < 0 && u32(record) != HOST_EVENT_SIZE) bad_length = index;
                if (bad_type < 0 && (type < 1 || type > EVENT_TYPES)) bad_type = index;
                if (failed < 0 && u32(record + 12) != 0) failed = index;
                streams[index] = u64(record + 56);
                event_ids[index] = u64(record + 16);
                if (type == EVENT_DISPATCH) {
                    char *row = dispatches + nd * DISPATCH_SIZE;
                    memcpy(row, record + 24, 16);      /* submission, command_buffer */
                    memcpy(row + 16, record + 72, 4);  /* command_index */
                    memset(row + 20, 0, 4);            /* key: filled by the caller */
                    memcpy(row + 24, record + 64, 8);  /* device, queue */
                    memcpy(row + 32, record + 104, 16); /* start_ns, end_ns */
                    memcpy(row + 48, record + 136, 8); /* tile_ns */
                    executables[nd] = u64(record + 40);
                    ordinals[nd] = u32(record + 76);
                    nd++;
                } else if (type == EVENT_EXECUTE) {
                    char *row = submissions + ns * SUBMISSION_SIZE;
                    memcpy(row, record + 24, 16);      /* submission, command_buffer */
                    memcpy(row + 16, record + 104, 16); /* start_ns, end_ns */
                    ns++;
                } else {
                    char *row = queue_ops + nq * QUEUE_OP_SIZE;
                    memcpy(row, record + 24, 8);       /* submission */
                    memcpy(row + 8, record + 4, 4);    /* type */
                    memcpy(row + 12, record + 104, 16); /* start_ns, end_ns */
                    memcpy(row + 28, record + 120, 8); /* payload_bytes */
                    nq++;
                }
            }
        }
        result = Py_BuildValue("nnnnnn", nd, ns, nq, bad_length, bad_type, failed);
    }
done:
    for (int i = 0; i < got_in; i++) PyBuffer_Release(&in[i]);
    for (int i = 0; i < got_out; i++) PyBuffer_Release(&out[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"record_offsets", record_offsets, METH_VARARGS, "record_offsets(data, start, end) -> bytes of int64 offsets"},
    {"host_events", host_events, METH_VARARGS,
     "host_events(data, positions, dispatches, submissions, queue_ops, streams, event_ids, executables, "
     "ordinals) -> (dispatches, submissions, queue_ops, first_bad_length, first_bad_type, first_failed)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "sectionmark.profiling._ireeprof",
    "The record walk and host-event split of the .ireeprof reader, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__ireeprof(void) { return PyModule_Create(&module_definition); }
