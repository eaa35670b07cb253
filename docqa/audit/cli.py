"""`docqa audit ...` and `docqa db upgrade`: argparse wiring for the CLI in `docqa/cli.py`.

Each subcommand sets `handler(args, settings) -> exit code` as a default: 0 success, 1 verification failed,
2 a usage or input problem.

Usage (in docqa/cli.py):
    add_audit_commands(subparsers); add_db_commands(subparsers)
    args = parser.parse_args(); sys.exit(args.handler(args, get_settings()))
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from docqa.audit.checkpoint import create_checkpoint, load_checkpoint, write_checkpoint
from docqa.audit.events import CHECKPOINT_SIGNED, SYSTEM_TENANT, record_event
from docqa.audit.export import export_jsonl
from docqa.audit.keys import hmac_key, load_public_key, public_key_pem, signing_key, verify_key
from docqa.audit.retention import ArchiveIntegrityError, RetentionFloorError, retain, verify_archive
from docqa.audit.timestamps import TimeOutOfRange, as_utc
from docqa.audit.verify import VerifyReport, verify_chain
from docqa.db import session_factory
from docqa.settings import Settings

OK, FAILED, USAGE = 0, 1, 2


def add_audit_commands(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser("audit", help="verify, checkpoint, export and archive the audit trail")
    commands = audit.add_subparsers(dest="audit_command", required=True)

    verify = commands.add_parser("verify", help="recompute the chain and report the first broken link")
    verify.add_argument("--checkpoint", type=Path, help="signed checkpoint to check truncation/rewrites against")
    verify.add_argument("--archive", type=Path, help="verify a retention archive instead of the database")
    verify.add_argument("--ocsf", type=Path,
                        help="verify an OCSF export (a whole-chain stream, possibly resumed) instead of the database")
    verify.add_argument("--public-key", type=Path, help="auditor's PEM copy of the checkpoint public key")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(handler=verify_command)

    checkpoint = commands.add_parser("checkpoint", help="sign the verified chain head into a file")
    checkpoint.add_argument("--out", type=Path, required=True)
    checkpoint.set_defaults(handler=checkpoint_command)

    export = commands.add_parser(
        "export", help="write traces and events with chain proofs: verifiable JSON Lines, or OCSF/ECS for a SIEM")
    export.add_argument("--out", type=Path,
                        help="file to write; '-' for stdout (ocsf/ecs); ocsf/ecs without it: DOCQA_AUDIT_EXPORT_URL")
    export.add_argument("--url", help="ocsf/ecs: POST to this HTTP collector (default DOCQA_AUDIT_EXPORT_URL)")
    export.add_argument("--since", type=_timestamp, help="jsonl: ISO date/time (UTC unless given), inclusive")
    export.add_argument("--until", type=_timestamp, help="jsonl: ISO date/time (UTC unless given), exclusive")
    export.add_argument("--format", choices=("jsonl", "ocsf", "ecs"), default="jsonl",
                        help="jsonl: chain-proof lines (verifiable); ocsf: OCSF 1.3 events (API Activity, Account "
                             "Change, Authentication) with chain proofs; ecs: Elastic Common Schema lines")
    export.add_argument("--after-seq", type=int, default=0,
                        help="ocsf/ecs: only links after this sequence number")
    export.add_argument("--resume", action="store_true",
                        help="ocsf/ecs: continue after the last sequence already shipped (the file's last line, "
                             "or the state file for stdout/HTTP)")
    export.add_argument("--state", type=Path,
                        help="ocsf/ecs to stdout/HTTP: where the last shipped sequence is kept "
                             "(default <data_dir>/audit/export-<format>.state)")
    export.add_argument("--tenant", help="ocsf/ecs: one tenant's links only")
    export.add_argument("--events-only", action="store_true", help="ocsf/ecs: events only, no traces")
    export.set_defaults(handler=export_command)

    access = commands.add_parser("access", help="could a principal read a document at a time? (exit 0 yes, 1 no)")
    access.add_argument("--principal", required=True, help="user:<id> or group:<name>")
    access.add_argument("--document", required=True,
                        help="a document's source id, its displayed name (file name or the end of its path), a "
                             "patient id or a chunk id; a name several documents share lists them (exit 2)")
    access.add_argument("--at", type=_timestamp, required=True, help="ISO date/time (UTC unless given)")
    access.add_argument("--tenant", help="tenant (default: DOCQA_TENANT)")
    access.add_argument("--json", action="store_true", help="print the answer as JSON")
    access.set_defaults(handler=access_command)

    events_cmd = commands.add_parser("events", help="list audit events, newest first")
    events_cmd.add_argument("--tenant", help="tenant (default: every tenant)")
    events_cmd.add_argument("--action", help="e.g. key.issued, or a prefix ending in '.' (document.)")
    events_cmd.add_argument("--actor")
    events_cmd.add_argument("--target", help="e.g. user:bob, group:finance, document:memo.txt")
    events_cmd.add_argument("--since", type=_timestamp)
    events_cmd.add_argument("--until", type=_timestamp)
    events_cmd.add_argument("--limit", type=int, default=50)
    events_cmd.set_defaults(handler=events_command)

    retain_cmd = commands.add_parser(
        "retain", help="archive links older than the retention policy (or --before) and drop them; never below "
                       "the floor (DOCQA_AUDIT_RETENTION_DAYS, DOCQA_AUDIT_RETENTION_FLOOR_DAYS)")
    retain_cmd.add_argument("--before", type=_timestamp,
                            help="ISO date/time cut-off (default: DOCQA_AUDIT_RETENTION_DAYS ago, 183 days)")
    retain_cmd.add_argument("--archive", type=Path, required=True)
    retain_cmd.set_defaults(handler=retain_command)

    public_key = commands.add_parser("public-key", help="print the checkpoint verification key (PEM)")
    public_key.set_defaults(handler=public_key_command)


def add_db_commands(subparsers: argparse._SubParsersAction) -> None:
    db = subparsers.add_parser("db", help="database schema")
    commands = db.add_subparsers(dest="db_command", required=True)
    upgrade = commands.add_parser("upgrade", help="apply migrations (creates the default SQLite database)")
    upgrade.add_argument("--revision", default="head")
    upgrade.set_defaults(handler=db_upgrade_command)


def verify_command(args: argparse.Namespace, settings: Settings) -> int:
    public_key = load_public_key(args.public_key) if args.public_key else verify_key(settings)
    if getattr(args, "ocsf", None) is not None:
        from docqa.audit.ocsf import verify_ocsf_lines

        with args.ocsf.open("rb") as lines:
            report = verify_ocsf_lines(lines, hmac_key(settings))
    elif args.archive is not None:
        report = verify_archive(args.archive, hmac_key(settings), public_key)
    else:
        try:
            checkpoint = load_checkpoint(args.checkpoint) if args.checkpoint else None
        except ValueError as exc:
            return _usage(str(exc))
        with session_factory(settings)() as session:
            report = verify_chain(session, hmac_key(settings), checkpoint=checkpoint, public_key=public_key)
    _print_report(report, as_json=args.json)
    return OK if report.ok else FAILED


def checkpoint_command(args: argparse.Namespace, settings: Settings) -> int:
    with session_factory(settings)() as session:
        report = verify_chain(session, hmac_key(settings))
    if not report.ok:
        _print_report(report, as_json=False)
        print("refusing to sign a broken chain", file=sys.stderr)
        return FAILED
    checkpoint = create_checkpoint(seq=report.head_seq, mac=report.head_mac, signer=signing_key(settings))
    write_checkpoint(checkpoint, args.out)
    # The signing is itself an event, the link right after the head the checkpoint covers (when no other
    # writer came first).
    record_event(settings, tenant=SYSTEM_TENANT, actor=cli_actor(), action=CHECKPOINT_SIGNED,
                 target=f"checkpoint:{checkpoint.seq}",
                 after={"seq": checkpoint.seq, "mac": checkpoint.mac, "file": str(args.out)})
    print(f"checkpoint at link {checkpoint.seq} ({checkpoint.mac[:16]}...) written to {args.out}")
    return OK


def export_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.format in ("ocsf", "ecs"):
        return _ship_command(args, settings)
    if args.out is None or str(args.out) == "-":
        return _usage("jsonl export needs --out FILE (stdout and collectors are for --format ocsf or ecs)")
    with session_factory(settings)() as session:
        count = export_jsonl(session, args.out, since=args.since, until=args.until)
    print(f"{count} traces and events written to {args.out}")
    return OK


def _ship_command(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.audit.ocsf import ocsf_lines
    from docqa.audit.shipping import FileSink, HttpSink, Sink, StdoutSink, ship
    from docqa.audit.siem import ecs_seq_lines

    if args.since or args.until:
        return _usage("--since/--until are for jsonl; resume a SIEM stream with --resume or --after-seq")
    state = args.state or settings.data_dir / "audit" / f"export-{args.format}.state"
    url = args.url or (settings.audit_export_url if args.out is None else None)
    sink: Sink
    try:
        if args.out is not None and str(args.out) != "-":
            sink, where = FileSink(args.out), str(args.out)
        elif args.out is not None:
            sink, where = StdoutSink(state), "stdout"
        elif url:
            sink, where = HttpSink(url, state=state), url
        else:
            return _usage("give --out FILE, --out - (stdout), --url or DOCQA_AUDIT_EXPORT_URL")
    except ValueError as exc:
        return _usage(str(exc))
    state.parent.mkdir(parents=True, exist_ok=True)
    render = ocsf_lines if args.format == "ocsf" else ecs_seq_lines
    try:
        with session_factory(settings)() as session:
            count = ship(session, sink, render=render, resume=args.resume, after_seq=args.after_seq,
                         tenant=args.tenant, events_only=args.events_only)
    except OSError as exc:
        print(f"export stopped: {exc}; run again with --resume to continue", file=sys.stderr)
        return FAILED
    print(f"{count} {args.format.upper()} records shipped to {where}", file=sys.stderr)
    return OK


def access_command(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.audit.access import replay_access

    tenant = args.tenant or settings.tenant
    try:
        with session_factory(settings)() as session:
            answer = replay_access(session, tenant=tenant, principal=args.principal, document=args.document,
                                   at=args.at)
    except ValueError as exc:
        return _usage(str(exc))
    if args.json:
        print(json.dumps(answer.to_dict(), indent=2, ensure_ascii=False))
    elif answer.candidates:
        print(f"{args.document!r} names {len(answer.candidates)} documents in tenant {tenant}; ask about one:")
        print("\n".join(f"  {candidate}" for candidate in answer.candidates))
    else:
        verdict = "YES" if answer.allowed else "NO"
        named = f"{answer.document} ({answer.resolved})" if answer.resolved else answer.document
        print(f"{verdict}: {answer.principal} {'could' if answer.allowed else 'could not'} read "
              f"{named} in tenant {tenant} at {answer.at}")
        print("\n".join(f"  because {reason}" for reason in answer.reasons))
        for event in answer.events:
            print(f"  event {event['seq']} {event['at']} {event['action']} {event['target']} by {event['actor']}"
                  f" (request {event['request_id']})")
    if answer.candidates:
        return USAGE
    return OK if answer.allowed else FAILED


def events_command(args: argparse.Namespace, settings: Settings) -> int:
    from sqlalchemy import select

    from docqa.audit.access import event_dict
    from docqa.audit.event_queries import EventFilter
    from docqa.audit.models import AuditEvent

    # The operator's view: every tenant's events unless --tenant (the API always scopes to the auditor's).
    where = EventFilter(tenant=args.tenant, action=args.action, actor=args.actor, target=args.target,
                        since=args.since, until=args.until)
    with session_factory(settings)() as session:
        rows = session.scalars(where.apply(select(AuditEvent)).order_by(AuditEvent.seq.desc()).limit(args.limit))
        for row in rows:
            print(json.dumps(event_dict(row), ensure_ascii=False, sort_keys=True))
    return OK


def retain_command(args: argparse.Namespace, settings: Settings) -> int:
    try:
        report = retain(settings, before=args.before, archive=args.archive, actor=cli_actor())
    except (FileExistsError, RetentionFloorError) as exc:
        return _usage(str(exc))
    except ArchiveIntegrityError as exc:
        print(str(exc), file=sys.stderr)
        return FAILED
    if report.archived == 0:
        print("no traces older than the cut-off; nothing archived")
    else:
        print(f"archived links {report.from_seq}..{report.up_to_seq} ({report.archived} traces) to "
              f"{report.archive}; signed checkpoint {report.checkpoint}")
    return OK


def public_key_command(args: argparse.Namespace, settings: Settings) -> int:
    print(public_key_pem(verify_key(settings)), end="")
    return OK


def db_upgrade_command(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.schema import upgrade_database

    upgrade_database(settings, args.revision)
    print(f"database at {args.revision}")
    return OK


def cli_actor() -> str:
    """Who ran a command, as events name them: `cli:<operating-system user>`."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no login name (some containers)
        return "cli:unknown"


def _timestamp(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date or date-time: {value!r}") from None
    try:
        return as_utc(parsed)
    except TimeOutOfRange as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _print_report(report: VerifyReport, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        return
    lines: list[Any] = []
    if report.ok:
        lines.append(f"OK: {report.checked} links verified (links {report.start_seq + 1}..{report.head_seq})")
    else:
        broken = report.broken
        where = f"link {broken.seq}" if broken and broken.seq is not None else "chain"
        trace = f" (trace {broken.trace_id})" if broken and broken.trace_id else ""
        lines.append(f"BROKEN at {where}{trace}: {broken.reason if broken else 'unknown'}")
        lines.append(f"{report.checked} links verified before it")
    lines.extend(f"note: {note}" for note in report.notes)
    print("\n".join(str(line) for line in lines))


def _usage(message: str) -> int:
    print(message, file=sys.stderr)
    return USAGE
