"""Keeps every Ray process of the test cluster on loopback.

Ray 2.x replaces --node-ip-address=127.0.0.1 (and a driver's _node_ip_address) with the
address it sees towards the outside (`resolve_ip_for_localhost` -> the interface of the
default route). The tests must never bind to the machine's other addresses, so every
process started with this folder on PYTHONPATH (nodes, their workers, drivers) answers
127.0.0.1 instead.
"""

import importlib.abc
import importlib.util
import sys


class _PinLoopback(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "ray._private.services":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            module.node_ip_address_from_perspective = lambda *args, **kwargs: "127.0.0.1"

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PinLoopback())


class _InjectOwnBug(importlib.abc.MetaPathFinder):
    """A bug in orchestra's own code, on the nodes of the test cluster only, for one task
    name: tests/ray's `test_an_exception_from_orchestras_own_code_on_a_node_stops_the_job`.
    Every other task runs the real run_trial."""

    def find_spec(self, name, path, target=None):
        if name != "orchestrator.trial.lifecycle":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            real = module.run_trial

            def run_trial(ctx, task, *args, **kwargs):
                if task.name.endswith("injected-own-bug"):
                    raise ZeroDivisionError("injected: a bug in orchestra's own code on the node")
                return real(ctx, task, *args, **kwargs)

            module.run_trial = run_trial

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _InjectOwnBug())
