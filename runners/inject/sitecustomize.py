"""Loaded by every Python process on the ranks' PYTHONPATH: inert unless DDPTUI=1, then instruments a rank."""
import os
import sys


def _chain() -> None:
    # Our file shadows any sitecustomize further down sys.path (the venv's, the distro's): run that one too.
    try:
        import importlib.machinery
        import importlib.util

        here = os.path.dirname(os.path.realpath(__file__))
        rest, seen = [], False
        for entry in sys.path:
            try:
                same = os.path.realpath(entry or os.getcwd()) == here
            except Exception:
                same = False
            if seen and not same:
                rest.append(entry)
            seen = seen or same
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest) if rest else None
        if spec is None or spec.loader is None:
            return
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_ddptui_next_sitecustomize"] = mod
        spec.loader.exec_module(mod)
    except Exception:
        pass


_chain()

_ddp_modules: list = []  # weakref.finalize objects of DDP-wrapped modules


# Undo steps of what _install did, run in a fork child of the rank (a DataLoader worker): it is not the rank.
_undo: list = []
# The activation ddptui gave this rank, taken out of os.environ (ddptui_scope): put back only for the children
# that are ranks too (torch_xla.launch's worker); "pass_on" makes a fork child the rank instead of a bystander.
_given: dict = {}
_state = {"pass_on": False}


def _import_xla() -> None:
    try:
        import ddptui_xla  # noqa: F401  (installs itself when DDPTUI_XLA=1, which it reads on import)
    except Exception:
        pass


def _faults_and_ptrace() -> None:
    import faulthandler
    import signal

    try:
        faulthandler.enable()
    except Exception:
        pass
    try:
        # Stack fallback for when py-spy cannot ptrace us: `kill -USR1 pid` dumps every thread to stderr.
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    except Exception:
        pass
    pid = _given.get("DDPTUI_PID", os.environ.get("DDPTUI_PID"))
    if pid:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(0x59616D61, ctypes.c_ulong(int(pid)), 0, 0, 0)  # PR_SET_PTRACER (Yama)
        except Exception:
            pass


def _die_with_parent() -> None:
    """The XLA worker ends with the program that started it (PR_SET_PDEATHSIG), as that program ends with ddptui:
    else a ddptui killed outright (SIGKILL) leaves the worker training on, nobody watching."""
    pid = _given.get("DDPTUI_PID", os.environ.get("DDPTUI_PID"))
    parent = os.getppid()
    if not pid or str(parent) == pid:  # ddptui's own child (the program): ddptui set it already
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the program ended before that took hold
            os.kill(os.getpid(), signal.SIGTERM)
    except Exception:
        pass


def _ddp_digest(module, r) -> None:
    try:
        import ddptui_report

        if not ddptui_report.was_reported(module):
            ddptui_report.digests(module, source="ddp", r=r)
    except Exception:
        pass


def _patch_optimizer(mod) -> None:
    import ddptui_replica
    import ddptui_report

    count = ddptui_report.count_step  # counts in memory: at most ten progress lines a second go out
    check, every = ddptui_replica.after_step, ddptui_replica.every()  # the live replica check (0: off)

    def _on_step(optimizer, args, kwargs) -> None:
        try:
            n = count()
            if every and n % every == 0:
                check(optimizer, n)
        except Exception:
            pass

    handle = mod.register_optimizer_step_post_hook(_on_step)
    _undo.append(handle.remove)
    if every and "DDPTUI_XLA" in _given:  # a check the post-hook could not read is taken before the next update
        _undo.append(mod.register_optimizer_step_pre_hook(ddptui_replica.before_step).remove)
    _undo.append(ddptui_report.watch_first_step(mod).remove)  # digests before the first update


def _after_init(cls, then) -> None:
    """Make cls(module, ...) call then(instance, module) once built (never raising into the program); undone in a
    process that is not the rank."""
    import functools

    orig = cls.__init__

    @functools.wraps(orig)
    def __init__(self, module, *args, **kwargs):
        orig(self, module, *args, **kwargs)
        try:
            then(self, module)
        except Exception:
            pass

    cls.__init__ = __init__

    def undo() -> None:
        cls.__init__ = orig

    _undo.append(undo)


def _patch_ddp(mod) -> None:
    import weakref

    import ddptui_report

    def wrapped(ddp, module) -> None:
        # Digest when the wrapper goes away (e.g. main() returned) or at exit, whichever comes first;
        # the finalizer holds the inner module no longer than the wrapper itself does.
        _ddp_modules.append(weakref.finalize(ddp, _ddp_digest, module, ddptui_report.rank()))
        ddptui_report.remember_model(module, "ddp")  # names the first-step digest
        # hooks the wrapper, not the user's module: its own forward calls, once per micro-batch, are counted
        _undo.append(ddp.register_forward_pre_hook(ddptui_report.count_forward, with_kwargs=True).remove)

    _after_init(mod.DistributedDataParallel, wrapped)

    def undo() -> None:
        for fin in _ddp_modules:
            fin.detach()  # no digest from a process that is not the rank

    _undo.append(undo)


def _patch_compiled(mod) -> None:
    """torch.compile(DDP(model)): the DDP wrapper's hook runs inside the compiled call, where it cannot count
    (ddptui_report.count_forward); the compile wrapper of a model holding DDP counts its batches instead."""
    import ddptui_report

    def wrapped(compiled, module) -> None:
        ddp = sys.modules.get("torch.nn.parallel.distributed")
        if ddp is not None and any(isinstance(m, ddp.DistributedDataParallel) for m in module.modules()):
            hook = compiled.register_forward_pre_hook(ddptui_report.count_compiled_forward, with_kwargs=True)
            _undo.append(hook.remove)

    _after_init(mod.OptimizedModule, wrapped)


def _patch_c10d(mod) -> None:
    import ddptui_fr

    _undo.append(ddptui_fr.patch(mod))  # after init_process_group: the debug server and the collectives thread


_PATCHES = {"torch.optim.optimizer": _patch_optimizer, "torch.nn.parallel.distributed": _patch_ddp,
            "torch._dynamo.eval_frame": _patch_compiled}


def _excepthooks() -> None:
    import threading

    import ddptui_report

    prev = sys.excepthook

    def excepthook(exc_type, exc, tb):
        ddptui_report.exception(exc_type, exc, tb)
        prev(exc_type, exc, tb)

    sys.excepthook = excepthook
    prev_thread = threading.excepthook

    def thread_excepthook(args):
        if args.exc_type is not SystemExit:
            ddptui_report.exception(args.exc_type, args.exc_value, args.exc_traceback)
        prev_thread(args)

    threading.excepthook = thread_excepthook

    def undo() -> None:
        if sys.excepthook is excepthook:
            sys.excepthook = prev
        if threading.excepthook is thread_excepthook:
            threading.excepthook = prev_thread

    _undo.append(undo)


def _patch_xla_launch(mod) -> None:
    import contextlib
    import functools

    import ddptui_scope

    orig = mod.run_multiprocess

    @contextlib.contextmanager
    def passing_on():
        # The launcher's worker process is the rank: it alone gets the activation back (spawn: in the environment
        # it starts with; fork: _after_fork). Nothing else this program starts meanwhile is expected.
        before = ddptui_scope.apply(_given, os.environ)
        _state["pass_on"] = True
        try:
            yield
        finally:
            _state["pass_on"] = False
            ddptui_scope.apply(before, os.environ)

    @functools.wraps(orig)
    def run_multiprocess(*args, **kwargs):
        with passing_on():
            return orig(*args, **kwargs)

    mod.run_multiprocess = run_multiprocess


def _after_fork() -> None:
    """In a fork child: the XLA worker stays the rank; any other child (a DataLoader worker) is left alone."""
    if _state["pass_on"]:
        _state["pass_on"] = False
        try:
            import ddptui_scope

            ddptui_scope.apply(ddptui_scope.user_env(os.environ), os.environ)
        except Exception:
            pass
        _die_with_parent()
        return
    try:
        sys.modules["ddptui_report"].silence()
    except Exception:
        pass
    while _undo:
        try:
            _undo.pop()()
        except Exception:
            pass


def _install() -> None:
    os.register_at_fork(after_in_child=_after_fork)
    for step in (_faults_and_ptrace, _excepthooks):
        try:
            step()
        except Exception:
            pass
    try:
        import ddptui_report

        if ddptui_report.rank() is not None:
            ddptui_report.hello()
    except Exception:
        pass
    try:
        import ddptui_postimport

        patches = dict(_PATCHES)
        if "DDPTUI_XLA" in _given:
            patches["torch_xla._internal.pjrt"] = _patch_xla_launch
        elif _given.get("DDPTUI_SOCKETS"):  # Flight Recorder on (never for XLA: it has none)
            patches["torch.distributed.distributed_c10d"] = _patch_c10d
        for name, patch in patches.items():
            _undo.append(ddptui_postimport.when_imported(name, patch))  # undo: no patch in a non-rank fork child
    except Exception:
        pass
    try:
        import ddptui_phase

        # importing torch, setting up, rendezvous, waiting for the first step; XLA replicas rendezvous in torch_xla,
        # not in init_process_group: their process says only its import of torch, for all of its replicas
        ddptui_phase.install(_undo, rendezvous="DDPTUI_XLA" not in _given)
    except Exception:
        pass


def _activate() -> None:
    """Instrument this process if it is the rank; unless it is a launcher, hand the user's environment back."""
    import ddptui_scope

    role = ddptui_scope.role(os.environ, sys.argv, getattr(sys, "orig_argv", sys.argv))
    if role in (ddptui_scope.OFF, ddptui_scope.LAUNCHER):
        return
    if role == ddptui_scope.RANK and os.environ.get("DDPTUI_XLA") == "1":
        _die_with_parent()
        _import_xla()
    # Before the program runs: what it starts (python -c helpers, spawned workers) inherits the user's own
    # environment, not ours. /proc/PID/environ keeps DDPTUI_PID for procs.py's orphan sweep.
    _given.update(ddptui_scope.apply(ddptui_scope.user_env(os.environ), os.environ))
    ddptui_scope.GIVEN = _given
    if role == ddptui_scope.RANK:
        _install()


if os.environ.get("DDPTUI") == "1":
    try:
        _activate()
    except Exception:
        pass
