"""`python -m tinygrad.viz TRACE.json [--port N] [--no-browser]`: serve a saved VIZ (or PROFILE) trace until Ctrl-C."""

from __future__ import annotations

import argparse
import json
import sys

from tinygrad.viz.server import load, start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tinygrad.viz", description=__doc__)
    parser.add_argument("trace", help="a trace written by VIZ=1 (tinygrad_viz.json), or a PROFILE=1 trace")
    parser.add_argument("--port", type=int, default=None,
                        help="port on 127.0.0.1 (default: $VIZ_PORT, else a free one)")
    parser.add_argument("--no-browser", action="store_true", help="only print the URL")
    args = parser.parse_args(argv)
    try:
        data = load(args.trace)
    except (OSError, ValueError, json.JSONDecodeError) as e:
        print(f"VIZ: cannot read {args.trace}: {e}", file=sys.stderr)
        return 2
    try:
        server = start(data, args.port, False if args.no_browser else None)
    except OSError as e:
        print(e, file=sys.stderr)
        return 1
    server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
