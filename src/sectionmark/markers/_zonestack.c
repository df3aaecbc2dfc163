/* Per-thread stacks of open Tracy zones, for eager sections, and the fast
 * enter/exit of the section marker itself (MarkerBase, below).
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

/* Begin a zone at location (an address, 0: error) and remember it for marker; -1 on error. */
static int push_zone(PyObject *marker, PyObject *location_address) {
    if (begin_zone == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "zone functions are not bound");
        return -1;
    }
    void *location = PyLong_AsVoidPtr(location_address);
    if (location == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "location address must not be 0");
        return -1;
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
            PyErr_NoMemory();
            return -1;
        }
        stack.entries = grown;
        stack.capacity = capacity;
    }
    Py_INCREF(marker);
    stack.entries[stack.size].marker = marker;
    stack.entries[stack.size].zone = zone;
    stack.size++;
    return 0;
}

/* open_zone(marker, location_address): begin a zone and remember it for marker. */
static PyObject *open_zone(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "open_zone(marker, location_address)");
        return NULL;
    }
    if (push_zone(args[0], args[1]) < 0) return NULL;
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

/* ---- The section marker's enter/exit, for plain Python ----
 *
 * `MarkerBase` is the base class of sectionmark.markers.marker.section. Its
 * __enter__/__exit__ only decide whether the marker has anything to do; when
 * it has, they call the marker's Python logic (bound with bind_marker). They
 * have nothing to do while no zone emitter is installed, no framework scope
 * was ever entered, and no framework traces: torch's own export flag is
 * False (what torch.compiler.is_exporting() returns) and JAX's current trace
 * is its eager one (what the Python probe asks). Checking that in C, without
 * a Python call per probe, is what makes a section about as cheap as an
 * empty context manager. When the installed emitter is this module's zone
 * stack, they also open and close its zones themselves (a location not
 * cached yet goes through Python once). Python sets the switches (configure)
 * whenever its state changes, e.g. while sm.torch.sections() replaces the
 * torch probe. */

static PyObject *python_enter, *python_exit; /* section's Python logic: enter(marker), exit(marker, *exc) */
static int enter_in_python;
static PyObject *zone_locations; /* {marker key: location address} while zones go to this stack, else NULL */
enum { EXIT_NOTHING, EXIT_CLOSE_ZONE, EXIT_IN_PYTHON };
static int exit_mode;
static PyObject *torch_compiler_dict;         /* torch.compiler.__dict__ once imported */
static PyObject *jax_trace_state, *jax_eval_trace; /* jax._src.core.trace_state_strong_ref, .eval_trace */
static PyObject *str_torch_compiler, *str_is_exporting_flag, *str_jax_core, *str_trace_state, *str_eval_trace,
    *str_value, *str_key;

static PyObject *bind_marker(PyObject *module, PyObject *args) {
    PyObject *enter, *exit;
    if (!PyArg_ParseTuple(args, "OO", &enter, &exit)) return NULL;
    Py_INCREF(enter);
    Py_XSETREF(python_enter, enter);
    Py_INCREF(exit);
    Py_XSETREF(python_exit, exit);
    Py_RETURN_NONE;
}

static PyObject *configure(PyObject *module, PyObject *args) {
    int enter, exit;
    PyObject *locations;
    if (!PyArg_ParseTuple(args, "pOi", &enter, &locations, &exit)) return NULL;
    if (locations != Py_None && !PyDict_CheckExact(locations)) {
        PyErr_SetString(PyExc_TypeError, "zone locations must be a dict or None");
        return NULL;
    }
    if (exit < EXIT_NOTHING || exit > EXIT_IN_PYTHON) {
        PyErr_SetString(PyExc_ValueError, "exit mode must be 0, 1 or 2");
        return NULL;
    }
    enter_in_python = enter;
    Py_XSETREF(zone_locations, locations == Py_None ? NULL : Py_NewRef(locations));
    exit_mode = exit;
    Py_RETURN_NONE;
}

/* 1: torch exports (or its flag is not a plain False), 0: not, -1: error. */
static int torch_exporting(void) {
    if (torch_compiler_dict == NULL) {
        PyObject *compiler = PyDict_GetItemWithError(PyImport_GetModuleDict(), str_torch_compiler);
        if (compiler == NULL) return PyErr_Occurred() ? -1 : 0; /* torch not imported: nothing exports */
        if (!PyModule_Check(compiler)) return 1;
        torch_compiler_dict = Py_NewRef(PyModule_GetDict(compiler));
    }
    PyObject *flag = PyDict_GetItemWithError(torch_compiler_dict, str_is_exporting_flag);
    if (flag == NULL && PyErr_Occurred()) return -1;
    return flag != Py_False;
}

/* 1: JAX traces on this thread (its current trace is not the eager one), 0: not, -1: error. */
static int jax_tracing(void) {
    if (jax_trace_state == NULL) {
        PyObject *core = PyDict_GetItemWithError(PyImport_GetModuleDict(), str_jax_core);
        if (core == NULL) return PyErr_Occurred() ? -1 : 0; /* jax not imported: nothing traces */
        PyObject *state = PyObject_GetAttr(core, str_trace_state);
        PyObject *eager = state ? PyObject_GetAttr(core, str_eval_trace) : NULL;
        if (eager == NULL) { /* jax._src.core still importing: nothing traces yet */
            Py_XDECREF(state);
            PyErr_Clear();
            return 0;
        }
        jax_trace_state = state;
        jax_eval_trace = eager;
    }
    PyObject *trace = PyObject_GetAttr(jax_trace_state, str_value);
    if (trace == NULL) return -1;
    int tracing = trace != jax_eval_trace;
    Py_DECREF(trace);
    return tracing;
}

static PyObject *marker_enter(PyObject *self, PyObject *unused) {
    if (!enter_in_python) {
        int tracing = torch_exporting();
        if (tracing == 0) tracing = jax_tracing();
        if (tracing < 0) return NULL;
        if (tracing == 0) {
            if (zone_locations == NULL) return Py_NewRef(self);
            PyObject *key = PyObject_GetAttr(self, str_key);
            if (key == NULL) return NULL;
            PyObject *location = Py_XNewRef(PyDict_GetItemWithError(zone_locations, key));
            Py_DECREF(key);
            if (location != NULL) {
                int failed = push_zone(self, location);
                Py_DECREF(location);
                return failed ? NULL : Py_NewRef(self);
            }
            if (PyErr_Occurred()) return NULL;
        }
    }
    return PyObject_CallOneArg(python_enter, self);
}

static PyObject *marker_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__(exc_type, exc, traceback)");
        return NULL;
    }
    if (exit_mode == EXIT_NOTHING) Py_RETURN_NONE;
    if (exit_mode == EXIT_CLOSE_ZONE) {
        PyObject *closed = close_zone(NULL, self);
        if (closed == NULL) return NULL;
        Py_DECREF(closed);
        Py_RETURN_NONE;
    }
    PyObject *call[4] = {self, args[0], args[1], args[2]};
    return PyObject_Vectorcall(python_exit, call, 4, NULL);
}

static PyMethodDef marker_methods[] = {
    {"__enter__", marker_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))marker_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MarkerBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sectionmark.markers._zonestack.MarkerBase",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Base of section: enter/exit that call the Python logic only when there is something to do.",
    .tp_methods = marker_methods,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(begin_address, end_address, on_new_thread, keep_alive): set Tracy's zone functions"},
    {"open_zone", (PyCFunction)(void (*)(void))open_zone, METH_FASTCALL, "open_zone(marker, location_address)"},
    {"close_zone", close_zone, METH_O, "close_zone(marker) -> bool"},
    {"close_all", close_all, METH_NOARGS, "close_all() -> int: end every zone open on this thread"},
    {"depth", depth, METH_NOARGS, "number of zones open on this thread"},
    {"bind_marker", bind_marker, METH_VARARGS, "bind_marker(enter, exit): the section logic MarkerBase calls when needed"},
    {"configure", configure, METH_VARARGS,
     "configure(enter_in_python, zone_locations, exit_mode): when enter and exit call the Python logic, and "
     "whether they open (locations: {key: address} or None) and close (mode 1) this stack's zones; mode 2: exit in Python"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "sectionmark.markers._zonestack", "Per-thread stacks of open Tracy zones.", -1, methods,
};

static int intern(PyObject **target, const char *text) {
    *target = PyUnicode_InternFromString(text);
    return *target == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__zonestack(void) {
    if (intern(&str_torch_compiler, "torch.compiler") < 0 || intern(&str_is_exporting_flag, "_is_exporting_flag") < 0 ||
        intern(&str_jax_core, "jax._src.core") < 0 || intern(&str_trace_state, "trace_state_strong_ref") < 0 ||
        intern(&str_eval_trace, "eval_trace") < 0 || intern(&str_value, "value") < 0 ||
        intern(&str_key, "_key") < 0)
        return NULL;
    if (PyType_Ready(&MarkerBaseType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_definition);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "MarkerBase", (PyObject *)&MarkerBaseType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
