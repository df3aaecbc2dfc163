/* The reading passes over every record of a .ireeprof bundle: walking the
 * record headers, splitting the host execution events (152 bytes each, a
 * million per million dispatches), memory events and device-timed dispatch
 * events into the compact tables of sectionmark.readers.event_model, and the
 * link checks of readers/checks.py. numpy needs several passes over the data
 * for each; these do one. (Profiling's passes over the attributed events are
 * sectionmark.profiling._sectionpass.) Built when a C compiler is present; the
 * Python modules do the same with numpy when it is not, and
 * tests/readers/test_ireeprof_fast.py checks that both give identical results.
 *
 * All validation (and every error message) stays in Python, which gets the
 * first offending index of each kind.
 */
#include "../_buffers.h"

#define RECORD_HEADER_SIZE 104
#define HOST_EVENT_SIZE 152
#define SUBMISSION_SIZE 32 /* event_model.SUBMISSION_DTYPE */
#define QUEUE_OP_SIZE 36   /* event_model.QUEUE_OP_DTYPE */
#define EVENT_DISPATCH 2
#define EVENT_EXECUTE 3
#define EVENT_TYPES 11
#define MEMORY_EVENT_SIZE 160
#define DEVICE_DISPATCH_EVENT_SIZE 88 /* iree_hal_profile_dispatch_event_t */
#define DEVICE_DISPATCH_SIZE 60 /* device_events.DEVICE_DISPATCH_DTYPE */
#define MEMORY_SIZE 56     /* event_model.MEMORY_DTYPE */
#define MEMORY_EVENT_TYPES 12
#define MAX_TIMESTAMP_NS ((int64_t)1 << 62) /* event_model.MAX_TIMESTAMP_NS */
#define MAX_EVENT_NS ((int64_t)3600 * 1000000000) /* event_model.MAX_EVENT_NS */
#define MEMORY_POOL_STATS (1u << 4) /* event_model.MEMORY_POOL_STATS */

#include "_stream.h"

/* Growable array of fixed-size items, for outputs whose length is known only at the end. */
typedef struct {
    char *items;
    Py_ssize_t count, capacity, size;
} Growing;

static int grow(Growing *array) {
    if (array->count < array->capacity) return 0;
    Py_ssize_t capacity = array->capacity ? array->capacity * 2 : 1024;
    char *items = PyMem_Realloc(array->items, (size_t)(capacity * array->size));
    if (!items) return -1;
    array->items = items, array->capacity = capacity;
    return 0;
}

static PyObject *take_bytes(Growing *array) {
    PyObject *bytes = PyBytes_FromStringAndSize(array->items ? array->items : "", array->count * array->size);
    PyMem_Free(array->items);
    array->items = NULL;
    return bytes;
}

/* record_table(data, start, end, content_types) -> (offsets, headers, kinds)
 *
 * Walks the records of data[start:end]: ``offsets`` (int64) of every record; the walk stops after a record
 * whose header is cut short or whose length is below a header's or runs past ``end`` (its offset is the last
 * one, for the caller to report). ``headers``: the 104-byte header of every record with a whole header;
 * ``kinds`` (int64, one per header): the index in ``content_types`` (a tuple of bytes) of the record's content
 * type, -1 when it is none of them or its type string does not lie inside the record.
 */
static PyObject *record_table(PyObject *module, PyObject *args) {
    Py_buffer data;
    Py_ssize_t start, end;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*nnO!", &data, &start, &end, &PyTuple_Type, &names)) return NULL;
    PyObject *result = NULL;
    Growing offsets = {NULL, 0, 0, 8}, headers = {NULL, 0, 0, RECORD_HEADER_SIZE}, kinds = {NULL, 0, 0, 8};
    if (start < 0 || end > data.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "record_table: range outside the data");
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "record_table: content types must be bytes");
            goto done;
        }
    }
    const char *bytes = data.buf;
    for (Py_ssize_t offset = start; offset < end;) {
        if (grow(&offsets) < 0) { PyErr_NoMemory(); goto done; }
        memcpy(offsets.items + offsets.count++ * 8, &offset, 8);
        if (end - offset < RECORD_HEADER_SIZE) break;
        if (grow(&headers) < 0 || grow(&kinds) < 0) { PyErr_NoMemory(); goto done; }
        const char *record = bytes + offset;
        memcpy(headers.items + headers.count++ * RECORD_HEADER_SIZE, record, RECORD_HEADER_SIZE);
        uint64_t length = u64(record), header_size = u32(record + 56), type_length = u32(record + 60);
        int64_t kind = -1;
        if (length <= (uint64_t)(end - offset) && header_size >= RECORD_HEADER_SIZE && header_size <= length &&
            type_length <= length - header_size) {
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names) && kind < 0; i++) {
                PyObject *name = PyTuple_GET_ITEM(names, i);
                if ((uint64_t)PyBytes_GET_SIZE(name) == type_length &&
                    !memcmp(PyBytes_AS_STRING(name), record + header_size, type_length))
                    kind = i;
            }
        }
        memcpy(kinds.items + kinds.count++ * 8, &kind, 8);
        if (length < RECORD_HEADER_SIZE || length > (uint64_t)(end - offset)) break;
        offset += (Py_ssize_t)length;
    }
    {
        PyObject *parts[3] = {take_bytes(&offsets), take_bytes(&headers), take_bytes(&kinds)};
        if (parts[0] && parts[1] && parts[2]) result = PyTuple_Pack(3, parts[0], parts[1], parts[2]);
        for (int i = 0; i < 3; i++) Py_XDECREF(parts[i]);
    }
done:
    PyMem_Free(offsets.items);
    PyMem_Free(headers.items);
    PyMem_Free(kinds.items);
    PyBuffer_Release(&data);
    return result;
}


/* Move dispatch row ``last`` back past the earlier rows of its submission that start later (one step of a
 * stable insertion sort). Returns 0, leaving the rest unsorted, once more than ``budget`` rows have moved. */
static int sort_into_place(char *rows, Py_ssize_t last, Py_ssize_t *moves, Py_ssize_t budget) {
    char row[DISPATCH_SIZE];
    memcpy(row, rows + last * DISPATCH_SIZE, DISPATCH_SIZE);
    uint64_t submission = u64(row);
    int64_t start = (int64_t)u64(row + 32);
    Py_ssize_t place = last;
    while (place > 0 && u64(rows + (place - 1) * DISPATCH_SIZE) == submission &&
           (int64_t)u64(rows + (place - 1) * DISPATCH_SIZE + 32) > start) {
        if (++*moves > budget) break;
        place--;
    }
    memmove(rows + (place + 1) * DISPATCH_SIZE, rows + place * DISPATCH_SIZE, (size_t)(last - place) * DISPATCH_SIZE);
    memcpy(rows + place * DISPATCH_SIZE, row, DISPATCH_SIZE);
    return *moves <= budget;
}

/* host_events(data, positions, known_codes, known_keys, dispatches, submissions, queue_ops)
 *   -> (dispatch rows, submission rows, queue-op rows, first bad length, first bad type, first failed,
 *       first unknown function, all times plausible, dispatches in (submission, start) order,
 *       (stream, event id) strictly increasing)
 *
 * ``positions`` (int64): byte offset of each record in ``data``. Each record goes to the dispatch, submission or
 * queue-op table by its type. A dispatch's key is the ``known_keys`` entry of its (executable id << 32 |
 * function ordinal) among the sorted ``known_codes`` (0 when absent). Returned: the index of the first record
 * whose length is not 152, whose type is unknown, whose status is not OK, which is a dispatch of an unknown
 * function; -1 for none.
 * Then whether every event's times are within what checks.check_times accepts (if not, the caller finds
 * which and why), whether the dispatch rows are in (submission, start) order, and whether the (stream, event id)
 * pairs strictly increase (then they are unique). Dispatches of one submission that start out of order are
 * moved into place as they come (checks.by_submission_and_start's stable order: IREE writes all but a few
 * in order); rows far from sorted, or submissions out of order, are left for the caller to sort (a stable sort
 * of partly sorted rows gives the same, as rows of equal keys never swap).
 */
static PyObject *host_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[4], out[3];
    if (check_arguments(nargs, 7, "host_events") < 0 || acquire(args, in, 4, 0) < 0) return NULL;
    if (acquire(args + 4, out, 3, 3) < 0) { release(in, 4); return NULL; }
    PyObject *result = NULL;
    const char *bytes = in[0].buf;
    const int64_t *positions = in[1].buf;
    const uint64_t *known_codes = in[2].buf;
    const uint32_t *known_keys = in[3].buf;
    Py_ssize_t total = in[1].len / (Py_ssize_t)sizeof(int64_t), known = in[2].len / 8;
    for (Py_ssize_t i = 0; i < total; i++) {
        if (positions[i] < 0 || positions[i] > in[0].len - HOST_EVENT_SIZE) {
            PyErr_SetString(PyExc_ValueError, "host_events: a record lies outside the data");
            goto done;
        }
    }
    if (in[3].len < known * 4 || out[0].len < total * DISPATCH_SIZE || out[1].len < total * SUBMISSION_SIZE ||
        out[2].len < total * QUEUE_OP_SIZE) {
        PyErr_SetString(PyExc_ValueError, "host_events: an output is too small");
        goto done;
    }
    {
        char *dispatches = out[0].buf, *submissions = out[1].buf, *queue_ops = out[2].buf;
        Py_ssize_t nd = 0, ns = 0, nq = 0, bad_length = -1, bad_type = -1, failed = -1, unknown = -1;
        int plausible = 1;
        int in_order = 1, increasing = 1;  /* in_order: the dispatch rows written so far are in order */
        Py_ssize_t moves = 0;
        uint64_t last_code = 0, last_key = 0, previous_submission = 0, previous_stream = 0, previous_event = 0;
        int64_t previous_start = 0;
        int have_code = 0;
        for (Py_ssize_t index = 0; index < total; index++) {
            const char *record = bytes + positions[index];
            uint32_t type = u32(record + 4);
            int64_t start = (int64_t)u64(record + 104), end = (int64_t)u64(record + 112);
            if (bad_length < 0 && u32(record) != HOST_EVENT_SIZE) bad_length = index;
            if (bad_type < 0 && (type < 1 || type > EVENT_TYPES)) bad_type = index;
            if (failed < 0 && u32(record + 12) != 0) failed = index;
            if (plausible && (start < 0 || end < start || end >= MAX_TIMESTAMP_NS || end - start > MAX_EVENT_NS ||
                                    (type == EVENT_DISPATCH && u64(record + 136) >> 63)))
                plausible = 0;
            uint64_t stream = u64(record + 56), event_id = u64(record + 16);
            if (index && (stream < previous_stream || (stream == previous_stream && event_id <= previous_event)))
                increasing = 0;
            previous_stream = stream, previous_event = event_id;
            if (type == EVENT_DISPATCH) {
                char *row = dispatches + nd * DISPATCH_SIZE;
                uint64_t executable = u64(record + 40), submission = u64(record + 24);
                uint32_t ordinal = u32(record + 76);
                uint64_t code = executable << 32 | ordinal;
                if (!have_code || code != last_code) {  /* consecutive dispatches often run one function */
                    Py_ssize_t found = executable >> 32 ? known : find_sorted(known_codes, known, code);
                    last_code = code, have_code = 1;
                    last_key = found < known ? known_keys[found] : UINT64_MAX;
                }
                if (last_key == UINT64_MAX && unknown < 0) unknown = index;
                uint32_t key = last_key == UINT64_MAX ? 0 : (uint32_t)last_key;
                memcpy(row, record + 24, 16);      /* submission, command_buffer */
                memcpy(row + 16, record + 72, 4);  /* command_index */
                memcpy(row + 20, &key, 4);         /* key */
                memcpy(row + 24, record + 64, 8);  /* device, queue */
                memcpy(row + 32, record + 104, 16); /* start_ns, end_ns */
                memcpy(row + 48, record + 136, 8); /* tile_ns */
                memcpy(row + 56, record + 128, 8); /* tile_count */
                if (nd && submission < previous_submission) in_order = 0;
                if (in_order && nd && submission == previous_submission && start < previous_start)
                    in_order = sort_into_place(dispatches, nd, &moves, 16 * total + 1024);
                nd++;
                previous_submission = u64(dispatches + (nd - 1) * DISPATCH_SIZE);
                previous_start = (int64_t)u64(dispatches + (nd - 1) * DISPATCH_SIZE + 32);
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
        result = Py_BuildValue("nnnnnnnOOO", nd, ns, nq, bad_length, bad_type, failed, unknown,
                               plausible ? Py_True : Py_False, in_order ? Py_True : Py_False,
                               increasing ? Py_True : Py_False);
    }
done:
    release(in, 4);
    release(out, 3);
    return result;
}

/* dispatch_links(dispatches, submissions, buffer_ids, timed_bases, timed, expected, found)
 *   -> (first orphan, first wrong buffer, first outside, duplicate's submission rank, duplicate's command index,
 *       first short submission)
 *
 * The link checks of checks.check_links in one pass. ``dispatches`` (DISPATCH_DTYPE) sorted by submission;
 * ``submissions`` (SUBMISSION_DTYPE) sorted by id, unique, each executing one of ``buffer_ids`` (sorted uint64).
 * Command ``i`` of buffer ``b`` (position in buffer_ids) is timed when ``i < timed_bases[b + 1] - timed_bases[b]``
 * and ``timed[timed_bases[b] + i]``; ``expected[b]``: its number of timed commands. A dispatch's submission
 * (rank) is the first submission whose id is not below its own (the last one past the end), as
 * ``np.searchsorted``. Written: ``found`` (int64 per submission), its timed dispatch events. Returned: the index of
 * the first dispatch whose submission's id differs from its own (orphan), whose command buffer differs from the
 * submission's, which starts before or ends after the submission's execution; the smallest (rank, command
 * index) with two events, or -1 for none and -2 when the command indices are too large to check here; the first
 * submission with fewer timed events than expected; -1 for none.
 */
#define MAX_CHECKED_COMMAND_INDEX (1 << 22)
static PyObject *dispatch_links(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[6], out[1];
    if (check_arguments(nargs, 7, "dispatch_links") < 0 || acquire(args, in, 6, 0) < 0) return NULL;
    if (acquire(args + 6, out, 1, 1) < 0) { release(in, 6); return NULL; }
    PyObject *result = NULL;
    int64_t *stamps = NULL;
    Py_ssize_t *positions = NULL;
    const char *dispatches = in[0].buf, *submissions = in[1].buf;
    const uint64_t *buffer_ids = in[2].buf;
    const int64_t *bases = in[3].buf, *expected = in[5].buf;
    const uint8_t *timed = in[4].buf;
    int64_t *found = out[0].buf;
    Py_ssize_t count = in[0].len / DISPATCH_SIZE, executions = in[1].len / SUBMISSION_SIZE;
    Py_ssize_t buffers = in[2].len / 8;
    if (in[3].len < (buffers + 1) * 8 || in[5].len < buffers * 8 || out[0].len < executions * 8 || !executions) {
        PyErr_SetString(PyExc_ValueError, "dispatch_links: inconsistent table sizes");
        goto done;
    }
    positions = PyMem_Malloc((size_t)executions * sizeof(Py_ssize_t));
    if (!positions) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t r = 0; r < executions; r++) {
        positions[r] = find_sorted(buffer_ids, buffers, u64(submissions + r * SUBMISSION_SIZE + 8));
        if (positions[r] == buffers) {
            PyErr_SetString(PyExc_ValueError, "dispatch_links: an executed command buffer is not among buffer_ids");
            goto done;
        }
        found[r] = 0;
    }
    uint32_t largest = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t index = u32(dispatches + i * DISPATCH_SIZE + 16);
        if (index > largest) largest = index;
    }
    Py_ssize_t duplicate_rank = -1, duplicate_index = -1;
    if (largest < MAX_CHECKED_COMMAND_INDEX) {
        stamps = PyMem_Malloc(((size_t)largest + 1) * sizeof(int64_t));
        if (!stamps) { PyErr_NoMemory(); goto done; }
        memset(stamps, 0xff, ((size_t)largest + 1) * sizeof(int64_t));  /* -1: seen in no submission */
    } else {
        duplicate_rank = -2;
    }
    {
        Py_ssize_t orphan = -1, wrong_buffer = -1, outside = -1, short_submission = -1, next = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            const char *dispatch = dispatches + i * DISPATCH_SIZE;
            uint64_t submission = u64(dispatch);
            while (next < executions && u64(submissions + next * SUBMISSION_SIZE) < submission) next++;
            Py_ssize_t rank = next < executions ? next : executions - 1;
            const char *execution = submissions + rank * SUBMISSION_SIZE;
            if (orphan < 0 && u64(execution) != submission) orphan = i;
            if (wrong_buffer < 0 && u64(execution + 8) != u64(dispatch + 8)) wrong_buffer = i;
            if (outside < 0 && ((int64_t)u64(dispatch + 32) < (int64_t)u64(execution + 16) ||
                                (int64_t)u64(dispatch + 40) > (int64_t)u64(execution + 24)))
                outside = i;
            uint32_t index = u32(dispatch + 16);
            Py_ssize_t buffer = positions[rank];
            if (index < bases[buffer + 1] - bases[buffer] && timed[bases[buffer] + index]) found[rank]++;
            if (stamps && (duplicate_rank < 0 || duplicate_rank == rank)) {
                if (stamps[index] == rank && (duplicate_rank < 0 || index < duplicate_index))
                    duplicate_rank = rank, duplicate_index = index;
                stamps[index] = rank;
            }
        }
        for (Py_ssize_t r = 0; r < executions && short_submission < 0; r++)
            if (found[r] < expected[positions[r]]) short_submission = r;
        result = Py_BuildValue("nnnnnn", orphan, wrong_buffer, outside, duplicate_rank, duplicate_index,
                               short_submission);
    }
done:
    PyMem_Free(stamps);
    PyMem_Free(positions);
    release(in, 6);
    release(out, 1);
    return result;
}

/* memory_events(data, positions, memory, devices, event_ids) -> (first bad length, first unknown type, increasing)
 *
 * The memory events (160 bytes each) at byte ``positions`` (int64) of ``data`` as MEMORY_DTYPE rows of
 * ``memory``, their device and event id to ``devices``/``event_ids`` (uint64). Returned: the index of the first
 * record whose length is not 160, whose type is not a known memory event type (-1: none), and whether the
 * (device, event id) pairs strictly increase (then they are unique).
 */
static PyObject *memory_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[2], out[3];
    if (check_arguments(nargs, 5, "memory_events") < 0 || acquire(args, in, 2, 0) < 0) return NULL;
    if (acquire(args + 2, out, 3, 3) < 0) { release(in, 2); return NULL; }
    PyObject *result = NULL;
    const char *bytes = in[0].buf;
    const int64_t *positions = in[1].buf;
    Py_ssize_t total = in[1].len / 8;
    if (out[0].len < total * MEMORY_SIZE || out[1].len < total * 8 || out[2].len < total * 8) {
        PyErr_SetString(PyExc_ValueError, "memory_events: an output is too small");
        goto done;
    }
    {
        char *memory = out[0].buf;
        uint64_t *devices = out[1].buf, *event_ids = out[2].buf;
        Py_ssize_t bad_length = -1, unknown = -1;
        int increasing = 1;
        for (Py_ssize_t i = 0; i < total; i++) {
            if (positions[i] < 0 || positions[i] > in[0].len - MEMORY_EVENT_SIZE) {
                PyErr_SetString(PyExc_ValueError, "memory_events: a record lies outside the data");
                goto done;
            }
            const char *record = bytes + positions[i];
            uint32_t type = u32(record + 4);
            if (bad_length < 0 && u32(record) != MEMORY_EVENT_SIZE) bad_length = i;
            if (unknown < 0 && (type < 1 || type > MEMORY_EVENT_TYPES)) unknown = i;
            devices[i] = u32(record + 64);
            event_ids[i] = u64(record + 16);
            if (i && (devices[i] < devices[i - 1] || (devices[i] == devices[i - 1] && event_ids[i] <= event_ids[i - 1])))
                increasing = 0;
            char *row = memory + i * MEMORY_SIZE;
            memcpy(row, record + 24, 8);       /* time_ns */
            memcpy(row + 8, record + 4, 8);    /* type, flags */
            memcpy(row + 16, record + 56, 8);  /* submission */
            memcpy(row + 24, record + 32, 16); /* allocation, pool */
            memcpy(row + 40, record + 104, 8); /* length */
            memcpy(row + 48, record + 120, 8); /* pool_reserved */
        }
        result = Py_BuildValue("nnO", bad_length, unknown, increasing ? Py_True : Py_False);
    }
done:
    release(in, 2);
    release(out, 3);
    return result;
}

/* device_dispatch_events(data, positions, known_codes, known_keys, events) -> (first bad length, first unknown)
 *
 * The device-timed dispatch events (iree_hal_profile_dispatch_event_t, 88 bytes) at byte ``positions`` (int64) of
 * ``data``, gathered into ``events`` (device_events.DEVICE_DISPATCH_DTYPE rows: event id, submission, command
 * buffer, start and end ticks, device, queue, flags, command index, key; device and queue are left for the caller,
 * who knows each record's chunk). A key is found as in host_events. Returned: the index of the first record whose
 * length is not 88, and of the first dispatch of an unknown function; -1 for none.
 */
static PyObject *device_dispatch_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[4], out[1];
    if (check_arguments(nargs, 5, "device_dispatch_events") < 0 || acquire(args, in, 4, 0) < 0) return NULL;
    if (acquire(args + 4, out, 1, 1) < 0) { release(in, 4); return NULL; }
    PyObject *result = NULL;
    const char *bytes = in[0].buf;
    const int64_t *positions = in[1].buf;
    const uint64_t *known_codes = in[2].buf;
    const uint32_t *known_keys = in[3].buf;
    Py_ssize_t total = in[1].len / 8, known = in[2].len / 8;
    if (in[3].len < known * 4 || out[0].len < total * DEVICE_DISPATCH_SIZE) {
        PyErr_SetString(PyExc_ValueError, "device_dispatch_events: an output is too small");
        goto done;
    }
    {
        Py_ssize_t bad_length = -1, unknown = -1;
        for (Py_ssize_t i = 0; i < total; i++) {
            if (positions[i] < 0 || positions[i] > in[0].len - DEVICE_DISPATCH_EVENT_SIZE) {
                PyErr_SetString(PyExc_ValueError, "device_dispatch_events: a record lies outside the data");
                goto done;
            }
            const char *record = bytes + positions[i];
            char *row = (char *)out[0].buf + i * DEVICE_DISPATCH_SIZE;
            if (bad_length < 0 && u32(record) != DEVICE_DISPATCH_EVENT_SIZE) bad_length = i;
            uint64_t executable = u64(record + 32);
            uint32_t ordinal = u32(record + 44);
            Py_ssize_t found = executable >> 32 ? known : find_sorted(known_codes, known, executable << 32 | ordinal);
            uint32_t key = found < known ? known_keys[found] : 0;
            if (found == known && unknown < 0) unknown = i;
            memcpy(row, record + 8, 24);       /* event_id, submission, command_buffer */
            memcpy(row + 24, record + 72, 16); /* start_tick, end_tick */
            memset(row + 40, 0, 8);            /* device, queue: the caller's */
            memcpy(row + 48, record + 4, 4);   /* flags */
            memcpy(row + 52, record + 40, 4);  /* command_index */
            memcpy(row + 56, &key, 4);         /* key */
        }
        result = Py_BuildValue("nn", bad_length, unknown);
    }
done:
    release(in, 4);
    release(out, 1);
    return result;
}

/* not_dispatches(data, positions, found) -> (count, increasing, first bad length)
 *
 * The indices (int64, into ``found``) of the host event records at byte ``positions`` of ``data`` whose type
 * (4 bytes into the record) is not a dispatch: a profile's executions and queue operations, a few per call,
 * gathered before its dispatches are read (ireeprof_stream.DispatchStream.layout); and whether the records'
 * (stream, event id) pairs strictly increase (then they are unique: the fields share the type's cache line), and
 * the index of the first record whose length is not a host event's (-1: none).
 */
static PyObject *not_dispatches(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in[2], out[1];
    if (check_arguments(nargs, 3, "not_dispatches") < 0 || acquire(args, in, 2, 0) < 0) return NULL;
    if (acquire(args + 2, out, 1, 1) < 0) { release(in, 2); return NULL; }
    PyObject *result = NULL;
    const char *bytes = in[0].buf;
    const int64_t *positions = in[1].buf;
    int64_t *found = out[0].buf;
    Py_ssize_t total = in[1].len / 8, count = 0;
    int increasing = 1;
    Py_ssize_t bad_length = -1;
    uint64_t previous_stream = 0, previous_event = 0;
    if (out[0].len < total * 8) {
        PyErr_SetString(PyExc_ValueError, "not_dispatches: the output is too small");
        goto done;
    }
    for (Py_ssize_t i = 0; i < total; i++) {
        if (positions[i] < 0 || positions[i] > in[0].len - 64) {
            PyErr_SetString(PyExc_ValueError, "not_dispatches: a record lies outside the data");
            goto done;
        }
        const char *record = bytes + positions[i];
        if (bad_length < 0 && u32(record) != HOST_EVENT_SIZE) bad_length = i;
        if (u32(record + 4) != EVENT_DISPATCH) found[count++] = i;
        uint64_t stream = u64(record + 56), event_id = u64(record + 16);
        if (i && (stream < previous_stream || (stream == previous_stream && event_id <= previous_event)))
            increasing = 0;
        previous_stream = stream, previous_event = event_id;
    }
    result = Py_BuildValue("nOn", count, increasing ? Py_True : Py_False, bad_length);
done:
    release(in, 2);
    release(out, 1);
    return result;
}

static PyMethodDef methods[] = {
    {"record_positions", (PyCFunction)(void (*)(void))record_positions, METH_FASTCALL,
     "record_positions(starts, firsts, counts, chunk, begin, itemsize, positions) -> None"},
    {"level_changes", (PyCFunction)(void (*)(void))level_changes, METH_FASTCALL,
     "level_changes(memory, levels, changes) -> None"},
    {"not_dispatches", (PyCFunction)(void (*)(void))not_dispatches, METH_FASTCALL,
     "not_dispatches(data, positions, found) -> (count, increasing, first_bad_length)"},
    {"record_table", record_table, METH_VARARGS,
     "record_table(data, start, end, content_types) -> (offsets, headers, kinds) as bytes"},
    {"host_events", (PyCFunction)(void (*)(void))host_events, METH_FASTCALL,
     "host_events(data, positions, known_codes, known_keys, dispatches, submissions, queue_ops) -> (dispatches, "
     "submissions, queue_ops, first_bad_length, first_bad_type, first_failed, first_unknown_function, plausible, "
     "in_order, increasing)"},
    {"dispatch_links", (PyCFunction)(void (*)(void))dispatch_links, METH_FASTCALL,
     "dispatch_links(dispatches, submissions, buffer_ids, timed_bases, timed, expected, found) -> (orphan, "
     "wrong_buffer, outside, duplicate_rank, duplicate_index, short_submission)"},
    {"device_dispatch_events", (PyCFunction)(void (*)(void))device_dispatch_events, METH_FASTCALL,
     "device_dispatch_events(data, positions, known_codes, known_keys, events) -> (first_bad_length, "
     "first_unknown_function)"},
    {"memory_events", (PyCFunction)(void (*)(void))memory_events, METH_FASTCALL,
     "memory_events(data, positions, memory, devices, event_ids) -> (first_bad_length, first_unknown_type, "
     "increasing)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "sectionmark.readers._ireeprof",
    "The record walk, event splits and link checks of the .ireeprof reader, in C.", -1, methods,
};

/* The row size this build writes and the version of its functions' arguments: readers/event_model.py refuses a
 * stale build whose rows or arguments differ. Version 2: attribution's slot and call are columns, not rows;
 * 3: event_sums also sums tiles and finds each (call, composition)'s first start and last end; 4: attribute_events,
 * event_sums and union_by_window moved to sectionmark.profiling._sectionpass; 5: not_dispatches; 6: record_positions
 * and level_changes (readers/_stream.h). */
PyMODINIT_FUNC PyInit__ireeprof(void) {
    PyObject *module = PyModule_Create(&module_definition);
    if (module && (PyModule_AddIntConstant(module, "DISPATCH_SIZE", DISPATCH_SIZE) < 0 ||
                   PyModule_AddIntConstant(module, "INTERFACE_VERSION", 6) < 0 ||
                   PyModule_AddIntConstant(module, "DEVICE_DISPATCH_SIZE", DEVICE_DISPATCH_SIZE) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
