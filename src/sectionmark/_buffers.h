/* What the C passes over a profile's tables share (sectionmark.readers._ireeprof, which reads the .ireeprof
 * records, and sectionmark.profiling._sectionpass, which attributes and sums the events): little-endian reads
 * at any alignment, the buffer arguments of a METH_FASTCALL function, and a lookup in sorted ids.
 *
 * No numpy C API: the caller allocates the output arrays and passes them as writable buffers.
 */
#ifndef SECTIONMARK_BUFFERS_H
#define SECTIONMARK_BUFFERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .ireeprof layout and the tables read from it are little-endian; the numpy passes handle other hosts"
#endif

#define DISPATCH_SIZE 64 /* readers.event_model.DISPATCH_DTYPE: the rows both extensions read or write */

static inline uint32_t u32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t u64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* The buffers of ``count`` objects, the last ``writable`` of them writable. On failure, releases what it
 * got and returns -1 with the exception set. */
static inline int acquire(PyObject *const *objects, Py_buffer *views, int count, int writable) {
    for (int i = 0; i < count; i++) {
        int flags = i >= count - writable ? PyBUF_SIMPLE | PyBUF_WRITABLE : PyBUF_SIMPLE;
        if (PyObject_GetBuffer(objects[i], &views[i], flags) < 0) {
            while (i--) PyBuffer_Release(&views[i]);
            return -1;
        }
    }
    return 0;
}

static inline void release(Py_buffer *views, int count) {
    for (int i = 0; i < count; i++) PyBuffer_Release(&views[i]);
}

static inline int check_arguments(Py_ssize_t given, Py_ssize_t expected, const char *name) {
    if (given == expected) return 0;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, expected, given);
    return -1;
}

/* Index of ``value`` in the sorted ``ids[0 .. count)``, or ``count`` if absent. */
static inline Py_ssize_t find_sorted(const uint64_t *ids, Py_ssize_t count, uint64_t value) {
    Py_ssize_t low = 0, high = count;
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        if (ids[middle] < value) low = middle + 1; else high = middle;
    }
    return low < count && ids[low] == value ? low : count;
}

#endif
