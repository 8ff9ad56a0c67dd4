"""Running the per-file function over many files: local worker processes, or a dask cluster.

Local: N worker processes, each given one file at a time over a pipe. The parent knows when each
file started, so a file that runs past the time limit gets its worker killed (SIGKILL) and
replaced; a worker that dies (segfault, out of memory, os._exit) is noticed through its process
sentinel and replaced too. Either way the file gets a record and the batch goes on. A worker
also retires, and is replaced, once it has analysed RETIRE_AFTER_BYTES (its memory; see there).
(`concurrent.futures.ProcessPoolExecutor` cannot do this: it cannot kill one stuck task, and a
dead worker breaks the whole pool.)

Dask: the same function is submitted to an existing `dask.distributed` cluster, one file per
worker thread at a time (the parent ships each file's bytes, so workers need no shared
filesystem). The time limit is enforced on the worker by running the function in a thread and
giving up after the limit; the parent then restarts that worker (through its nanny) so the
runaway thread does not keep burning a core. A worker that dies shows up as `KilledWorker` and
is recorded as a crash.

Both call `on_done(job, record)` in the calling process, in completion order.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from hloflops.batch.db import ANALYSIS_ERROR, CRASHED, MEMORY, TIMEOUT
from hloflops.batch.worker import WorkerFn, WorkerOptions


@dataclass(frozen=True, slots=True)
class Job:
    path: str  # what the record is about (absolute)
    data: bytes  # the file's bytes, read and hashed by the parent


OnDone = Callable[[Job, dict[str, Any]], None]


def default_processes() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def timeout_record(timeout_s: float) -> dict[str, Any]:
    return {"status": TIMEOUT, "error": f"analysis took longer than the per-file limit of {timeout_s:g} s; stopped"}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def crash_record(exitcode: int | None) -> dict[str, Any]:
    if exitcode is None:
        how = "without an exit status"
    elif exitcode < 0:
        how = f"killed by {_signal_name(-exitcode)}"
    else:
        how = f"exit code {exitcode}"
    return {"status": CRASHED, "error": f"worker process died while analysing this file ({how})"}


# ---- local worker processes ------------------------------------------------------------------
def _exit_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when the parent dies, so a killed batch leaves no orphans."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except Exception:  # best effort: without it a worker still exits when its pipe closes
        pass


def _limit_memory(limit_bytes: int) -> None:
    """Cap this worker's address space: a file that needs more makes the analysis raise
    MemoryError (a `memory` row) instead of the machine swapping or the OOM killer taking it."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit_bytes = min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, hard))
    except (ImportError, ValueError, OSError):  # not on this platform: run unlimited
        pass


# A worker retires (and the parent starts a fresh one) once it has analysed this many bytes. The engine's
# objects hold reference cycles, and the analysis keeps them out of the collector (hloparse.allocation),
# so a worker would keep every module it analysed until a full collection that hardly ever comes: memory
# grew by ~8 MB per MB of HLO, file after file, towards the worker's --memory-limit. A collection after
# each file would scan them all first (0.43 s of a 29 MB module's 2.7); a worker's exit frees them at once,
# and a forked replacement starts in milliseconds.
RETIRE_AFTER_BYTES = 64 << 20
_RETIRING = "_worker_retires"  # the key of the last record of a retiring worker (the parent pops it)


def _worker_main(conn: multiprocessing.connection.Connection, fn: WorkerFn, options: WorkerOptions,
                 retire_after: int | None = RETIRE_AFTER_BYTES) -> None:
    _exit_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if options.memory_limit:
        _limit_memory(options.memory_limit)
    analysed = 0
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        path, data = job
        try:
            record = fn(path, data, options)
        except MemoryError:  # over --memory-limit: the file's row says so, and the worker lives on
            record = {"status": MEMORY, "error": "analysis needed more memory than the worker's limit "
                      "(--memory-limit); stopped"}
        except BaseException as e:  # the function is meant not to raise; keep the worker alive if it does
            record = {"status": ANALYSIS_ERROR, "error": f"{type(e).__name__}: {e}"}
        analysed += len(data)
        retiring = retire_after is not None and analysed >= retire_after
        if retiring:
            record = {**record, _RETIRING: True}
        try:
            conn.send(record)
        except Exception as e:  # an unpicklable record
            conn.send({"status": ANALYSIS_ERROR, "error": f"result could not be sent back: {type(e).__name__}: {e}",
                       **({_RETIRING: True} if retiring else {})})
        if retiring:
            return


# Libraries that start native threads at import: forking a process that holds them can deadlock
# the child on a lock some other thread held (jax warns about exactly this).
_THREADED_LIBRARIES = ("jax", "jaxlib", "tensorflow", "torch")
# What a forkserver preloads, so that the workers it forks start with the engine imported.
_ENGINE_MODULES = ["hloflops.batch.worker", "hloparse", "hloflops.api", "hloflops.accounting"]


def _parent_has_threads() -> bool:
    return threading.active_count() > 1 or any(name in sys.modules for name in _THREADED_LIBRARIES)


def _mp_context(start_method: str | None = None) -> multiprocessing.context.BaseContext:
    """fork when it is safe: a worker starts in milliseconds with the engine already imported,
    which matters when timeouts and crashes make us start many. With threads in this process
    (jax imported, a dask client), a forkserver: forked from a clean single-threaded process that
    preloaded the engine. spawn where neither exists."""
    methods = multiprocessing.get_all_start_methods()
    if start_method is None:
        if "fork" in methods and not _parent_has_threads():
            start_method = "fork"
        elif "forkserver" in methods:
            start_method = "forkserver"
        else:
            start_method = "spawn"
    ctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(_ENGINE_MODULES)  # no effect once the server runs; harmless
    return ctx


class _Slot:
    """One worker process and the file it is working on."""

    def __init__(self, ctx: multiprocessing.context.BaseContext, fn: WorkerFn, options: WorkerOptions,
                 retire_after: int | None = RETIRE_AFTER_BYTES) -> None:
        parent_end, child_end = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child_end, fn, options, retire_after), daemon=True)
        self.process.start()
        child_end.close()
        self.conn = parent_end
        self.job: Job | None = None
        self.deadline: float | None = None

    def assign(self, job: Job, timeout_s: float | None) -> None:
        self.job = job
        self.deadline = time.monotonic() + timeout_s if timeout_s else None
        self.conn.send((job.path, job.data))

    def kill(self) -> int | None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()
        return self.process.exitcode

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(1)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


def run_local(
    jobs: Iterable[Job],
    *,
    fn: WorkerFn,
    options: WorkerOptions,
    on_done: OnDone,
    processes: int | None = None,
    timeout_s: float | None = None,
    start_method: str | None = None,
    retire_after: int | None = RETIRE_AFTER_BYTES,
) -> None:
    """Run `fn` over `jobs` in `processes` worker processes; see the module docstring.

    `start_method` ("fork", "forkserver", "spawn"; default: see `_mp_context`). Except with fork,
    `fn` must be importable by the workers (a module-level function). `retire_after`: bytes a worker
    analyses before it is replaced (RETIRE_AFTER_BYTES; None: never)."""
    processes = processes or default_processes()
    ctx = _mp_context(start_method)
    pending: Iterator[Job] = iter(jobs)
    exhausted = False
    idle: list[_Slot] = []
    busy: list[_Slot] = []
    try:
        while True:
            while not exhausted and (idle or len(busy) < processes):
                job = next(pending, None)
                if job is None:
                    exhausted = True
                    break
                slot = idle.pop() if idle else _Slot(ctx, fn, options, retire_after)
                try:
                    slot.assign(job, timeout_s)
                except OSError:  # the worker died while idle: start a fresh one for this job
                    slot.kill()
                    slot = _Slot(ctx, fn, options, retire_after)
                    slot.assign(job, timeout_s)
                busy.append(slot)
            if not busy:
                break
            deadlines = [s.deadline for s in busy if s.deadline is not None]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            waitables: list[Any] = [s.conn for s in busy] + [s.process.sentinel for s in busy]
            multiprocessing.connection.wait(waitables, timeout=wait_s)
            now = time.monotonic()
            for slot in list(busy):
                healthy = True
                if slot.conn.poll():  # a record, or EOF if the worker died
                    try:
                        record = slot.conn.recv()
                    except (EOFError, OSError):
                        record, healthy = crash_record(slot.kill()), False
                elif not slot.process.is_alive():
                    record, healthy = crash_record(slot.kill()), False
                elif slot.deadline is not None and now >= slot.deadline:
                    slot.kill()
                    record, healthy = timeout_record(timeout_s or 0), False
                else:
                    continue
                busy.remove(slot)
                job, slot.job = slot.job, None
                if record.pop(_RETIRING, False):  # its last file: it exits, a fresh worker takes the next
                    slot.stop()
                elif healthy:
                    idle.append(slot)
                assert job is not None
                on_done(job, record)
    finally:
        for slot in idle:
            slot.stop()
        for slot in busy:
            slot.kill()


# ---- dask.distributed --------------------------------------------------------------------------
_DASK_ANALYSED = [0]  # bytes this dask worker process analysed since its last collection

def _run_with_deadline(path: str, data: bytes, timeout_s: float | None, fn: WorkerFn, options: WorkerOptions):
    """The dask task: `fn` in a thread, abandoned after `timeout_s` (the parent restarts the worker)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["record"] = fn(path, data, options)
        except BaseException as e:
            box["record"] = {"status": ANALYSIS_ERROR, "error": f"{type(e).__name__}: {e}"}

    thread = threading.Thread(target=target, name=f"hloflops:{os.path.basename(path)}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    _DASK_ANALYSED[0] += len(data)
    if _DASK_ANALYSED[0] >= RETIRE_AFTER_BYTES and not thread.is_alive():
        # A dask worker lives on (it cannot retire as a local one does, RETIRE_AFTER_BYTES): the
        # garbage of the modules it analysed is collected instead, once per that many bytes.
        _DASK_ANALYSED[0] = 0
        gc.collect()
    if thread.is_alive():
        record = timeout_record(timeout_s or 0)
        try:
            from distributed import get_worker

            record["_restart_worker"] = get_worker().address
        except Exception:
            pass
        return record
    return box["record"]


def run_dask(
    jobs: Iterable[Job],
    *,
    scheduler: Any,
    fn: WorkerFn,
    options: WorkerOptions,
    on_done: OnDone,
    timeout_s: float | None = None,
    window: int | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> None:
    """Run `fn` over `jobs` on the dask cluster at `scheduler` (an address or a `Client`)."""
    try:
        from distributed import Client, as_completed
    except ImportError as e:
        raise RuntimeError("--scheduler needs dask.distributed: python3 -m pip install 'dask[distributed]'") from e

    own_client = not isinstance(scheduler, Client)
    try:
        client = Client(scheduler, set_as_default=False, timeout=30) if own_client else scheduler
    except (OSError, TimeoutError) as e:
        raise RuntimeError(f"cannot reach the dask scheduler at {scheduler}: {e}") from e
    try:
        threads = sum(client.nthreads().values()) or 1
        # One file per worker thread in flight. More would keep the threads busier between files,
        # but the scheduler then queues the extra ones on workers, and when a worker dies dask
        # blames every task assigned to it: an innocent file queued behind a crashing one would
        # be recorded as crashed too. This also bounds the file bytes held by the cluster.
        window = window or threads
        pending = iter(jobs)
        in_flight: dict[str, Job] = {}
        completed = as_completed(loop=client.loop)

        def submit_next() -> bool:
            job = next(pending, None)
            if job is None:
                return False
            future = client.submit(_run_with_deadline, job.path, job.data, timeout_s, fn, options, pure=False)
            in_flight[future.key] = job
            completed.add(future)
            return True

        for _ in range(window):
            if not submit_next():
                break
        for future in completed:
            job = in_flight.pop(future.key)
            if future.status == "finished":
                record = future.result()
            else:
                try:
                    error = future.exception()
                except BaseException as e:  # a cancelled future (the cluster restarted) raises here
                    error = e
                if type(error).__name__ == "KilledWorker":
                    first_sentence = str(error).split(". ")[0]  # the rest is dask's generic advice
                    message = f"dask worker died while analysing this file ({first_sentence})"
                    record = {"status": CRASHED, "error": message}
                else:
                    record = {"status": ANALYSIS_ERROR, "error": f"dask task failed: {type(error).__name__}: {error}"}
            future.release()
            restart = record.pop("_restart_worker", None)
            on_done(job, record)
            if restart:
                try:
                    client.restart_workers([restart])
                except Exception as e:  # a worker without a nanny cannot be restarted
                    log(f"could not restart dask worker {restart} after a timeout: {type(e).__name__}: {e}")
            submit_next()
    finally:
        if own_client:
            client.close()
