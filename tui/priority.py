"""A dashboard yields the CPU to the training it watches.

On a small machine training keeps every core busy, and each viewer's once-a-second redraw took
its share from the worker (bench/attach.py, "viewers"). A dashboard runs at a lower priority
(``DASHBOARD_NICE``) than its run: where cores are free, as on most Macs, nothing changes; where
they are not, the dashboard waits a moment and training does not. The supervisor and the worker
keep their priority: ``grpo-tui run`` lowers the dashboard's only once it has started them.
"""

from __future__ import annotations

import os

DASHBOARD_NICE = 10


def yield_cpu(nice: int = DASHBOARD_NICE) -> None:
    """Lower this process to ``nice`` (never raise it back), every thread of it: on Linux each
    thread has its own priority, and a thread started later takes its starter's."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # macOS: the priority is the process's
        threads = [0]
    for tid in threads:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError:  # a thread that just ended, or a platform without it: the dashboard still works
            pass
