/* The Tracy replay's send loop (sectionmark.renderers.tracy_out): every zone begin and end, message and plot
 * point of a replayed profile sent when the profiled run's host did it. Tracy takes a GPU zone's CPU-side
 * begin and end ("CPU command setup time", "delay to execution") from the moment the client sends them, so
 * they are only true when each is sent on time: a call of a small model submits a zone every few
 * microseconds, which Python's per-step cost (tens of microseconds on a busy machine) cannot follow. This
 * loop waits on the monotonic clock (the clock the replay's GPU contexts are anchored to) and calls Tracy's C
 * functions directly, without the GIL. Built when a C compiler is present; without it the replay runs the
 * same steps in Python, later than the run where zones are dense (docs/tracy.md). At each submission, message
 * and plot point the loop checks the clock: when it reached one late (a busy machine), the rest of the replay
 * moves later by that much (its GPU times too), so every zone keeps its duration, its place in its call and its
 * true delay to execution, messages and plot points their places; only what comes after sits later.
 *
 * Tracy's functions are called through the addresses the caller binds (the tracing runtime's ___tracy_*).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* tracy_out.STEP_DTYPE */
typedef struct {
    int64_t at_ns;    /* monotonic time to send it at */
    int64_t time_ns;  /* zone begin/end: its GPU timestamp (monotonic); plot: the value */
    uint64_t pointer; /* begin: source location; message: text; plot: its name */
    uint64_t size;    /* message: text length */
    uint32_t kind;    /* STEP_* */
    uint32_t context; /* zone begin/end: the GPU context */
} Step;
#define STEP_SIZE 40
_Static_assert(sizeof(Step) == STEP_SIZE, "Step must match tracy_out.STEP_DTYPE");
enum { STEP_BEGIN = 0, STEP_END = 1, STEP_MESSAGE = 2, STEP_PLOT = 3, STEP_SUBMISSION = 4, STEP_FRAME = 5 };

/* Tracy's C API structures (docs: shared TRACY.md), passed by value. */
typedef struct { uint64_t srcloc; uint16_t query; uint8_t context; } GpuZoneBegin;
typedef struct { int64_t gpu_time; uint16_t query; uint8_t context; } GpuTime;
typedef struct { uint16_t query; uint8_t context; } GpuZoneEnd;
typedef void (*ZoneBeginFunction)(GpuZoneBegin);
typedef void (*ZoneEndFunction)(GpuZoneEnd);
typedef void (*TimeFunction)(GpuTime);
typedef void (*MessageFunction)(const char *, size_t, int32_t);
typedef void (*PlotFunction)(const char *, int64_t);
typedef void (*FrameFunction)(const char *);

static int64_t now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Sleep while the time is far, spin when it is near: a sleep overshoots, by milliseconds on a busy machine
 * (measured: a 4 ms sleep took 29 ms with every core busy). */
static void wait_until(int64_t deadline) {
    for (;;) {
        int64_t left = deadline - now_ns();
        if (left <= 0) return;
        if (left > 50000000) {
            int64_t nap = left - 30000000;
            struct timespec pause = {nap / 1000000000, nap % 1000000000};
            nanosleep(&pause, NULL);
        }
    }
}

/* send(steps, zone_begin, zone_end, gpu_time, message, plot, frame_mark, query_start) -> int
 *
 * Sends ``steps`` (bytes of tracy_out.STEP_DTYPE, in order) through the bound functions' addresses. Query
 * ids go round per context from ``query_start`` (each query's time is sent right after its begin or end, so
 * an id is free again at once). Returns how much later than planned the replay ended (ns).
 */
static PyObject *send(PyObject *module, PyObject *args) {
    Py_buffer steps;
    unsigned long long begin_address, end_address, time_address, message_address, plot_address, frame_address;
    unsigned int query_start;
    if (!PyArg_ParseTuple(args, "y*KKKKKKI", &steps, &begin_address, &end_address, &time_address, &message_address,
                          &plot_address, &frame_address, &query_start))
        return NULL;
    if (steps.len % STEP_SIZE || !begin_address || !end_address || !time_address || !message_address ||
        !plot_address || !frame_address) {
        PyBuffer_Release(&steps);
        PyErr_SetString(PyExc_ValueError, "send: steps must be whole rows and function addresses not 0");
        return NULL;
    }
    ZoneBeginFunction zone_begin = (ZoneBeginFunction)(uintptr_t)begin_address;
    ZoneEndFunction zone_end = (ZoneEndFunction)(uintptr_t)end_address;
    TimeFunction gpu_time = (TimeFunction)(uintptr_t)time_address;
    MessageFunction message = (MessageFunction)(uintptr_t)message_address;
    PlotFunction plot = (PlotFunction)(uintptr_t)plot_address;
    FrameFunction frame_mark = (FrameFunction)(uintptr_t)frame_address;
    const Step *step = steps.buf;
    Py_ssize_t count = steps.len / STEP_SIZE;
    uint16_t queries[256];
    for (int context = 0; context < 256; context++) queries[context] = (uint16_t)query_start;
    int64_t delay = 0; /* how much later than planned the replay runs since a submission it reached late */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++, step++) {
        wait_until(step->at_ns + delay);
        uint8_t context = (uint8_t)step->context;
        if (step->kind >= STEP_MESSAGE) { /* between submissions' zones: where the replay may fall behind */
            int64_t late = now_ns() - (step->at_ns + delay);
            if (late > 0) delay += late;
        }
        switch (step->kind) {
        case STEP_SUBMISSION:
            break;
        case STEP_BEGIN:
            zone_begin((GpuZoneBegin){step->pointer, ++queries[context], context});
            gpu_time((GpuTime){step->time_ns + delay, queries[context], context});
            break;
        case STEP_END:
            zone_end((GpuZoneEnd){++queries[context], context});
            gpu_time((GpuTime){step->time_ns + delay, queries[context], context});
            break;
        case STEP_MESSAGE:
            message((const char *)(uintptr_t)step->pointer, (size_t)step->size, 0);
            break;
        case STEP_FRAME:
            frame_mark(NULL);
            break;
        default:
            plot((const char *)(uintptr_t)step->pointer, step->time_ns);
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&steps);
    return PyLong_FromLongLong(delay);
}

static PyMethodDef methods[] = {
    {"send", send, METH_VARARGS, "Send the replay's steps at their times through Tracy's C functions."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tracyreplay", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tracyreplay(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module && PyModule_AddIntConstant(module, "STEP_SIZE", STEP_SIZE) < 0) Py_CLEAR(module);
    return module;
}
