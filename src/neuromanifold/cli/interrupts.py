"""Ctrl-C on the command line: one line on stderr and exit code 130, whenever it lands.

Standard library only: `cli.main` installs the handler before it imports the command line
(typer, rich, the commands), so that a Ctrl-C during those imports is handled like any other.

Three ways a Ctrl-C went wrong before (issue 39):

- **Inside an import.** A KeyboardInterrupt raised in the middle of an import that a library
  catches (`except BaseException`, a C extension running Python code) leaves a module
  half-imported (`numpy.ma` without its attribute on `numpy`) and the command ran on to the end,
  then failed with an AttributeError, exit 1. The handler never raises inside an import: it
  records the signal and raises it again (a SIGINT sent from a timer thread) until
  it lands outside every import, where nothing swallows it. Such an import finishes first (at
  most the time of the import under way).
- **Swallowed elsewhere.** A KeyboardInterrupt a library swallows at run time, or one raised in
  a garbage-collector callback (reported as unraisable), is raised again the same way; and an
  error of any kind after a recorded SIGINT is reported as the interruption it follows.
- **During the teardown.** A SIGINT after the command has returned (the interpreter's exit:
  atexit handlers, joining threads) killed the process (exit -2) without the line; and a
  KeyboardInterrupt once raised inside Python code run by a C extension (pybind11's `exec`)
  makes CPython end its process with SIGINT whatever `main` returned. When the process ends with
  `main`, SIGINT is still handled after it returns (recorded, not raised: the clean-up goes on;
  a second one ends the process at once), and the exit code is enforced by the last exit handler.
"""

from __future__ import annotations

import _thread
import atexit
import builtins
import contextlib
import logging
import os
import signal
import sys
import threading
import warnings

EXIT_INTERRUPTED = 130
INTERRUPTED = "neuromanifold: interrupted; results already written are kept"
# Delay before a KeyboardInterrupt that could not be raised (or was swallowed) is raised again.
REDELIVER_SECONDS = 0.05

_IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


class _State:
    def __init__(self) -> None:
        self.records: list[list[int]] = []   # the records of the active blocks, outermost first
        self.mutes: list[bool] = []
        self.installed = False                # our handler is SIGINT's
        self.deferred = False                 # a SIGINT waits to be raised outside an import
        self.note: str | None = None          # the interrupted command's words for what it kept
        self.exit_code: int | None = None     # enforced at the exit (a process ending with main)
        self.said = False                     # the interrupted line was printed
        self.timer: threading.Timer | None = None  # the redelivery of a deferred Ctrl-C
        self.in_flight: list[str] = []        # redeliveries sent, not yet handled


_state = _State()


def note(text: str | None) -> None:
    """The rest of the interrupted line, in the interrupted command's words (what it kept and
    where); None: the default, `INTERRUPTED`."""
    _state.note = text


def interrupted_line() -> str:
    """The one line an interrupted command prints."""
    return INTERRUPTED if _state.note is None else f"neuromanifold: interrupted; {_state.note}"


def say_interrupted(keep_reports: bool) -> int:
    """Print the interrupted line (once) and return 130. Unless `keep_reports` (--debug, or a
    call from Python whose process goes on), the reports of the teardown that follows are muted
    for the rest of the process (NOTE in `mute_reports`)."""
    if not _state.said:
        print(interrupted_line(), file=sys.stderr, flush=True)
        _state.said = True
    if not keep_reports:
        mute_reports()
    return EXIT_INTERRUPTED


def mute_reports() -> None:
    """Silence, for the rest of the process, the reports of a teardown after Ctrl-C: unraisable
    exceptions, logging (Dask's scheduler logs a closed client at CRITICAL) and warnings.

    A Ctrl-C can land inside a library's start-up (a Dask LocalCluster half started): its exit
    handlers then fail on the half-made objects and print tracebacks (Dask's `close_clusters`
    atexit callback, asyncio's "Task exception was never retrieved"), after the one line that
    matters. The clean-up itself still runs.
    """
    sys.unraisablehook = lambda _unraisable: None
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")


def _in_import(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FILES:
            return True
        frame = frame.f_back
    return False


def _redeliver(deferred: bool = False) -> None:
    """Signal the main thread again, shortly, from another thread (a KeyboardInterrupt raised
    from a signal handler inside an import, or in a callback, would be lost). A real SIGINT,
    not `_thread.interrupt_main`: it also ends a blocking call (a sleep) under way. `deferred`:
    the one of a Ctrl-C deferred out of an import, cancelled when that one is raised."""
    main = threading.main_thread().ident

    def fire() -> None:
        if _state.installed and not _state.said and (_state.deferred or not deferred):
            _state.in_flight.append("deferred" if deferred else "again")
            if hasattr(signal, "pthread_kill"):
                signal.pthread_kill(main, signal.SIGINT)
            else:  # pragma: no cover - Windows
                _thread.interrupt_main()

    again = threading.Timer(REDELIVER_SECONDS, fire)
    again.daemon = True
    if deferred:
        _state.timer = again
    again.start()


def _on_sigint(signum, frame) -> None:
    if _state.said:  # the command has already said it was interrupted and is ending
        return
    again, _state.in_flight = _state.in_flight, []  # the redeliveries this delivery stands for
    if again and not _state.deferred and set(again) == {"deferred"}:
        return  # a deferred Ctrl-C raised meanwhile (the import finished): sent too late
    if not _state.deferred and (not again or "again" in again):  # not one deferred, again
        for record in _state.records:
            record.append(signum)
        if any(_state.mutes):  # the teardown that follows runs before the line is printed
            logging.disable(logging.CRITICAL)
            warnings.simplefilter("ignore")
    if _in_import(frame):
        if not _state.deferred:
            _state.deferred = True
            _raise_after_imports()
        _redeliver(deferred=True)
        return
    _end_deferral()
    raise KeyboardInterrupt


def _raise_after_imports() -> None:
    """While a Ctrl-C is deferred: `builtins.__import__` raises it as soon as an `import`
    statement of the main thread outside every import has finished (the timer of `_redeliver`
    catches the imports that do not go through `__import__`: the one under way, importlib's)."""
    real, main = builtins.__import__, threading.main_thread().ident

    def importing(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        finally:
            if _state.deferred and not _state.said and _thread.get_ident() == main and \
                    not _in_import(sys._getframe(1)):
                _end_deferral()
                raise KeyboardInterrupt

    importing._neuromanifold_real = real  # type: ignore[attr-defined]
    builtins.__import__ = importing


def _end_deferral() -> None:
    _state.deferred = False
    if _state.timer is not None:
        _state.timer.cancel()
        _state.timer = None
    real = getattr(builtins.__import__, "_neuromanifold_real", None)
    if real is not None:
        builtins.__import__ = real


@contextlib.contextmanager
def interrupts_recorded(record: list[int], mute: bool = False):
    """Note every SIGINT in `record` (then raise KeyboardInterrupt as Python does, though never
    inside an import: module docstring), so that the caller can say it was interrupted even where
    a library swallowed the KeyboardInterrupt. A SIGINT that was ignored when the process started
    (a background job) stays ignored; outside the main thread nothing is changed. Blocks nest:
    an inner one adds its record to the handler the outer one installed.

    A KeyboardInterrupt raised inside a garbage-collector callback or a `__del__` (Dask's
    GCDiagnosis runs one at every collection) cannot propagate: Python reports it as unraisable
    and goes on, and the command ran on after its Ctrl-C. Such a one is raised again in the main
    thread. With `mute` (the process ends with the command) the reports that follow an interrupt
    (unraisable exceptions, logging, warnings) are collateral: muted from the SIGINT on.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    current = signal.getsignal(signal.SIGINT)
    if current is _on_sigint and _state.installed:  # nested: the outer block's handler
        _state.records.append(record)
        _state.mutes.append(mute)
        try:
            yield
        finally:
            _state.records.remove(record)
            _state.mutes.pop()
        return
    if current is not signal.default_int_handler:
        yield
        return

    previous_hook = sys.unraisablehook

    def on_unraisable(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _redeliver()  # swallowed where it landed: raised again once the callback returned
        elif not (record and mute):
            previous_hook(unraisable)

    _state.records.append(record)
    _state.mutes.append(mute)
    _state.installed, _state.deferred, _state.said = True, False, False
    _state.in_flight = []
    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = on_unraisable
    try:
        yield
    finally:
        _state.installed = False
        _end_deferral()
        if signal.getsignal(signal.SIGINT) is _on_sigint:  # not `Session.end`'s exit handler
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if sys.unraisablehook is on_unraisable:
            sys.unraisablehook = previous_hook
        _state.records.remove(record)
        _state.mutes.pop()


def _on_sigint_at_exit(_signum, _frame) -> None:
    """SIGINT after the command returned: the line (once) and exit 130, the clean-up still run;
    one after the line ends the process now."""
    if _state.said:
        _flush()
        os._exit(EXIT_INTERRUPTED)
    _state.exit_code = say_interrupted(keep_reports=False)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _enforce_exit_code() -> None:
    """The last exit handler of a process that ends with `main`: end it now, with `main`'s exit
    code (130 once interrupted). After the exit handlers CPython resets SIGINT to its default
    and tears the modules down (torch's take a fraction of a second): a Ctrl-C then killed the
    process without a line (exit -2), and a KeyboardInterrupt once raised inside Python code run
    by a C extension makes CPython end its process with SIGINT whatever `main` returned."""
    if _state.exit_code is not None:
        _flush()
        os._exit(_state.exit_code)


class Session:
    """The interrupt handling of one `cli.main` call (`process_session`)."""

    def __init__(self, ends_process: bool, keep_reports: bool) -> None:
        self.ends_process = ends_process
        self.keep_reports = keep_reports
        self.record: list[int] = []

    def interrupted(self) -> int:
        """Print the interrupted line (once); 130."""
        return say_interrupted(self.keep_reports)

    def end(self, code: int) -> int:
        """The command returned `code`: when the process ends with it, SIGINT is from now on
        recorded, never raised (the clean-up goes on), and an interrupted run ends with 130."""
        if self.ends_process:
            signal.signal(signal.SIGINT, _on_sigint_at_exit)
            if _state.exit_code is None:  # not interrupted since (`_on_sigint_at_exit`)
                _state.exit_code = code
        return code


@contextlib.contextmanager
def process_session(argv_given: bool, debug: bool, ends_process: bool):
    """Around the whole of `cli.main`, from before the command line's imports: SIGINT handled as
    `interrupts_recorded` does; `Session.end` once the command returned (module docstring).
    `ends_process`: `main` runs as the program (called from `__main__` without arguments: the
    console script, `python -m neuromanifold`), the process ends with it. Called without
    arguments and without --debug, the reports of an interrupted teardown are muted."""
    _state.note, _state.said, _state.exit_code = None, False, None
    ends_process = ends_process and not argv_given and \
        threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if ends_process:
        atexit.register(_enforce_exit_code)  # registered before every library's: run last
    session = Session(ends_process, keep_reports=debug or argv_given)
    with interrupts_recorded(session.record, mute=not session.keep_reports):
        yield session
