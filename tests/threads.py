"""A test's work on several threads at once."""
import threading


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
