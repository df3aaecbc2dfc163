/* The passes over every zone of a Tracy capture (sectionmark.readers.tracy_capture): walking a thread's or a GPU
 * context's zone tree in the inflated serialization into a table of fixed-size rows, and turning the table
 * into the reader's Zone tuples. A capture holds millions of zones and the tree must be walked zone by zone
 * (a zone's children sit between its start and its end record), which Python does at about a microsecond a
 * zone; this does it at a few nanoseconds. Built when a C compiler is present; the reader does the same in
 * Python when it is not, and tests/readers/test_tracy_fast.py checks that both give identical results.
 *
 * No numpy C API: tables go back and forth as bytes. Every check and error message stays in Python; a walk
 * that runs past the data returns None (the reader's "truncated or corrupt" line).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .tracy serialization is little-endian; the Python reader handles other hosts"
#endif
#ifndef __SIZEOF_INT128__
#error "exact running times need a 128-bit integer; the Python reader handles other compilers"
#endif

/* reader.ZONE_FIELDS: start, end, parent, depth (int64), srcloc (int32), extra (uint32), CPU-side start and
 * end (int64: a GPU zone's CPU side, a CPU zone's start and end again) */
typedef struct {
    int64_t start_ns, end_ns, parent, depth;
    int32_t srcloc;
    uint32_t extra;
    int64_t cpu_start_ns, cpu_end_ns;
} ZoneRow;
#define ZONE_ROW_SIZE 56
_Static_assert(sizeof(ZoneRow) == ZONE_ROW_SIZE, "ZoneRow must match reader.ZONE_FIELDS");

#define CPU_ZONE_SIZE 18 /* i16 srcloc, i64 start delta, u32 extra, u32 child count */
#define CPU_END_SIZE 8   /* i64 end delta */
/* i64 CPU start delta, i64 GPU start delta, i16 srcloc, 3-byte callstack, u16 thread, u64 child count */
#define GPU_ZONE_SIZE 31
#define GPU_END_SIZE 16  /* i64 CPU end delta, i64 GPU end delta */

static int16_t i16(const char *p) { int16_t v; memcpy(&v, p, 2); return v; }
static uint32_t u32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static int64_t i64(const char *p) { int64_t v; memcpy(&v, p, 8); return v; }
static uint64_t u64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* The rows of one walk, in a bytes object grown in place (no copy at the end). */
typedef struct {
    PyObject *bytes;
    Py_ssize_t count, capacity;
} Rows;

static ZoneRow *new_row(Rows *rows) {
    if (rows->count == rows->capacity) {
        Py_ssize_t capacity = rows->capacity ? rows->capacity * 2 : 4096;
        if (_PyBytes_Resize(&rows->bytes, capacity * ZONE_ROW_SIZE) < 0) return NULL;
        rows->capacity = capacity;
    }
    ZoneRow *row = (ZoneRow *)PyBytes_AS_STRING(rows->bytes) + rows->count++;
    memset(row, 0, sizeof(*row));
    return row;
}

static ZoneRow *row_at(Rows *rows, int64_t index) { return (ZoneRow *)PyBytes_AS_STRING(rows->bytes) + index; }

/* Where the walk resumes after a zone's children: the zone's siblings left, its parent and depth. */
typedef struct {
    uint64_t remaining;
    int64_t parent, depth;
} Frame;

typedef struct {
    Frame *frames;
    Py_ssize_t count, capacity;
} Stack;

static int push(Stack *stack, Frame frame) {
    if (stack->count == stack->capacity) {
        Py_ssize_t capacity = stack->capacity ? stack->capacity * 2 : 64;
        Frame *frames = PyMem_Realloc(stack->frames, (size_t)capacity * sizeof(Frame));
        if (!frames) return -1;
        stack->frames = frames, stack->capacity = capacity;
    }
    stack->frames[stack->count++] = frame;
    return 0;
}

/* A time as the Python reader computes it with unbounded integers: a running sum that only a corrupt file
 * takes past 64 bits, which is then flagged (the reader refuses it: "a time beyond 64 bits"). */
static int64_t exact_time(__int128 value, int *overflow) {
    if (value < INT64_MIN || value > INT64_MAX) *overflow = 1;
    return (int64_t)value;
}

/* A zone still open when the capture ended is stored with a negative end: Tracy draws it to the end of the
 * capture (its last time), and so does the reader (reader._unfinished_end). */
static int64_t end_time(__int128 value, int64_t start, int64_t last_time, int *overflow) {
    if (value < 0) return last_time > start ? last_time : start;
    return exact_time(value, overflow);
}

typedef enum { CPU_TREE, GPU_TREE } TreeKind;

/* One tree walk. CPU: zone record, its children, then its end record. GPU: zone record, then its end
 * record at once if it is a leaf, else its children and then its end record. */
static PyObject *walk(PyObject *args, TreeKind kind) {
    Py_buffer data;
    Py_ssize_t pos;
    unsigned long long count;
    long long last_time;
    if (!PyArg_ParseTuple(args, "y*nKL", &data, &pos, &count, &last_time)) return NULL;
    const char *buf = data.buf;
    Py_ssize_t size = data.len;
    Rows rows = {PyBytes_FromStringAndSize(NULL, 0), 0, 0};
    Stack stack = {NULL, 0, 0};
    PyObject *result = NULL;
    if (!rows.bytes) goto done;
    __int128 running = 0; /* the running time reference: the GPU clock for GPU zones */
    __int128 cpu_running = 0; /* GPU zones: their CPU side's own running reference */
    uint64_t remaining = count;
    int64_t parent = -1, depth = 0;
    int overflow = 0, truncated = pos < 0 || pos > size;
    while (!truncated) {
        int64_t ended; /* the row whose end record comes next */
        if (remaining) {
            remaining--;
            int64_t delta;
            uint64_t children;
            ZoneRow *row = new_row(&rows);
            if (!row) goto done;
            if (kind == CPU_TREE) {
                if (size - pos < CPU_ZONE_SIZE) { truncated = 1; break; }
                row->srcloc = i16(buf + pos);
                delta = i64(buf + pos + 2);
                row->extra = u32(buf + pos + 10);
                children = u32(buf + pos + 14);
                pos += CPU_ZONE_SIZE;
            } else {
                if (size - pos < GPU_ZONE_SIZE) { truncated = 1; break; }
                cpu_running += i64(buf + pos);
                row->cpu_start_ns = exact_time(cpu_running, &overflow);
                delta = i64(buf + pos + 8);
                row->srcloc = i16(buf + pos + 16);
                children = u64(buf + pos + 23);
                pos += GPU_ZONE_SIZE;
            }
            running += delta;
            row->start_ns = exact_time(running, &overflow);
            if (kind == CPU_TREE) row->cpu_start_ns = row->start_ns;
            row->parent = parent, row->depth = depth;
            if (children) {
                if (push(&stack, (Frame){remaining, parent, depth}) < 0) goto done;
                remaining = children, parent = rows.count - 1, depth++;
                continue;
            }
            ended = rows.count - 1;
        } else if (stack.count) {
            ended = parent;
            Frame frame = stack.frames[--stack.count];
            remaining = frame.remaining, parent = frame.parent, depth = frame.depth;
        } else {
            break;
        }
        Py_ssize_t end_size = kind == CPU_TREE ? CPU_END_SIZE : GPU_END_SIZE;
        if (size - pos < end_size) { truncated = 1; break; }
        running += i64(buf + pos + end_size - 8);
        ZoneRow *row = row_at(&rows, ended);
        row->end_ns = end_time(running, row->start_ns, last_time, &overflow);
        if (kind == CPU_TREE) {
            row->cpu_end_ns = row->end_ns;
        } else {
            cpu_running += i64(buf + pos);
            row->cpu_end_ns = end_time(cpu_running, row->cpu_start_ns, last_time, &overflow);
        }
        pos += end_size;
    }
    if (truncated) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (_PyBytes_Resize(&rows.bytes, overflow ? 0 : rows.count * ZONE_ROW_SIZE) < 0) goto done; /* as the Python walk */
    result = Py_BuildValue("nOO", pos, rows.bytes, overflow ? Py_True : Py_False);
done:
    Py_XDECREF(rows.bytes);
    PyMem_Free(stack.frames);
    PyBuffer_Release(&data);
    return result;
}

/* cpu_zone_table(buf, pos, count, last_time) -> (pos, table, overflow) or None
 *
 * Walks the ``count`` top-level zones (and their children) of a thread starting at buf[pos]: ``pos`` after
 * them, ``table`` the rows (reader.ZONE_FIELDS) parents first, ``overflow`` whether a time left 64 bits (then
 * ``table`` is empty). None when the zones run past the data.
 */
static PyObject *cpu_zone_table(PyObject *module, PyObject *args) { return walk(args, CPU_TREE); }

/* gpu_zone_table(buf, pos, count, last_time) -> (pos, table, overflow) or None: the same for one thread's
 * zones of a GPU context; times are the GPU timestamps (extra is 0). */
static PyObject *gpu_zone_table(PyObject *module, PyObject *args) { return walk(args, GPU_TREE); }

/* zone_list(zone_type, names, table, name_ids) -> list
 *
 * One ``zone_type`` tuple (reader.Zone: name, start, end, depth, parent) per row of ``table``, its name
 * ``names[name_ids[i]]`` (int32 ids). The tuples hold only strings and integers, so they are untracked by
 * the garbage collector at once, as the collector itself would do on its first pass over them: millions
 * of new tracked tuples would otherwise make it run over and over during the read.
 */
static PyObject *zone_list(PyObject *module, PyObject *args) {
    PyTypeObject *zone_type;
    PyObject *names;
    Py_buffer table, name_ids;
    if (!PyArg_ParseTuple(args, "O!O!y*y*", &PyType_Type, &zone_type, &PyTuple_Type, &names, &table, &name_ids))
        return NULL;
    PyObject *list = NULL;
    Py_ssize_t count = table.len / ZONE_ROW_SIZE;
    if (!PyType_IsSubtype(zone_type, &PyTuple_Type) || zone_type->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "zone_list: the zone type must be a tuple subclass without slots");
        goto done;
    }
    if (table.len % ZONE_ROW_SIZE || name_ids.len != count * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "zone_list: table and name ids differ in length");
        goto done;
    }
    list = PyList_New(count);
    if (!list) goto done;
    const ZoneRow *rows = table.buf;
    const char *ids = name_ids.buf;
    Py_ssize_t name_count = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t id;
        memcpy(&id, ids + i * sizeof(int32_t), sizeof(id));
        if (id < 0 || id >= name_count) {
            PyErr_SetString(PyExc_ValueError, "zone_list: a name id outside the names");
            Py_CLEAR(list);
            goto done;
        }
        PyObject *zone = zone_type->tp_alloc(zone_type, 5);
        if (!zone) { Py_CLEAR(list); goto done; }
        PyList_SET_ITEM(list, i, zone);
        PyObject *name = PyTuple_GET_ITEM(names, id);
        PyTuple_SET_ITEM(zone, 0, Py_NewRef(name));
        PyObject *values[4] = {PyLong_FromLongLong(rows[i].start_ns), PyLong_FromLongLong(rows[i].end_ns),
                               PyLong_FromLongLong(rows[i].depth), PyLong_FromLongLong(rows[i].parent)};
        for (int field = 0; field < 4; field++) {
            if (!values[field]) { Py_CLEAR(list); goto done; }
            PyTuple_SET_ITEM(zone, field + 1, values[field]);
        }
        PyObject_GC_UnTrack(zone);
    }
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&name_ids);
    return list;
}

static PyMethodDef methods[] = {
    {"cpu_zone_table", cpu_zone_table, METH_VARARGS, "A thread's zone tree as a table of rows."},
    {"gpu_zone_table", gpu_zone_table, METH_VARARGS, "A GPU context thread's zone tree as a table of rows."},
    {"zone_list", zone_list, METH_VARARGS, "Zone tuples from a table of rows and name ids."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tracyread", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tracyread(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module && PyModule_AddIntConstant(module, "ZONE_ROW_SIZE", ZONE_ROW_SIZE) < 0) Py_CLEAR(module);
    return module;
}
