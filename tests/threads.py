"""A test's work on several threads at once, and a thread's OpenMP count as a fresh one's."""
import threading

from threadpoolctl import threadpool_limits

from mgegraph._kernels import parallel


def run_in_threads(work, args_list) -> list[BaseException]:
    """``work(*args)`` on one thread per entry of ``args_list``, released together at a
    barrier, all joined; what they raised (the test asserts there is nothing)."""
    barrier, raised = threading.Barrier(len(args_list)), []

    def run(*args):
        barrier.wait()
        try:
            work(*args)
        except BaseException as exc:  # noqa: BLE001  (reported by the calling thread)
            raised.append(exc)

    threads = [threading.Thread(target=run, args=tuple(args)) for args in args_list]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return raised


def fresh_thread_openmp():
    """``threadpool_limits`` at the OpenMP thread count a fresh thread sees, for this thread
    too: a test before may have lowered this thread's (torch.set_num_threads), which the
    kernels' ways offered and the store's machine key follow (compile(tune=...))."""
    seen = []
    probe = threading.Thread(target=lambda: seen.append(parallel.max_threads()))
    probe.start()
    probe.join()
    return threadpool_limits(limits=seen[0], user_api="openmp")
