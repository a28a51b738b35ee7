"""One framework's worker process: `python bench/worker.py MODULE FRAMEWORK`.

It reads one JSON request a line on stdin and answers one JSON line on the original stdout:
  {"op": "setup", "id": ID, "workload": NAME, "params": {...}}  -> {"ok": true} | {"na": why} | {"error": tb}
  {"op": "measure", "id": ID}                                    -> {"result": {...}} | {"error": tb}
  {"op": "info"}                                                 -> {"result": {...}}
MODULE (a workload family next to this file) provides `make(framework, workload, params)`, returning a
function that performs one measurement, and `info(framework)`. Anything the framework prints, from
Python or from C, goes to stderr so that it can never corrupt the protocol.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any

from worker_api import NotAvailable


def serve(module_name: str, framework: str) -> None:
    framework = framework.split("-", 1)[0]  # `ours-gcc`: this project, on the compiler path its environment names
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    module = importlib.import_module(module_name)
    measures: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any]
        try:
            if request["op"] == "setup":
                measures[request["id"]] = module.make(framework, request["workload"], request["params"])
                reply = {"ok": True}
            elif request["op"] == "measure":
                reply = {"result": measures[request["id"]]()}
            elif request["op"] == "forget":  # free a finished workload's memory before the next one
                measures.pop(request["id"], None)
                reply = {"ok": True}
            else:
                reply = {"result": module.info(framework)}
        except NotAvailable as why:
            reply = {"na": str(why)}
        except Exception:  # any failure of the framework is reported in its table cell, never fatal
            reply = {"error": traceback.format_exc()}
        protocol.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
