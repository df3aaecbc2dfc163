/* The passes of the windowed read of a .ireeprof bundle (readers/ireeprof_stream.py) over what its windows
 * hold: the offsets of a window of records, and which memory events change their pool's level. Included by
 * _ireeprof.c (its defines: MEMORY_SIZE, MEMORY_POOL_STATS); each has its numpy twin, compared in the tests. */
#ifndef SECTIONMARK_STREAM_H
#define SECTIONMARK_STREAM_H

#include "../_buffers.h"

/* record_positions(starts, firsts, counts, chunk, begin, positions)
 *
 * The byte offsets (int64, into ``positions``) of records ``begin .. begin + len(positions)`` of chunks of
 * fixed-size records: chunk ``c`` holds records ``firsts[c] ..`` (``counts[c]`` of them, ``(lengths of the chunk)
 * / counts``) from byte ``starts[c]``; ``chunk`` is the one holding record ``begin`` (bundle_records.RecordPositions:
 * one pass, where numpy repeats each chunk's base, makes the indices and adds them).
 */
static PyObject *record_positions(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[3], out[1];
    if (check_arguments(nargs, 7, "record_positions") < 0) return NULL;
    Py_ssize_t chunk = PyLong_AsSsize_t(args[3]), begin = PyLong_AsSsize_t(args[4]);
    Py_ssize_t itemsize = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred()) return NULL;
    PyObject *buffers[4] = {args[0], args[1], args[2], args[6]};
    if (acquire(buffers, in, 3, 0) < 0) return NULL;
    if (acquire(buffers + 3, out, 1, 1) < 0) { release(in, 3); return NULL; }
    const int64_t *starts = in[0].buf, *firsts = in[1].buf, *counts = in[2].buf;
    int64_t *positions = out[0].buf;
    Py_ssize_t chunks = in[0].len / 8, total = out[0].len / 8;
    PyObject *result = NULL;
    if (in[1].len / 8 != chunks || in[2].len / 8 != chunks || chunk < 0) {
        PyErr_SetString(PyExc_ValueError, "record_positions: tables of different lengths, or no chunk");
        goto done;
    }
    for (Py_ssize_t i = 0, record = begin; i < total; i++, record++) {
        while (chunk < chunks && record >= firsts[chunk] + counts[chunk]) chunk++;
        if (chunk >= chunks || record < firsts[chunk]) {
            PyErr_SetString(PyExc_ValueError, "record_positions: a record outside the chunks");
            goto done;
        }
        positions[i] = starts[chunk] + (record - firsts[chunk]) * itemsize;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    release(in, 3);
    release(out, 1);
    return result;
}

/* level_changes(memory, levels, changes)
 *
 * Which of the ``memory`` events (event_model.MEMORY_DTYPE rows, in time order) change their pool's reserved bytes
 * from the pool's previous event, or are its first (a uint8 per event into ``changes``): those with pool figures
 * (MEMORY_POOL_STATS), their ``pool_reserved`` read as int64, the previous one of a pool taken from ``levels`` (a
 * dict, pool -> reserved bytes; -1 for a pool not in it), which is updated with each pool's last level
 * (ireeprof_stream._level_changes, one pass where numpy sorts the events by pool).
 */
static PyObject *level_changes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[1], out[1];
    if (check_arguments(nargs, 3, "level_changes") < 0) return NULL;
    if (!PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "level_changes: levels must be a dict");
        return NULL;
    }
    PyObject *buffers[2] = {args[0], args[2]};
    if (acquire(buffers, in, 1, 0) < 0) return NULL;
    if (acquire(buffers + 1, out, 1, 1) < 0) { release(in, 1); return NULL; }
    PyObject *result = NULL, *dict = args[1], *key, *value;
    Py_ssize_t total = in[0].len / MEMORY_SIZE, known = 0, capacity = PyDict_Size(dict) + 4, position = 0;
    uint64_t *pools = PyMem_Malloc((size_t)capacity * 8);  /* sorted, with their levels beside */
    int64_t *levels = PyMem_Malloc((size_t)capacity * 8);
    const char *rows = in[0].buf;
    uint8_t *changes = out[0].buf;
    if (!pools || !levels) { PyErr_NoMemory(); goto done; }
    if (out[0].len < total) {
        PyErr_SetString(PyExc_ValueError, "level_changes: the output is too small");
        goto done;
    }
    while (PyDict_Next(dict, &position, &key, &value)) {
        uint64_t pool = PyLong_AsUnsignedLongLong(key);
        int64_t level = PyLong_AsLongLong(value);
        if (PyErr_Occurred()) goto done;
        Py_ssize_t at = known;
        while (at > 0 && pools[at - 1] > pool) pools[at] = pools[at - 1], levels[at] = levels[at - 1], at--;
        pools[at] = pool, levels[at] = level, known++;
    }
    for (Py_ssize_t i = 0; i < total; i++) {
        const char *row = rows + i * MEMORY_SIZE;
        changes[i] = 0;
        if (!(u32(row + 12) & MEMORY_POOL_STATS)) continue;
        uint64_t pool = u64(row + 32);
        int64_t level = (int64_t)u64(row + 48);
        Py_ssize_t low = 0, high = known;  /* the first pool not below this one */
        while (low < high) {
            Py_ssize_t middle = low + (high - low) / 2;
            if (pools[middle] < pool) low = middle + 1; else high = middle;
        }
        if (low == known || pools[low] != pool) {  /* a pool not seen before: its previous level is -1 */
            if (known == capacity) {
                capacity *= 2;
                uint64_t *more_pools = PyMem_Realloc(pools, (size_t)capacity * 8);
                if (more_pools) pools = more_pools;
                int64_t *more_levels = more_pools ? PyMem_Realloc(levels, (size_t)capacity * 8) : NULL;
                if (!more_levels) { PyErr_NoMemory(); goto done; }
                levels = more_levels;
            }
            memmove(pools + low + 1, pools + low, (size_t)(known - low) * 8);
            memmove(levels + low + 1, levels + low, (size_t)(known - low) * 8);
            pools[low] = pool, levels[low] = -1, known++;
        }
        changes[i] = level != levels[low];
        levels[low] = level;
    }
    for (Py_ssize_t j = 0; j < known; j++) {
        PyObject *pool = PyLong_FromUnsignedLongLong(pools[j]), *level = PyLong_FromLongLong(levels[j]);
        int failed = !pool || !level || PyDict_SetItem(dict, pool, level) < 0;
        Py_XDECREF(pool);
        Py_XDECREF(level);
        if (failed) goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(pools);
    PyMem_Free(levels);
    release(in, 1);
    release(out, 1);
    return result;
}

#endif
