"""A real Dovecot IMAP server on a loopback port, with a temporary configuration and one mailbox (tests and
benchmarks only). Debian's `dovecot-imapd` is installed by scripts/test.sh.

Usage:
    with DovecotServer(user="dana", password="s3cret") as server:
        server.append("INBOX", raw_message_bytes)
        server.port
"""

from __future__ import annotations

import imaplib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"


def dovecot_available() -> bool:
    return Path(DOVECOT).exists()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DovecotServer:
    def __init__(self, user: str = "dana", password: str = "s3cret") -> None:
        # Its own directory, readable along the path by Dovecot's unprivileged processes (pytest's are 0700).
        self.root = Path(tempfile.mkdtemp(prefix="docqa-dovecot-"))
        os.chmod(self.root, 0o755)
        self.user, self.password = user, password
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> DovecotServer:
        root = self.root
        for sub in ("run", "state", "home"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(root / "run", 0o755)
        (root / "passwd").write_text(f"{self.user}:{{PLAIN}}{self.password}\n")
        uid, gid = os.getuid(), os.getgid()
        if uid == 0:  # Dovecot never runs mail processes as root: the package's own user holds the mailbox
            account = pwd.getpwnam("dovecot")
            uid, gid = account.pw_uid, account.pw_gid
            os.chown(root / "home", uid, gid)
        (root / "dovecot.conf").write_text(f"""
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
first_valid_uid = 0
first_valid_gid = 0
mail_location = maildir:~/Maildir:LAYOUT=fs
namespace inbox {{
  inbox = yes
  separator = /
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
""")
        self.process = subprocess.Popen([DOVECOT, "-F", "-c", str(root / "dovecot.conf")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                errors = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"dovecot exited: {errors} {self._log()}")
            try:  # ready once a login succeeds (the auth process starts after the listener)
                self.client().logout()
                return self
            except (OSError, imaplib.IMAP4.error):
                time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"dovecot did not listen on port {self.port}: {self._log()}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def _log(self) -> str:
        log = self.root / "dovecot.log"
        return log.read_text()[-2000:] if log.exists() else ""

    def client(self) -> imaplib.IMAP4:
        connection = imaplib.IMAP4("127.0.0.1", self.port, timeout=30)
        connection.login(self.user, self.password)
        return connection

    def append(self, folder: str, message: bytes, connection: imaplib.IMAP4 | None = None) -> None:
        own = connection is None
        connection = connection or self.client()
        try:
            if folder != "INBOX":
                connection.create(f'"{folder}"')  # an existing folder answers NO, which is fine
            typ, data = connection.append(f'"{folder}"', None, None, message)
            if typ != "OK":
                raise RuntimeError(f"APPEND to {folder} failed: {data}")
        finally:
            if own:
                connection.logout()

    def delete(self, folder: str, index: int) -> None:
        """Expunge the message with sequence number `index` of `folder`."""
        connection = self.client()
        try:
            connection.select(f'"{folder}"')
            connection.store(str(index), "+FLAGS", "\\Deleted")
            connection.expunge()
        finally:
            connection.logout()
