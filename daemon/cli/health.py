"""`recalld health [--ready]`: whether the daemon is live (or ready), as an exit status, a line
and the checks that do not pass; `--json` the whole answer."""

from __future__ import annotations

import argparse
from typing import Any

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client, ClientError


def register(sub: Subparsers) -> None:
    health = sub.add_parser("health", help="exit 0 when live (with --ready: ready), 1 otherwise")
    health.add_argument("--ready", action="store_true")
    health.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _health)


def _health(client: Client, args: argparse.Namespace, out: Output) -> int:
    """Live (or, with --ready, ready): exit 0 when so. Text: one line (with what a passing check
    notes, such as an index with nothing to index yet), then only the checks that are not
    `pass`, each with its reason; --json: the whole answer."""
    body: Any
    try:
        body = client.ready() if args.ready else client.live()
        code = EXIT_OK
    except ClientError as exc:
        body, code = exc.body, EXIT_FAIL
    if args.json:
        out.json(body)
        return code
    status = body.get("status", "fail") if isinstance(body, dict) else "fail"
    what = "ready" if args.ready else "live"
    verdict = {"pass": what, "warn": f"{what}, degraded"}.get(status, f"not {what}")
    checks = body.get("checks", {}) if isinstance(body, dict) else {}
    # a passing check may still have something to say (`detail.note`: "nothing indexed yet")
    notes = [
        str(check["detail"]["note"])
        for check in checks.values()
        if check.get("status") == "pass" and isinstance(check.get("detail"), dict) and "note" in check["detail"]
    ]
    out.print(shown("; ".join([verdict, *notes]) + f" ({status})"))
    for name, check in checks.items():
        if check.get("status") != "pass":
            reason = check.get("reason") or ""
            out.print(shown(f"  {name}: {check.get('status')} {reason}".rstrip()))
    return code
