"""`docqa sources ...`: registered by `docqa.cli` through `add_sources_commands(subparsers)`.

    docqa sources add handbook --type folder --path /srv/handbook --allow group:staff --every 15m
    docqa sources add wiki --type git --url https://git.example.org/wiki.git --branch main --acl-map wiki.acl
    docqa sources add intranet --type website --url http://intranet.example.org/ --allow group:staff
    docqa sources add mail --type imap --host imap.example.org --user dana --password-env DANA_IMAP_PASSWORD
    docqa sources list [--json]
    docqa sources sync handbook          # or --all (what cron runs: every source whose schedule is due)
    docqa sources watch handbook         # sync again on every change of a folder source
    docqa sources remove handbook [--keep-documents]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from docqa.settings import Settings


def _actor() -> str:
    from docqa.audit.cli import cli_actor

    return cli_actor()


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.sources.definitions import define_source

    config: dict[str, Any] = {
        "path": args.path, "url": args.url, "branch": args.branch, "host": args.host, "port": args.port,
        "user": args.user, "password_env": args.password_env, "folders": args.folders,
        "posix_groups": args.posix_groups or None, "tls": False if args.no_tls else None,
        "max_pages": args.max_pages, "max_depth": args.max_depth, "max_page_bytes": args.max_page_bytes,
        "max_seconds": args.max_seconds,
    }
    view = define_source(settings, name=args.name, type=args.type, tenant=args.tenant or settings.tenant,
                         config=config, allow=args.allow or [], acl_map=args.acl_map, collection=args.collection,
                         every=args.every, created_by=_actor())
    print(f"source {view['name']} ({view['type']}) added; readable by {', '.join(view['allow']) or 'the ACL map'}")
    if args.sync:
        return _sync_one(settings, args.tenant or settings.tenant, args.name, as_json=False)
    return 0


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.sources.definitions import list_sources

    views = list_sources(settings, tenant=None if args.all_tenants else (args.tenant or settings.tenant))
    if args.json:
        print(json.dumps(views, indent=2))
        return 0
    if not views:
        print("no sources (add one with `docqa sources add`)")
    for view in views:
        counts = view["last_counts"]
        last = (f"{view['last_status']} at {view['last_finished_at']}: {counts.get('added', 0)} added, "
                f"{counts.get('changed', 0)} changed, {counts.get('deleted', 0)} deleted, "
                f"{counts.get('failed', 0)} failed") if view["last_finished_at"] else view["last_status"]
        print(f"{view['name']:20} {view['type']:8} {view['documents']:7} docs  last: {last}"
              + (f"  next: {view['next_run_at']}" if view["next_run_at"] else "")
              + (f"\n{'':20} error: {view['last_error']}" if view["last_error"] else ""))
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.sources.definitions import source_status

    print(json.dumps(source_status(settings, args.tenant or settings.tenant, args.name), indent=2))
    return 0


def cmd_sync(args: argparse.Namespace, settings: Settings) -> int:
    tenant = args.tenant or settings.tenant
    if args.all == bool(args.name):
        from docqa.errors import DocqaError

        raise DocqaError("name one source or give --all")
    if args.name:
        return _sync_one(settings, tenant, args.name, as_json=args.json)
    from docqa.sources.scheduler import sync_due

    reports = sync_due(settings, actor=_actor(), force=args.force, on_report=None if args.json else _print_report)
    if args.json:
        print(json.dumps([report.to_dict() for report in reports], indent=2))
    return 1 if any(report.status == "failed" for report in reports) else 0


def _sync_one(settings: Settings, tenant: str, name: str, as_json: bool) -> int:
    from docqa.sources.sync import sync_source

    progress = None if as_json else (lambda line: print(line, file=sys.stderr))
    report = sync_source(settings, tenant=tenant, name=name, actor=_actor(), on_progress=progress)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    return 1 if report.status == "failed" else 0


def _print_report(report: Any) -> None:
    print(report.summary())
    for note in report.notes:
        print(f"  note: {note}")
    for failure in report.failures:
        print(f"  failed: {failure['key']}: {failure['reason']}", file=sys.stderr)


def cmd_remove(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.sources.scheduler import remove_source

    deleted = remove_source(settings, args.tenant or settings.tenant, args.name, actor=_actor(),
                            keep_documents=args.keep_documents)
    kept = " (its documents kept)" if args.keep_documents else f" with its {deleted} documents"
    print(f"source {args.name} removed{kept}")
    return 0


def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.sources.watch import watch_source

    watch_source(settings, args.tenant or settings.tenant, args.name, actor=_actor(), interval_s=args.interval,
                 on_report=_print_report)
    return 0


def cmd_beat(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.errors import DocqaError

    if not settings.broker_url:
        raise DocqaError("docqa sources beat needs DOCQA_BROKER_URL; without a broker, run "
                         "`docqa sources sync --all` from cron or set DOCQA_SOURCES_SCHEDULER for docqa serve")
    import docqa.sources.tasks  # noqa: F401 - registers the task the schedule names
    from docqa.ingestion.celery_app import app

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app.Beat(loglevel=args.loglevel, schedule=str(settings.data_dir / "celerybeat-schedule")).run()
    return 0


def add_sources_commands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sources", help="sources kept in sync: folders, Git repositories, mailboxes, sites")
    commands = parser.add_subparsers(dest="sources_command", required=True)

    def tenant(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tenant", help="tenant of the source (default: DOCQA_TENANT)")

    p = commands.add_parser("add", help="define a source (its documents are read at its first sync)")
    p.add_argument("name", help="1-64 lower-case letters, digits, '_' or '-'")
    p.add_argument("--type", required=True, choices=["folder", "git", "imap", "website"])
    p.add_argument("--path", help="folder: the directory")
    p.add_argument("--url", help="git: repository URL or path; website: the base URL (or its sitemap.xml)")
    p.add_argument("--branch", help="git: the branch (default main)")
    p.add_argument("--host", help="imap: server host")
    p.add_argument("--port", type=int, help="imap: server port (993 with TLS, else 143)")
    p.add_argument("--user", help="imap: login; the mailbox owner user:LOGIN may read its messages")
    p.add_argument("--password-env", dest="password_env", help="imap: environment variable holding the password")
    p.add_argument("--folders", nargs="+", help="imap: mail folders to read (default INBOX)")
    p.add_argument("--no-tls", dest="no_tls", action="store_true", help="imap: plain IMAP (loopback only)")
    p.add_argument("--posix-groups", dest="posix_groups", action="store_true",
                   help="folder: each file's POSIX group may read it, as group:NAME")
    p.add_argument("--max-pages", dest="max_pages", type=int, help="website: pages read per sync (default 500)")
    p.add_argument("--max-depth", dest="max_depth", type=int, help="website: links followed from the base (5)")
    p.add_argument("--max-page-bytes", dest="max_page_bytes", type=int, help="website: largest page (5 MB)")
    p.add_argument("--max-seconds", dest="max_seconds", type=int, help="website: time a crawl may take (600)")
    p.add_argument("--allow", nargs="+", action="extend", metavar="PRINCIPAL",
                   help="principals who may read the documents (unless an ACL map rule says otherwise)")
    p.add_argument("--acl-map", dest="acl_map", help="file of 'GLOB PRINCIPAL...' rules, first match wins")
    p.add_argument("--collection", help="collection of the documents, a source for mspr (default: default)")
    p.add_argument("--every", help="schedule, e.g. 15m, 2h, 1d (synced by beat, serve or `sync --all`)")
    p.add_argument("--sync", action="store_true", help="sync it at once")
    tenant(p)
    p.set_defaults(handler=cmd_add)

    p = commands.add_parser("list", help="sources with their last run, counts, next run and last error")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all-tenants", dest="all_tenants", action="store_true")
    tenant(p)
    p.set_defaults(handler=cmd_list)

    p = commands.add_parser("status", help="one source as JSON, with the items that failed")
    p.add_argument("name")
    tenant(p)
    p.set_defaults(handler=cmd_status)

    p = commands.add_parser("sync", help="sync one source now, or --all those whose schedule is due (for cron)")
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every source of every tenant that is due")
    p.add_argument("--force", action="store_true", help="with --all: also sources whose next run has not come")
    p.add_argument("--json", action="store_true")
    tenant(p)
    p.set_defaults(handler=cmd_sync)

    p = commands.add_parser("remove", help="remove a source and (unless --keep-documents) its documents")
    p.add_argument("name")
    p.add_argument("--keep-documents", dest="keep_documents", action="store_true")
    tenant(p)
    p.set_defaults(handler=cmd_remove)

    p = commands.add_parser("beat", help="with a broker: send the due-sync task every minute (one per deployment)")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(handler=cmd_beat)

    p = commands.add_parser("watch", help="watch a folder source and sync it after every change")
    p.add_argument("name")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between looks at the folder")
    tenant(p)
    p.set_defaults(handler=cmd_watch)
