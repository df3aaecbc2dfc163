/* Profiling's passes over every attributed event: the join of each dispatch to its slot and call
 * (profiling/attribute.py), the session's sums and the wall sweep carried across windows
 * (profiling/section_time.py), the union of the dispatches per call window and the call windows' split between
 * queue operations (profiling/queue_time.py; these sweeps over time intervals are in _sweeps.h). numpy needs several
 * passes and temporaries the size of the events for each; these do one. Built when a C compiler is present
 * (setup.py); each Python caller runs its numpy twin when it is not, and tests/profiling/test_sectionpass.py checks
 * that both give identical results.
 *
 * The events are rows of readers.event_model.DISPATCH_DTYPE, as sectionmark.readers._ireeprof writes them.
 * All validation (and every error message) stays in Python.
 */
#include "../_buffers.h"
#include "_sweeps.h"

/* attribute_events(dispatches, runtime_ids, bases, slots, slot_keys, submission_ids, call_of_submission, warmup,
 *                  event_slots, event_calls) -> (first measured, measured, unplaced, wrong key, orphan)
 *
 * attribute.attributed_events's pass over every dispatch. For dispatch ``i`` (DISPATCH_DTYPE, sorted by submission): its command
 * buffer's position ``b`` among the sorted ``runtime_ids``; its slot ``slots[bases[b] + command_index]`` (-1 when
 * the index is past ``bases[b + 1] - bases[b]`` or the entry is -1: unplaced); the slot's key ``slot_keys[slot]``
 * must equal the event's; its submission's rank among the sorted ``submission_ids`` (as np.searchsorted, the
 * last past the end: orphan when the id differs) gives its call ``call_of_submission[rank] - warmup`` (< 0: a
 * warmup call). Slot and call go to ``event_slots[i]`` and ``event_calls[i]`` (int32): columns beside the
 * dispatch rows, not a copy of them. Returned: the index of the first dispatch of a measured call and how many
 * there are (all after it when that count reaches the end), then indices of dispatches, -1 for none.
 */
static PyObject *attribute_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[7], out[2];
    if (check_arguments(nargs, 10, "attribute_events") < 0) return NULL;
    long long warmup = PyLong_AsLongLong(args[7]);
    if (warmup == -1 && PyErr_Occurred()) return NULL;
    if (acquire(args, in, 7, 0) < 0) return NULL;
    if (acquire(args + 8, out, 2, 1) < 0) { release(in, 7); return NULL; }
    PyObject *result = NULL;
    const char *dispatches = in[0].buf;
    const uint64_t *runtime_ids = in[1].buf, *submission_ids = in[5].buf;
    const int64_t *bases = in[2].buf, *slot_keys = in[4].buf, *call_of_submission = in[6].buf;
    const int32_t *slots = in[3].buf;
    Py_ssize_t count = in[0].len / DISPATCH_SIZE, buffers = in[1].len / 8, slot_count = in[4].len / 8;
    Py_ssize_t executions = in[5].len / 8;
    if (in[2].len < (buffers + 1) * 8 || in[6].len < executions * 8 || out[0].len < count * 4 ||
        out[1].len < count * 4 || !executions || (buffers && in[3].len < bases[buffers] * 4)) {
        PyErr_SetString(PyExc_ValueError, "attribute_events: inconsistent table sizes");
        goto done;
    }
    {
        int32_t *event_slots = out[0].buf, *event_calls = out[1].buf;
        Py_ssize_t first_measured = -1, measured = 0, unplaced = -1, wrong_key = -1, orphan = -1, next = 0;
        Py_ssize_t buffer = buffers;
        uint64_t last_buffer = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            const char *dispatch = dispatches + i * DISPATCH_SIZE;
            uint64_t buffer_id = u64(dispatch + 8), submission = u64(dispatch);
            if (buffer == buffers || buffer_id != last_buffer) {
                buffer = find_sorted(runtime_ids, buffers, buffer_id);
                last_buffer = buffer_id;
            }
            uint32_t index = u32(dispatch + 16);
            int32_t slot = -1;
            if (buffer < buffers && index < bases[buffer + 1] - bases[buffer]) slot = slots[bases[buffer] + index];
            if (slot < 0 || slot >= slot_count) {
                if (unplaced < 0) unplaced = i;
                slot = -1;
            } else if (wrong_key < 0 && slot_keys[slot] != (int64_t)u32(dispatch + 20)) {
                wrong_key = i;
            }
            while (next < executions && submission_ids[next] < submission) next++;
            Py_ssize_t rank = next < executions ? next : executions - 1;
            if (orphan < 0 && submission_ids[rank] != submission) orphan = i;
            int64_t call = call_of_submission[rank] - warmup;
            event_slots[i] = slot;
            event_calls[i] = (int32_t)call;
            if (call < 0) continue;
            if (first_measured < 0) first_measured = i;
            measured++;
        }
        result = Py_BuildValue("nnnnn", first_measured < 0 ? count : first_measured, measured, unplaced, wrong_key,
                               orphan);
    }
done:
    release(in, 7);
    release(out, 2);
    return result;
}

/* event_sums(events, event_slots, event_calls, slot_composition, calls, busy_by_call, busy, count, slot_busy,
 *            slot_count, tile_cpu, tile_counts, first_start, last_end)
 *   -> (total ns, disjoint, total tile ns, total tiles, any tiles)
 *
 * section_time.event_sums in one pass over the attributed events (DISPATCH_DTYPE rows, their slot and call columns,
 * int32), so that no per-event temporary is made: each event's duration (end - start) is added, in event order as
 * np.bincount adds, to ``busy_by_call[row * compositions + composition]``, ``busy[composition]`` and
 * ``slot_busy[slot]`` (float64), and counted in ``count`` and ``slot_count`` (int64), where composition =
 * ``slot_composition[slot]``, compositions = len(busy) and row = min(call, calls - 1); its tile time and tiles
 * are added (as float64, in event order) to ``tile_cpu[composition]`` and ``tile_counts[composition]``; its start
 * lowers ``first_start[row * compositions + composition]`` and its end raises ``last_end[...]`` (int64, filled
 * by the caller with int64's maximum and minimum). Returned: the summed durations, whether the events are
 * disjoint in order (each starts at or after the previous one's end, none ends before it starts, the whole span
 * under 2**53 ns: section_time.composition_walls's shortcut), the summed tile time and tiles (uint64, wrapping as numpy's
 * sum does) and whether any event has a tile.
 */
static PyObject *event_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[4], out[9];
    if (check_arguments(nargs, 14, "event_sums") < 0) return NULL;
    Py_ssize_t calls = PyLong_AsSsize_t(args[4]);
    if (calls == -1 && PyErr_Occurred()) return NULL;
    if (acquire(args, in, 4, 0) < 0) return NULL;
    if (acquire(args + 5, out, 9, 1) < 0) { release(in, 4); return NULL; }
    PyObject *result = NULL;
    const char *events = in[0].buf;
    const int32_t *event_slots = in[1].buf, *event_calls = in[2].buf;
    const int64_t *slot_composition = in[3].buf;
    double *busy_by_call = out[0].buf, *busy = out[1].buf, *slot_busy = out[3].buf;
    double *tile_cpu = out[5].buf, *tile_counts = out[6].buf;
    int64_t *count = out[2].buf, *slot_count = out[4].buf, *first_start = out[7].buf, *last_end = out[8].buf;
    Py_ssize_t total = in[0].len / DISPATCH_SIZE, slots = in[3].len / 8, compositions = out[1].len / 8;
    if (calls < 1 || in[1].len < total * 4 || in[2].len < total * 4 || out[0].len < calls * compositions * 8 ||
        out[2].len < compositions * 8 || out[3].len < slots * 8 || out[4].len < slots * 8 ||
        out[5].len < compositions * 8 || out[6].len < compositions * 8 || out[7].len < calls * compositions * 8 ||
        out[8].len < calls * compositions * 8) {
        PyErr_SetString(PyExc_ValueError, "event_sums: inconsistent table sizes");
        goto done;
    }
    {
        int64_t sum = 0, first = 0, previous_end = 0;
        uint64_t tile_ns_sum = 0, tiles_sum = 0;
        int disjoint = 1, any_tiles = 0;
        for (Py_ssize_t i = 0; i < total; i++) {
            const char *event = events + i * DISPATCH_SIZE;
            int64_t start = (int64_t)u64(event + 32), end = (int64_t)u64(event + 40);
            uint64_t tile_ns = u64(event + 48), tiles = u64(event + 56);
            int32_t slot = event_slots[i], call = event_calls[i];
            if (slot < 0 || slot >= slots || call < 0 || slot_composition[slot] < 0 ||
                slot_composition[slot] >= compositions) {
                PyErr_SetString(PyExc_ValueError, "event_sums: an event's slot, call or composition is out of range");
                goto done;
            }
            Py_ssize_t composition = (Py_ssize_t)slot_composition[slot];
            Py_ssize_t cell = (call < calls ? call : calls - 1) * compositions + composition;
            double duration = (double)(end - start);
            busy_by_call[cell] += duration;
            busy[composition] += duration;
            count[composition]++;
            slot_busy[slot] += duration;
            slot_count[slot]++;
            tile_cpu[composition] += (double)tile_ns;
            tile_counts[composition] += (double)tiles;
            tile_ns_sum += tile_ns;
            tiles_sum += tiles;
            any_tiles |= tiles != 0;
            if (start < first_start[cell]) first_start[cell] = start;
            if (end > last_end[cell]) last_end[cell] = end;
            sum += end - start;
            if (end < start || (i && start < previous_end)) disjoint = 0;
            if (!i) first = start;
            previous_end = end;
        }
        if (total && previous_end - first >= (int64_t)1 << 53) disjoint = 0;
        result = Py_BuildValue("LOKKO", (long long)sum, disjoint ? Py_True : Py_False,
                               (unsigned long long)tile_ns_sum, (unsigned long long)tiles_sum,
                               any_tiles ? Py_True : Py_False);
    }
done:
    release(in, 4);
    release(out, 9);
    return result;
}

/* union_by_window(starts, ends, window_starts, window_ends, out) -> bool
 *
 * queue_time.union_by_window when ``starts`` are sorted: per window (sorted, disjoint), the length of the
 * union of the intervals [start, end) whose covered blocks start inside it, clipped at its end, written to
 * ``out`` (int64). One pass: blocks are merged while walking the intervals and the windows together. Returns
 * False, ``out`` then undefined, when the starts are not sorted (the caller sorts). ``starts``/``ends`` may be
 * strided.
 */
static PyObject *union_by_window(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[4], out;
    int got = 0;
    PyObject *result = NULL;
    if (check_arguments(nargs, 5, "union_by_window") < 0) return NULL;
    for (; got < 4; got++) {
        if (PyObject_GetBuffer(args[got], &in[got], PyBUF_STRIDES) < 0) goto done;
        if (in[got].ndim != 1 || in[got].itemsize != 8) {  /* int64: the caller's dtype */
            PyErr_SetString(PyExc_ValueError, "union_by_window: expects one-dimensional 8-byte arrays");
            got++;
            goto done;
        }
    }
    if (PyObject_GetBuffer(args[4], &out, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0) goto done;
    {
        Py_ssize_t count = in[0].shape[0], windows = in[2].shape[0];
        int64_t *sums = out.buf;
        if (in[1].shape[0] != count || in[3].shape[0] != windows || out.len < windows * 8) {
            PyErr_SetString(PyExc_ValueError, "union_by_window: inconsistent sizes");
        } else {
            memset(sums, 0, windows * 8);
            result = union_into(column_of(&in[0]), column_of(&in[1]), count, column_of(&in[2]), column_of(&in[3]),
                                windows, sums) ? Py_True : Py_False;
            Py_INCREF(result);
        }
        PyBuffer_Release(&out);
    }
done:
    release(in, got);
    return result;
}

/* wall_parts(starts, ends, start_order, end_order, parts) -> None
 *
 * section_time.wall_parts's sweep, one merge of the starts and the ends in time order (``start_order`` and
 * ``end_order``: their stable argsorts) instead of numpy's sort of both together, counts per boundary and prefix
 * sums over temporaries of that size. The distinct boundaries cut time into segments; segment k gives
 * length / (intervals active in it) to each active interval, summed in boundary order as np.cumsum sums
 * (``prefix``); interval i's part is prefix[its end's boundary] - prefix[its start's], clipped to
 * [0, its duration] as np.clip clips: the same float64 operations in the same order, so the same bits.
 * ``parts`` (float64) gets the parts; starts and ends are int64, the orders intp.
 */
static PyObject *wall_parts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[4], out[1];
    if (check_arguments(nargs, 5, "wall_parts") < 0) return NULL;
    if (acquire(args, in, 4, 0) < 0) return NULL;
    if (acquire(args + 4, out, 1, 1) < 0) { release(in, 4); return NULL; }
    PyObject *result = NULL;
    Py_ssize_t count = in[0].len / 8;
    if (in[1].len != count * 8 || in[2].len != count * (Py_ssize_t)sizeof(Py_ssize_t) ||
        in[3].len != count * (Py_ssize_t)sizeof(Py_ssize_t) || out[0].len != count * 8) {
        PyErr_SetString(PyExc_ValueError, "wall_parts: inconsistent sizes");
        goto done;
    }
    {
        const int64_t *starts = in[0].buf, *ends = in[1].buf;
        const Py_ssize_t *start_order = in[2].buf, *end_order = in[3].buf;
        double *parts = out[0].buf;
        double *start_prefix = PyMem_Malloc((count ? count : 1) * sizeof(double));
        if (!start_prefix) { PyErr_NoMemory(); goto done; }
        Py_ssize_t next_start = 0, next_end = 0;
        int64_t active = 0, boundary = 0;
        double prefix = 0.0;
        for (int first = 1; next_start < count || next_end < count; first = 0) {
            /* The next boundary: the smallest value not yet reached; the segment before it first. */
            int64_t value = next_start < count ? starts[start_order[next_start]] : ends[end_order[next_end]];
            if (next_end < count && ends[end_order[next_end]] < value) value = ends[end_order[next_end]];
            if (!first) {
                double length = (double)(value - boundary);
                prefix = prefix + (active > 0 ? length / (double)active : 0.0);
            }
            boundary = value;
            for (; next_start < count && starts[start_order[next_start]] == value; next_start++, active++)
                start_prefix[start_order[next_start]] = prefix;
            for (; next_end < count && ends[end_order[next_end]] == value; next_end++, active--) {
                Py_ssize_t i = end_order[next_end];
                parts[i] = prefix;
            }
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            double part = parts[i] - start_prefix[i], duration = (double)(ends[i] - starts[i]);
            part = part > 0.0 ? part : 0.0;
            parts[i] = part < duration ? part : duration;
        }
        PyMem_Free(start_prefix);
        result = Py_None;
        Py_INCREF(result);
    }
done:
    release(in, 4);
    release(out, 1);
    return result;
}

static PyMethodDef methods[] = {
    {"attribute_events", (PyCFunction)(void (*)(void))attribute_events, METH_FASTCALL,
     "attribute_events(dispatches, runtime_ids, bases, slots, slot_keys, submission_ids, call_of_submission, "
     "warmup, event_slots, event_calls) -> (first_measured, measured, unplaced, wrong_key, orphan)"},
    {"event_sums", (PyCFunction)(void (*)(void))event_sums, METH_FASTCALL,
     "event_sums(events, event_slots, event_calls, slot_composition, calls, busy_by_call, busy, count, slot_busy, "
     "slot_count, tile_cpu, tile_counts, first_start, last_end) -> (total_ns, disjoint, tile_ns, tiles, any_tiles)"},
    {"union_by_window", (PyCFunction)(void (*)(void))union_by_window, METH_FASTCALL,
     "union_by_window(starts, ends, window_starts, window_ends, out) -> sorted"},
    {"wall_parts", (PyCFunction)(void (*)(void))wall_parts, METH_FASTCALL,
     "wall_parts(starts, ends, start_order, end_order, parts) -> None"},
    {"partition_time", (PyCFunction)(void (*)(void))partition_time, METH_FASTCALL,
     "partition_time(starts, ends, rows, start_order, window_starts, window_ends, parts) -> bool"},
    {"fold_sweep", (PyCFunction)(void (*)(void))fold_sweep, METH_FASTCALL,
     "fold_sweep(starts, ends, compositions, order, frontier, wall, window_starts, window_ends, call_union) "
     "-> (kept, union_ns, last_end) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "sectionmark.profiling._sectionpass",
    "Profiling's passes over the attributed events (attribution, sums, unions per window), in C.", -1, methods,
};

/* The row size this build reads and the version of its functions' arguments: profiling/native.py refuses a
 * stale build whose rows or arguments differ. (Version 1: the arguments these passes took as version 3 of
 * sectionmark.readers._ireeprof, where they were before; 2: wall_parts added; 3: fold_sweep and partition_time added;
 * 4: fold_sweep's parts of each union block alone, added in start order: a build of 3 no longer gives numpy's.) */
PyMODINIT_FUNC PyInit__sectionpass(void) {
    PyObject *module = PyModule_Create(&module_definition);
    if (module && (PyModule_AddIntConstant(module, "DISPATCH_SIZE", DISPATCH_SIZE) < 0 ||
                   PyModule_AddIntConstant(module, "INTERFACE_VERSION", 4) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
