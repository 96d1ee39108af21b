"""TieredCache(thread_safe=True) called from several Python threads at once:
the pattern of the README's "Threads" (a scheduler thread runs the steps, a
transfer thread reports each plan, other threads query)."""

import queue
import threading

import numpy as np

import kvpolicy


def test_scheduler_transfer_and_query_threads():
    c = kvpolicy.TieredCache(64, 256, thread_safe=True)
    steps = 400
    plans, done = queue.Queue(), queue.Queue()
    stop = threading.Event()
    errors, failed = [], []

    def scheduler():
        try:
            for step in range(steps):
                conv = step % 37
                plan = c.admit(step, [conv * 1000 + i for i in range(1 + step % 9)])  # a whole step
                plans.put(len(plan["transfer_src"]))
                done.get()  # the plan is reported before the next step
                c.release(step)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()
            plans.put(None)

    def transfer():
        try:
            while (n := plans.get()) is not None:
                # every tenth plan: its first copy failed
                status = np.zeros(n, dtype=np.uint8)
                if n and len(failed) % 10 == 0:
                    status[0] = 1
                failed.append(c.complete_transfers(status)["failed"])
                done.put(True)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
            done.put(False)

    def queries():
        try:
            while not stop.is_set():
                c.metrics()
                c.lookup([1000, 1001])
                assert c.check_invariants() == ""
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (scheduler, transfer, queries, queries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    m = c.metrics()
    assert m["requests"] == steps and len(failed) == steps
    assert m["failed_transfers"] == sum(failed) > 0
    assert c.check_invariants() == ""
