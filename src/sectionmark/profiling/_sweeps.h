/* The sweeps of profiling's C passes (sectionmark.profiling._sectionpass, which includes this file) over time
 * intervals: each dispatch block's union per call window (union_by_window's pass), and two sweeps that take the
 * intervals in start order with the ends of those started waiting in a heap: the wall sweep carried across the
 * reader's windows (fold_sweep: section_time.EventFold) and the call windows' time split between queue
 * operations (partition_time: queue_time.partition_time). Each has its numpy twin, which
 * tests/profiling/test_sectionpass.py compares it with.
 */
#ifndef SECTIONMARK_SWEEPS_H
#define SECTIONMARK_SWEEPS_H

#include "../_buffers.h"

/* A column of int64 values: a one-dimensional buffer, contiguous or a field of a structured array. */
typedef struct { const char *base; Py_ssize_t stride; } column;

static inline int64_t at(column values, Py_ssize_t i) {
    int64_t value;
    memcpy(&value, values.base + i * values.stride, 8);
    return value;
}

/* The pass of union_by_window over ``count`` intervals sorted by start, adding each window's union into ``sums``
 * (which the caller zeroes or carries); 0 when a start is out of order (``sums`` then partly added). */
static int union_into(column starts, column ends, Py_ssize_t count, column window_starts, column window_ends,
                      Py_ssize_t windows, int64_t *sums) {
    Py_ssize_t window = -1, high = windows;  /* the last window starting at or before the block's start */
    while (count && window + 1 < high) {  /* found for the first block by bisection: a window of a long profile's
                                           * events reaches few of its calls */
        Py_ssize_t middle = window + 1 + (high - window - 1) / 2;
        if (at(window_starts, middle) <= at(starts, 0)) window = middle; else high = middle;
    }
    int64_t reach = 0;  /* the running maximum of the ends, as numpy's union_blocks takes it */
    for (Py_ssize_t i = 0; i < count;) {
        int64_t block_start = at(starts, i);
        if (!i || at(ends, i) > reach) reach = at(ends, i);
        if (i && block_start < at(starts, i - 1)) return 0;
        for (i++; i < count && at(starts, i) <= reach; i++) {
            if (at(starts, i) < at(starts, i - 1)) return 0;
            if (at(ends, i) > reach) reach = at(ends, i);
        }
        while (window + 1 < windows && at(window_starts, window + 1) <= block_start) window++;
        if (window >= 0 && block_start < at(window_ends, window)) {
            int64_t window_end = at(window_ends, window);
            sums[window] += (reach < window_end ? reach : window_end) - block_start;
        }
    }
    return 1;
}

static column column_of(const Py_buffer *view) { return (column){view->buf, view->strides[0]}; }

/* A binary min-heap of the intervals started and not yet ended: each one's end, position and prefix at its start. */
typedef struct { int64_t end; Py_ssize_t position; double start_prefix; } started;

static void heap_push(started *heap, Py_ssize_t *size, started item) {
    Py_ssize_t child = (*size)++;
    while (child) {
        Py_ssize_t parent = (child - 1) / 2;
        if (heap[parent].end <= item.end) break;
        heap[child] = heap[parent];
        child = parent;
    }
    heap[child] = item;
}

static started heap_pop(started *heap, Py_ssize_t *size) {
    started top = heap[0], last = heap[--*size];
    Py_ssize_t parent = 0, child;
    while ((child = 2 * parent + 1) < *size) {
        if (child + 1 < *size && heap[child + 1].end < heap[child].end) child++;
        if (last.end <= heap[child].end) break;
        heap[parent] = heap[child];
        parent = child;
    }
    heap[parent] = last;
    return top;
}

/* An interval's part of the union from the prefix sums at its end and its start. */
static inline double clipped_part(double end_prefix, double start_prefix, int64_t start, int64_t end) {
    double part = end_prefix - start_prefix, duration = (double)(end - start);
    part = part > 0.0 ? part : 0.0;  /* clipped to [0, its duration] as wall_parts clips */
    return part < duration ? part : duration;
}

/* wall_parts over intervals taken in start order (the positions ``order[0 .. count)``, or 0, 1, ... when ``order``
 * is NULL), none ending before it starts: each one's part to ``parts`` at its position. The ends of the intervals
 * started wait in a heap (``heap``: room for ``count``), so the boundaries come as the merge of the sorted starts
 * and ends gives them to the C wall_parts. The prefix starts again from 0 at each union block (nothing running):
 * a block's parts are wall_parts of that block alone, to the bit, whichever blocks are swept with it (the reader's
 * windows cut the events into sweeps anywhere; a prefix carried from earlier blocks rounds the thirds of three
 * intervals running at once otherwise). */
static inline __attribute__((always_inline)) void start_order_sweep(
        const int64_t *starts, const int64_t *ends, const Py_ssize_t *order, Py_ssize_t count, started *heap,
        double *parts) {
    Py_ssize_t next = 0, size = 0;
    int64_t boundary = 0;
    double prefix = 0.0;  /* never -0.0: adding 0.0 (a segment no interval runs in) leaves it as it is */
    for (int first = 1; next < count || size; first = 0) {
        Py_ssize_t position = next < count ? (order ? order[next] : next) : 0;
        if (!size && (next + 1 == count || starts[order ? order[next + 1] : next + 1] >= ends[position])) {
            /* An interval alone (nothing running, the next one starting at or after its end): its start and end
             * are the next two boundaries, one interval running between them. */
            prefix = (double)(ends[position] - starts[position]);
            parts[position] = clipped_part(prefix, 0.0, starts[position], ends[position]);
            boundary = ends[position];
            next++;
            continue;
        }
        int64_t value = next < count ? starts[position] : heap[0].end;
        if (size && heap[0].end < value) value = heap[0].end;
        if (!first && size)  /* x / 1.0 is x: most segments have one interval running, spared the division */
            prefix = prefix + (size > 1 ? (double)(value - boundary) / (double)size : (double)(value - boundary));
        boundary = value;
        while (size && heap[0].end == value) {  /* those ending here first: one starting here begins a new block */
            started done = heap_pop(heap, &size);
            parts[done.position] = clipped_part(prefix, done.start_prefix, starts[done.position], done.end);
        }
        if (!size) prefix = 0.0;  /* a union block begins */
        for (; next < count && starts[order ? order[next] : next] == value; next++) {
            position = order ? order[next] : next;
            heap_push(heap, &size, (started){ends[position], position, prefix});
        }
    }
}

/* fold_sweep(starts, ends, compositions, order, frontier, wall, window_starts, window_ends, call_union)
 *   -> (kept, union ns, last final end) or None
 *
 * section_time.EventFold._sweep in one pass: of the events carried (``starts``, ``ends``, ``compositions``: int64,
 * in the order they came), those whose union blocks end at or before ``frontier`` (every one when it is None) are
 * final: each one's wall part (its duration when every carried event, or every final one with a span under
 * 2**53 ns, is in order and apart; else wall_parts's, each union block's alone) added to its composition's ``wall``
 * (float64) one by one in start order, as np.add.at adds them: the whole read's sums to the bit, however the
 * reader's windows cut the events into sweeps; their union per call window added to ``call_union`` (int64; the windows
 * int64; all three None when there are none), as union_by_window gives it. The events left are moved, in their
 * order, to the front of the three arrays. ``order``: the stable argsort of ``starts``, or None while they are
 * sorted. Returned: how many events are left, the length of the final blocks' union, the last end of a final
 * event (None when none is final); None when the pass declines (the starts not sorted and no ``order``, or an
 * event ending before it starts: numpy sweeps those).
 */
static PyObject *fold_sweep(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[5] = {{0}}, windows_in[3] = {{0}};
    int have_order, have_windows, have_frontier = 0;
    int64_t frontier = 0;
    char *room = NULL;
    PyObject *result = NULL;
    if (check_arguments(nargs, 9, "fold_sweep") < 0) return NULL;
    have_order = args[3] != Py_None;
    have_windows = args[6] != Py_None;
    if (args[4] != Py_None) {
        frontier = PyLong_AsLongLong(args[4]);
        if (frontier == -1 && PyErr_Occurred()) return NULL;
        have_frontier = 1;
    }
    /* starts, ends, compositions (the carry, compacted in place), wall; the order */
    if (acquire(args, in, 3, 3) < 0) return NULL;
    if (acquire(args + 5, in + 3, 1, 1) < 0) { release(in, 3); return NULL; }
    if (have_order && acquire(args + 3, in + 4, 1, 0) < 0) { release(in, 4); return NULL; }
    if (have_windows && acquire(args + 6, windows_in, 3, 1) < 0) { release(in, 4 + have_order); return NULL; }
    int64_t *starts = in[0].buf, *ends = in[1].buf, *compositions = in[2].buf;
    double *wall = in[3].buf;
    Py_ssize_t count = in[0].len / 8, kinds = in[3].len / 8, windows = have_windows ? windows_in[0].len / 8 : 0;
    if (in[1].len != count * 8 || in[2].len != count * 8 ||
        (have_order && in[4].len != count * (Py_ssize_t)sizeof(Py_ssize_t)) ||
        (have_windows && (windows_in[1].len != windows * 8 || windows_in[2].len != windows * 8))) {
        PyErr_SetString(PyExc_ValueError, "fold_sweep: inconsistent sizes");
        goto done;
    }
    Py_ssize_t first_overlap = count;  /* the first event starting before the one before it ended */
    int sorted = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (compositions[i] < 0 || compositions[i] >= kinds) {
            PyErr_SetString(PyExc_ValueError, "fold_sweep: a composition is out of range");
            goto done;
        }
        if (ends[i] < starts[i]) break;
        if (i && starts[i] < ends[i - 1] && first_overlap == count) first_overlap = i;
        if (i && starts[i] < starts[i - 1]) sorted = 0;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (ends[i] < starts[i] || (!sorted && !have_order)) {  /* numpy's to do */
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    }
    {
        const Py_ssize_t *order = sorted ? NULL : in[4].buf;
#define POSITION(i) (order ? order[i] : (i))
        /* Union blocks in start order; their ends (the running reach) never decrease, so the final events are
         * the first ``final`` in start order. */
        Py_ssize_t final = 0;
        uint64_t union_ns = 0;
        int64_t reach = 0;
        for (Py_ssize_t i = 0; i < count;) {
            int64_t block_start = starts[POSITION(i)];
            do {
                int64_t end = ends[POSITION(i)];
                if (i == 0 || end > reach) reach = end;
                i++;
            } while (i < count && reach > starts[POSITION(i)]);
            if (have_frontier && reach > frontier) break;
            final = i;
            union_ns += (uint64_t)reach - (uint64_t)block_start;
        }
        if (!final) {
            result = Py_BuildValue("nLO", count, 0LL, Py_None);
            goto done;
        }
        size_t n = (size_t)count, size = n * (sizeof(double) + sizeof(started));
        if (order) size += n * (2 * 8 + 1);
        room = PyMem_Malloc(size);
        if (!room) { PyErr_NoMemory(); goto done; }
        double *parts = (double *)room;
        started *heap = (started *)(parts + n);
        int64_t *sorted_starts = (int64_t *)(heap + n), *sorted_ends = sorted_starts + n;
        char *is_final = order ? (char *)(sorted_ends + n) : NULL;  /* sorted: the first ``final`` */
        if (order) {
            memset(is_final, 0, n);
            for (Py_ssize_t i = 0; i < final; i++) is_final[order[i]] = 1;
        }
#define FINAL(i) (order ? is_final[i] : (i) < final)
        /* The final events in their order: in order and apart (all of them, or these with a span under 2**53 ns),
         * each one's part is its duration. */
        int in_order = first_overlap == count || (!order && first_overlap >= final);
        if (order && !in_order) {
            in_order = 1;
            for (Py_ssize_t i = 0, previous = -1; i < count && in_order; i++) {
                if (!is_final[i]) continue;
                if (previous >= 0 && starts[i] < ends[previous]) in_order = 0;
                previous = i;
            }
        }
        Py_ssize_t first = 0, last = final - 1;  /* the first and last final event in their order */
        if (order) {
            while (!is_final[first]) first++;
            for (last = count - 1; !is_final[last]; last--) {}
        }
        if (first_overlap < count && in_order)
            in_order = (int64_t)((uint64_t)ends[last] - (uint64_t)starts[first]) < ((int64_t)1 << 53);
        if (!in_order && order) start_order_sweep(starts, ends, order, final, heap, parts);
        if (!in_order && !order) start_order_sweep(starts, ends, NULL, final, heap, parts);  /* made for 0, 1, ... */
        int64_t last_end = ends[first];
        for (Py_ssize_t i = 0; i < final; i++) {  /* added one by one in start order, as the whole read adds them */
            Py_ssize_t position = POSITION(i);
            wall[compositions[position]] += in_order ? (double)(ends[position] - starts[position]) : parts[position];
            if (ends[position] > last_end) last_end = ends[position];
        }
        if (have_windows) {
            column final_starts = {(const char *)starts, 8}, final_ends = {(const char *)ends, 8};
            if (order) {
                for (Py_ssize_t i = 0; i < final; i++) {
                    sorted_starts[i] = starts[order[i]];
                    sorted_ends[i] = ends[order[i]];
                }
                final_starts.base = (const char *)sorted_starts;
                final_ends.base = (const char *)sorted_ends;
            }
            union_into(final_starts, final_ends, final, (column){windows_in[0].buf, 8},
                       (column){windows_in[1].buf, 8}, windows, windows_in[2].buf);
        }
        Py_ssize_t kept = 0;
        if (!order) {  /* the events left: those after the final ones */
            kept = count - final;
            memmove(starts, starts + final, kept * 8);
            memmove(ends, ends + final, kept * 8);
            memmove(compositions, compositions + final, kept * 8);
        } else {
            for (Py_ssize_t i = 0; i < count; i++) {
                if (is_final[i]) continue;
                starts[kept] = starts[i];
                ends[kept] = ends[i];
                compositions[kept] = compositions[i];
                kept++;
            }
        }
#undef FINAL
#undef POSITION
        result = Py_BuildValue("nLL", kept, (long long)union_ns, (long long)last_end);
    }
done:
    PyMem_Free(room);
    release(in, 4 + have_order);
    if (have_windows) release(windows_in, 3);
    return result;
}

/* partition_time(starts, ends, rows, start_order, window_starts, window_ends, parts) -> bool
 *
 * queue_time.partition_time in one sweep: the intervals [start, end) of row ``rows[i]`` (0 takes precedence over
 * 1 ...; ``starts``/``ends`` int64, may be strided; ``rows`` int64) cut time into segments at every start, end and
 * window edge; each segment inside a window (sorted, disjoint: int64) adds its length to
 * ``parts[window * (row_count + 1) + the lowest row active in it]``, the last column when none is (int64,
 * row_count + 1 columns, zeroed here). The intervals are taken in start order (``start_order``: their stable
 * argsort) and the ends of those started wait in a heap. The sums are whole numbers, those numpy's float64
 * bincount rounds exactly (below 2**53 ns: a window is shorter than a profile's 30-day bound). Returns False,
 * ``parts`` then undefined, when an interval ends before it starts (numpy's to do).
 */
static PyObject *partition_time(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer spans[2], in[4], out;
    int got = 0;
    PyObject *result = NULL;
    started *heap = NULL;
    Py_ssize_t *active = NULL;
    if (check_arguments(nargs, 7, "partition_time") < 0) return NULL;
    for (; got < 2; got++) {
        if (PyObject_GetBuffer(args[got], &spans[got], PyBUF_STRIDES) < 0) { release(spans, got); return NULL; }
        if (spans[got].ndim != 1 || spans[got].itemsize != 8) {
            PyErr_SetString(PyExc_ValueError, "partition_time: expects one-dimensional 8-byte starts and ends");
            release(spans, got + 1);
            return NULL;
        }
    }
    if (acquire(args + 2, in, 4, 0) < 0) { release(spans, 2); return NULL; }
    if (acquire(args + 6, &out, 1, 1) < 0) { release(spans, 2); release(in, 4); return NULL; }
    column starts = column_of(&spans[0]), ends = column_of(&spans[1]);
    const int64_t *rows = in[0].buf, *window_starts = in[2].buf, *window_ends = in[3].buf;
    const Py_ssize_t *order = in[1].buf;
    Py_ssize_t count = spans[0].shape[0], windows = in[2].len / 8;
    Py_ssize_t columns = windows ? out.len / 8 / windows : 0, row_count = columns - 1;
    if (spans[1].shape[0] != count || in[0].len != count * 8 || in[1].len != count * (Py_ssize_t)sizeof(Py_ssize_t)
        || in[3].len != windows * 8 || !windows || out.len != windows * columns * 8 || row_count < 0) {
        PyErr_SetString(PyExc_ValueError, "partition_time: inconsistent sizes");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (rows[i] < 0 || rows[i] >= row_count) {
            PyErr_SetString(PyExc_ValueError, "partition_time: a row is out of range");
            goto done;
        }
        if (at(ends, i) < at(starts, i)) {
            result = Py_False;
            Py_INCREF(result);
            goto done;
        }
    }
    heap = PyMem_Malloc((count ? count : 1) * sizeof(started));
    active = PyMem_Calloc(columns, sizeof(Py_ssize_t));  /* intervals of each row running */
    if (!heap || !active) { PyErr_NoMemory(); goto done; }
    {
        int64_t *parts = out.buf;
        memset(parts, 0, out.len);
        Py_ssize_t next = 0, size = 0, next_window_start = 0, next_window_end = 0;
        int64_t boundary = 0;
        for (int first = 1; next < count || size || next_window_start < windows || next_window_end < windows;
             first = 0) {
            int64_t value = INT64_MAX;  /* the next boundary: the smallest of the four streams' next values */
            if (next < count) value = at(starts, order[next]);
            if (size && heap[0].end < value) value = heap[0].end;
            if (next_window_start < windows && window_starts[next_window_start] < value)
                value = window_starts[next_window_start];
            if (next_window_end < windows && window_ends[next_window_end] < value) value = window_ends[next_window_end];
            Py_ssize_t window = next_window_start - 1;  /* the last window starting at or before the segment */
            if (!first && window >= 0 && boundary < window_ends[window]) {
                Py_ssize_t top = 0;
                while (top < row_count && !active[top]) top++;
                parts[window * columns + top] += value - boundary;
            }
            boundary = value;
            for (; next < count && at(starts, order[next]) == value; next++) {
                Py_ssize_t span = order[next];
                active[rows[span]]++;
                heap_push(heap, &size, (started){at(ends, span), span, 0.0});
            }
            while (size && heap[0].end == value) active[rows[heap_pop(heap, &size).position]]--;
            while (next_window_start < windows && window_starts[next_window_start] == value) next_window_start++;
            while (next_window_end < windows && window_ends[next_window_end] == value) next_window_end++;
        }
        result = Py_True;
        Py_INCREF(result);
    }
done:
    PyMem_Free(heap);
    PyMem_Free(active);
    release(spans, 2);
    release(in, 4);
    PyBuffer_Release(&out);
    return result;
}

#endif
