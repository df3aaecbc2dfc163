/* Per-thread stacks of open Tracy zones, for eager sections.
 *
 * The same job as sectionmark.markers.zonestack.PythonZoneStack, without the cost of
 * two ctypes calls and a threading.local per section (about 0.6 us of the
 * 0.9 us a traced section takes otherwise). Built when a C compiler is
 * present; sectionmark falls back to the Python stack when it is not.
 *
 * Tracy's begin/end are called through the addresses the caller binds
 * (the tracing runtime's ___tracy_emit_zone_begin / _end). Everything runs
 * with the GIL held; the stack itself is thread-local C storage.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    uint32_t id;
    int32_t active;
} ZoneContext; /* Tracy's TracyCZoneCtx */

typedef ZoneContext (*BeginFunction)(const void *location, int32_t active);
typedef void (*EndFunction)(ZoneContext zone);

typedef struct {
    PyObject *marker; /* strong reference while the zone is open */
    ZoneContext zone;
} Entry;

typedef struct {
    Entry *entries;
    Py_ssize_t size, capacity;
} Stack;

static _Thread_local Stack stack;
static _Thread_local int thread_seen;
static BeginFunction begin_zone;
static EndFunction end_zone;
static PyObject *on_new_thread; /* called once per thread, before its first zone */
static PyObject *keep_alive;    /* whatever owns the bound functions */

static PyObject *bind(PyObject *module, PyObject *args) {
    unsigned long long begin_address, end_address;
    PyObject *callback, *owner;
    if (!PyArg_ParseTuple(args, "KKOO", &begin_address, &end_address, &callback, &owner)) return NULL;
    if (!begin_address || !end_address) {
        PyErr_SetString(PyExc_ValueError, "zone function addresses must not be 0");
        return NULL;
    }
    begin_zone = (BeginFunction)(uintptr_t)begin_address;
    end_zone = (EndFunction)(uintptr_t)end_address;
    Py_INCREF(callback);
    Py_XSETREF(on_new_thread, callback);
    Py_INCREF(owner);
    Py_XSETREF(keep_alive, owner);
    Py_RETURN_NONE;
}

/* The callback reports its own errors; anything left is printed, not raised:
 * naming a thread must never break a section. */
static void name_this_thread(void) {
    thread_seen = 1;
    PyObject *callback = on_new_thread;
    if (callback == NULL || callback == Py_None) return;
    Py_INCREF(callback); /* bind() inside the callback may drop the last other reference */
    PyObject *result = PyObject_CallNoArgs(callback);
    if (result == NULL) PyErr_WriteUnraisable(callback);
    Py_XDECREF(result);
    Py_DECREF(callback);
}

/* open_zone(marker, location_address): begin a zone and remember it for marker. */
static PyObject *open_zone(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "open_zone(marker, location_address)");
        return NULL;
    }
    if (begin_zone == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "zone functions are not bound");
        return NULL;
    }
    void *location = PyLong_AsVoidPtr(args[1]);
    if (location == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "location address must not be 0");
        return NULL;
    }
    if (!thread_seen) name_this_thread();
    /* Begin first: nothing below runs Python code, so the stack cannot change
     * between the capacity check and the store. */
    ZoneContext zone = begin_zone(location, 1);
    if (stack.size == stack.capacity) {
        Py_ssize_t capacity = stack.capacity ? 2 * stack.capacity : 16;
        Entry *grown = PyMem_RawRealloc(stack.entries, (size_t)capacity * sizeof(Entry));
        if (grown == NULL) {
            end_zone(zone);
            return PyErr_NoMemory();
        }
        stack.entries = grown;
        stack.capacity = capacity;
    }
    Py_INCREF(args[0]);
    stack.entries[stack.size].marker = args[0];
    stack.entries[stack.size].zone = zone;
    stack.size++;
    Py_RETURN_NONE;
}

/* close_zone(marker) -> bool: end marker's innermost zone on this thread,
 * and first every zone opened after it (interleaved asyncio tasks,
 * generators): zones are shortened, never mis-nested. No zone of marker open:
 * nothing happens (False). */
static PyObject *close_zone(PyObject *module, PyObject *marker) {
    Py_ssize_t found = stack.size;
    while (found > 0 && stack.entries[found - 1].marker != marker) found--;
    if (found == 0) Py_RETURN_FALSE;
    Py_ssize_t top = stack.size;
    stack.size = found - 1; /* consistent before any reference is released */
    for (Py_ssize_t i = top - 1; i >= found - 1; i--) end_zone(stack.entries[i].zone);
    if (top - found == 0) {
        Py_DECREF(marker); /* the common case: one entry, its marker is ours */
        Py_RETURN_TRUE;
    }
    /* Several: move the references into a list first, since releasing one may
     * run Python code that opens zones into the slots just freed. */
    PyObject *released = PyList_New(top - (found - 1));
    if (released == NULL) return NULL;
    for (Py_ssize_t i = found - 1; i < top; i++) PyList_SET_ITEM(released, i - (found - 1), stack.entries[i].marker);
    Py_DECREF(released);
    Py_RETURN_TRUE;
}

/* close_all() -> int: end every zone still open on this thread, innermost
 * first (at interpreter exit, or when a thread ends inside a section: Tracy
 * waits for open zones, and a program left inside a section would never
 * finish under a capture). Returns how many were closed. */
static PyObject *close_all(PyObject *module, PyObject *unused) {
    Py_ssize_t top = stack.size;
    if (top == 0) return PyLong_FromLong(0);
    stack.size = 0; /* consistent before any reference is released */
    for (Py_ssize_t i = top - 1; i >= 0; i--) end_zone(stack.entries[i].zone);
    PyObject *released = PyList_New(top);
    if (released == NULL) return NULL;
    for (Py_ssize_t i = 0; i < top; i++) PyList_SET_ITEM(released, i, stack.entries[i].marker);
    Py_DECREF(released);
    return PyLong_FromSsize_t(top);
}

static PyObject *depth(PyObject *module, PyObject *unused) {
    return PyLong_FromSsize_t(stack.size);
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(begin_address, end_address, on_new_thread, keep_alive): set Tracy's zone functions"},
    {"open_zone", (PyCFunction)(void (*)(void))open_zone, METH_FASTCALL, "open_zone(marker, location_address)"},
    {"close_zone", close_zone, METH_O, "close_zone(marker) -> bool"},
    {"close_all", close_all, METH_NOARGS, "close_all() -> int: end every zone open on this thread"},
    {"depth", depth, METH_NOARGS, "number of zones open on this thread"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "sectionmark.markers._zonestack", "Per-thread stacks of open Tracy zones.", -1, methods,
};

PyMODINIT_FUNC PyInit__zonestack(void) { return PyModule_Create(&module_definition); }
