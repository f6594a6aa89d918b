/*
 * Store files that shrink while they are mapped: a fault to report, not a dead process.
 *
 * Reading a mapping past the end of a file that another process truncated (a copy in progress,
 * a file system repair) raises SIGBUS at the reading instruction, which may be anywhere: inside
 * numpy, pyarrow, memcpy or this package's C loops. A Python signal handler cannot help (it runs
 * later, in the interpreter loop; the instruction faults again first). So this handler runs in
 * C: when the faulting address lies in a mapping that rmqinspect registered, it maps anonymous
 * zero pages over the rest of that mapping, records the fault in the mapping's slot and returns;
 * the read resumes and finishes over zeros, and rmqinspect.store.mapguard turns the recorded
 * fault into an error naming the file before anything read from it is trusted. Any other SIGBUS
 * goes to the action that was in place before this one.
 *
 * The handler only reads and writes atomics and calls mmap, sigaction and raise (system calls).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Registered mappings: a MappedFiles holds 32 open and a few pinned; more in a process that
   runs several stores or keeps views alive. A full table leaves new maps unguarded. */
#define SLOTS 4096

typedef struct {
    _Atomic uintptr_t start; /* 0: the slot is free */
    _Atomic uintptr_t end;
    _Atomic int64_t fault; /* offset in the mapping of the first faulting read; -1: none */
    _Atomic uint64_t seq;  /* that fault's number in this process, counted from 1 */
} slot_t;

static slot_t slots[SLOTS];
static _Atomic uint64_t faults; /* faults recorded so far */
static struct sigaction previous;
static int installed;
static uintptr_t page_mask;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    (void)context;
    if (info->si_code == BUS_ADRERR) {
        uintptr_t addr = (uintptr_t)info->si_addr;
        for (int i = 0; i < SLOTS; i++) {
            uintptr_t start = atomic_load(&slots[i].start);
            if (start == 0 || addr < start)
                continue;
            uintptr_t end = atomic_load(&slots[i].end);
            if (addr >= end)
                continue;
            /* Past the faulting page the file is gone too: zeros over the rest at once, so a
               long read past the end costs one fault, not one per page. */
            uintptr_t from = addr & page_mask;
            void *got = mmap((void *)from, end - from, PROT_READ,
                             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (got == MAP_FAILED)
                break; /* cannot continue the read: die as without this handler */
            uint64_t n = atomic_fetch_add(&faults, 1) + 1;
            int64_t none = -1;
            if (atomic_compare_exchange_strong(&slots[i].fault, &none, (int64_t)(addr - start)))
                atomic_store(&slots[i].seq, n);
            return;
        }
    }
    /* Not ours: the previous action takes it, when the faulting instruction runs again or,
       for a SIGBUS sent by a process (no instruction to repeat), at once. */
    sigaction(SIGBUS, &previous, NULL);
    if (info->si_code <= 0)
        raise(sig);
}

static int install(void)
{
    if (installed)
        return 0;
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_sigbus;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGBUS, &act, &previous) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    installed = 1;
    return 0;
}

PyDoc_STRVAR(guard_doc, "guard(buffer) -> slot\n\n"
                        "Watch the mapping behind ``buffer`` (an mmap) for faults; the slot, or -1 "
                        "when the table is full. Installs the handler on first use.");

static PyObject *mapguard_guard(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uintptr_t start = (uintptr_t)view.buf;
    uintptr_t end = start + (uintptr_t)view.len;
    PyBuffer_Release(&view);
    if (install() < 0)
        return NULL;
    if (start == 0 || end == start)
        return PyLong_FromLong(-1);
    for (int i = 0; i < SLOTS; i++) {
        if (atomic_load(&slots[i].start) != 0)
            continue; /* slots change only here and in unguard, under the GIL */
        atomic_store(&slots[i].fault, -1);
        atomic_store(&slots[i].seq, 0);
        atomic_store(&slots[i].end, end);
        atomic_store(&slots[i].start, start); /* last: the slot is live */
        return PyLong_FromLong(i);
    }
    return PyLong_FromLong(-1);
}

static int slot_arg(PyObject *arg, long *slot)
{
    *slot = PyLong_AsLong(arg);
    if (*slot == -1 && PyErr_Occurred())
        return -1;
    if (*slot < 0 || *slot >= SLOTS) {
        PyErr_SetString(PyExc_ValueError, "no such slot");
        return -1;
    }
    return 0;
}

static PyObject *fault_of(long slot)
{
    int64_t offset = atomic_load(&slots[slot].fault);
    if (offset < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(LK)", (long long)offset,
                         (unsigned long long)atomic_load(&slots[slot].seq));
}

PyDoc_STRVAR(fault_doc, "fault(slot) -> (offset, seq) | None\n\n"
                        "The first fault in a guarded mapping: its offset in the mapping and its "
                        "number (see faults()); None while it has none.");

static PyObject *mapguard_fault(PyObject *self, PyObject *arg)
{
    (void)self;
    long slot;
    if (slot_arg(arg, &slot) < 0)
        return NULL;
    return fault_of(slot);
}

PyDoc_STRVAR(unguard_doc, "unguard(slot) -> (offset, seq) | None\n\n"
                          "Free the slot of a mapping that is unmapped; its fault, as fault().");

static PyObject *mapguard_unguard(PyObject *self, PyObject *arg)
{
    (void)self;
    long slot;
    if (slot_arg(arg, &slot) < 0)
        return NULL;
    PyObject *fault = fault_of(slot);
    atomic_store(&slots[slot].start, 0);
    return fault;
}

PyDoc_STRVAR(faults_doc, "faults() -> int\n\nHow many faults were recorded in this process.");

static PyObject *mapguard_faults(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromUnsignedLongLong(atomic_load(&faults));
}

static PyMethodDef methods[] = {
    {"guard", mapguard_guard, METH_O, guard_doc},
    {"fault", mapguard_fault, METH_O, fault_doc},
    {"unguard", mapguard_unguard, METH_O, unguard_doc},
    {"faults", mapguard_faults, METH_NOARGS, faults_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_mapguard", "SIGBUS from shrunk mapped files, recorded.", -1, methods,
};

PyMODINIT_FUNC PyInit__mapguard(void)
{
    page_mask = ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
    return PyModule_Create(&module);
}
