"""Sources that stay in sync: folders, Git repositories, mailboxes and intranet sites kept in step with docqa.

A source is configuration in the SQL database (`models`, `definitions`); a sync lists it (`folder`, `git`,
`website`, `imap`), compares the listing with what docqa holds (`sync`), sends new and changed documents through
the ingestion queue, deletes what the source no longer has and re-applies access from the source (`acl`). Syncs
run by hand or from cron (`docqa sources sync`), from Celery beat or `docqa serve` (`scheduler`).
"""
