"""Folder, IMAP and watched-folder figures for sources kept in sync (`docqa sources`).

1. A folder of N files (default 10,000) made from the shared corpora (HotpotQA and MuSiQue passages one per file,
   ODSum stories cut into pieces to reach N), in folders of 500: the first sync's time and chunks/s.
2. A re-sync with 1% of the files changed and 0.5% deleted: its time, and the chunks re-embedded, which must be
   exactly the changed files' chunks.
3. With `--imap N` (Dovecot installed): N mail messages, every other one with a PDF attachment, over IMAP on
   loopback: the first sync's time.
4. With `--watch`: a file of a watched folder (`docqa sources watch`, 1 s look interval; `--watch-files` other
   files beside it) is rewritten with a new fact; the time from the write to the new text being among the top 5
   passages of a dense retrieval, as a reader of the source, and to an answer through the question service
   (`standard` strategy) whose shown answer or citations hold the new text and no longer the old. The LLM is the
   configured endpoint (`DOCQA_LLM_BASE_URL`) or else the packaged local model (`llama-cpp-python[server]`),
   started in the temporary data directory and stopped at the end.

Real embedder (the configured one, packaged MiniLM by default), the embedded store and SQLite in a temporary
data directory, no broker (items processed in this process through the ingestion queue's tables). Prints;
asserts nothing.

    nice python bench/sources_sync.py --files 10000 [--imap 1000] [--watch [--watch-files 100]]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import contextlib
import importlib.util
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval and tests are checkout folders

from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.sources.definitions import define_source
from docqa.sources.sync import sync_source
from docqa_eval.datasets import shared_data_dir


class CountingRuntime(Runtime):
    """The configured runtime, counting the chunks its document embedder is given."""

    embedded = 0

    def document_embedder(self) -> Any:
        inner = super().document_embedder()
        runtime = self

        class Counting:
            def warm_up(self) -> None:
                inner.warm_up()

            def run(self, documents: list[Any]) -> dict[str, Any]:
                CountingRuntime.embedded += len(documents)
                return inner.run(documents=documents)

        runtime._counting = Counting()  # type: ignore[attr-defined]
        return runtime._counting  # type: ignore[attr-defined]


def corpus_texts(count: int) -> list[tuple[str, str]]:
    data = shared_data_dir()
    hotpot = json.loads((data / "multihop" / "hotpotqa_train_corpus.json").read_text(encoding="utf-8"))
    texts = [(f"hotpot-{i:05d}", title + "\n\n" + " ".join(sentences))
             for i, (title, sentences) in enumerate(hotpot.items())]
    musique = json.loads((data / "multihop" / "musique_train_corpus.json").read_text(encoding="utf-8"))
    texts += [(f"musique-{i:05d}", p["title"] + "\n\n" + p["text"]) for i, p in enumerate(musique)]
    words: list[list[str]] = []
    for split in ("train", "dev", "test"):
        for line in (data / "longform" / "odsum_story" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            words.append(" ".join(json.loads(line)["divided_document"]).split())
    needed = max(count - len(texts), 1)
    per_part = max(sum(len(w) for w in words) // needed, 20)
    for story, story_words in enumerate(words):
        for start in range(0, len(story_words), per_part):
            texts.append((f"odsum-{story:03d}-{start // per_part:04d}", " ".join(story_words[start:start + per_part])))
    return texts[:count]


def write_folder(root: Path, texts: list[tuple[str, str]]) -> list[Path]:
    files = []
    for index, (name, text) in enumerate(texts):
        folder = root / f"part{index // 500:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        files.append(path)
    return files


def folder_figures(settings: Settings, runtime: CountingRuntime, count: int, root: Path) -> None:
    texts = corpus_texts(count)
    files = write_folder(root / "share", texts)
    print(f"folder: {len(files)} files from the shared corpora ({sum(len(t) for _, t in texts) / 1e6:.1f} MB)")
    define_source(settings, name="share", type="folder", tenant="bench", config={"path": str(root / "share")},
                  allow=["group:bench"])
    embedder = runtime.document_embedder()
    started = time.perf_counter()
    embedder.warm_up()
    print(f"embedder load: {time.perf_counter() - started:.1f} s (not counted)")
    CountingRuntime.embedded = 0
    first = sync_source(settings, tenant="bench", name="share", runtime=runtime, embedder=embedder,
                        on_progress=lambda line: print("  " + line, file=sys.stderr))
    print(f"first sync: {first.summary()}")
    print(f"  {first.chunks_written} chunks in {first.seconds:.1f} s = {first.chunks_written / first.seconds:.1f} "
          f"chunks/s ({len(files) / first.seconds:.1f} files/s)")

    rng = random.Random(31)
    chosen = rng.sample(files, k=max(1, len(files) // 100) + max(1, len(files) // 200))
    changed, deleted = chosen[: max(1, len(files) // 100)], chosen[max(1, len(files) // 100):]
    for path in changed:
        path.write_text(path.read_text(encoding="utf-8") + "\n\nRevised on 2026-11-26 by the records office.",
                        encoding="utf-8")
    for path in deleted:
        path.unlink()
    CountingRuntime.embedded = 0
    again = sync_source(settings, tenant="bench", name="share", runtime=runtime, embedder=embedder)
    expected = sum(len(c) for c in _chunks_of(runtime, [f"share:{p.relative_to(root / 'share').as_posix()}"
                                                        for p in changed]).values())
    print(f"re-sync ({len(changed)} changed = 1%, {len(deleted)} deleted = 0.5%): {again.summary()}")
    print(f"  chunks re-embedded: {CountingRuntime.embedded} (the changed files hold {expected} chunks); "
          f"chunks written {again.chunks_written}")
    nothing = sync_source(settings, tenant="bench", name="share", runtime=runtime, embedder=embedder)
    print(f"no-change sync: {nothing.summary()}")


def _chunks_of(runtime: Runtime, document_ids: list[str]) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    docs = runtime.document_store.filter_documents(filters={"operator": "AND", "conditions": [
        {"field": "meta.tenant", "operator": "==", "value": "bench"},
        {"field": "meta.source_id", "operator": "in", "value": document_ids}]})
    for doc in docs:
        found.setdefault(doc.meta["source_id"], []).append(doc)
    return found


def imap_figures(settings: Settings, runtime: CountingRuntime, count: int) -> None:
    from email.message import EmailMessage

    from tests.support.dovecot import DovecotServer, dovecot_available
    from tests.support.sample_files import pdf_bytes

    if not dovecot_available():
        print("imap: skipped (dovecot is not installed; scripts/test.sh installs dovecot-imapd)")
        return
    texts = corpus_texts(count)
    with DovecotServer(user="bench", password="bench-pass") as server:
        connection = server.client()
        started = time.perf_counter()
        for index, (name, text) in enumerate(texts):
            mail = EmailMessage()
            mail["From"], mail["To"], mail["Subject"] = "clerk@example.org", "bench@example.org", name
            mail.set_content(text)
            if index % 2 == 0:
                mail.add_attachment(pdf_bytes([f"Attachment of {name}: reference {index:05d}"]),
                                    maintype="application", subtype="pdf", filename=f"{name}.pdf")
            server.append("INBOX", bytes(mail), connection)
        connection.logout()
        print(f"imap: {count} messages ({count // 2 + count % 2} with a PDF attachment) appended in "
              f"{time.perf_counter() - started:.1f} s")
        os.environ["BENCH_IMAP_PASSWORD"] = "bench-pass"
        define_source(settings, name="mail", type="imap", tenant="bench",
                      config={"host": "127.0.0.1", "port": server.port, "tls": False, "user": "bench",
                              "password_env": "BENCH_IMAP_PASSWORD", "folders": ["INBOX"]}, allow=[])
        embedder = runtime.document_embedder()
        embedder.warm_up()
        report = sync_source(settings, tenant="bench", name="mail", runtime=runtime, embedder=embedder)
        print(f"imap first sync: {report.summary()}; {report.chunks_written} chunks, "
              f"{count / report.seconds:.1f} messages/s")
        again = sync_source(settings, tenant="bench", name="mail", runtime=runtime, embedder=embedder)
        print(f"imap no-change sync: {again.summary()}")


OLD_FACT = "The Lyon bicycle room is on the second floor, next to the lifts."
NEW_FACT = "The Lyon bicycle room moved to the third basement floor, next to the showers."
WATCH_QUESTION = "Which floor is the Lyon bicycle room on?"
OLD_MARK, NEW_MARK = "second floor", "third basement"


def watch_figures(settings: Settings, runtime: CountingRuntime, root: Path, files: int) -> None:
    """A file of a watched folder is rewritten; timed from the write to (a) the new text in a dense top 5 and
    (b) an answer through the question service (`standard` strategy, the configured or packaged LLM) whose shown
    answer or citations hold the new text and not the old one. Questions are asked back to back from the write
    on, as a user asking again and again would; each answer's start and end are kept, so the figure's
    resolution is one answer's latency."""
    from docqa.access import AccessScope
    from docqa.questions import Ask, Asker, QuestionService
    from docqa.sources.watch import watch_source

    folder = root / "watched"
    write_folder(folder, corpus_texts(files))  # other documents the retrieval has to pass over
    (folder / "intro.txt").write_text("The watched folder holds the facilities notes of the Lyon office.")
    (folder / "bikes.txt").write_text(OLD_FACT)
    define_source(settings, name="watched", type="folder", tenant="bench", config={"path": str(folder)},
                  allow=["group:facilities"])
    synced = threading.Event()
    reported: list[float] = []  # when each of the watcher's syncs reported

    def on_report(_report: Any) -> None:
        reported.append(time.perf_counter())
        synced.set()

    stop = threading.Event()
    watcher = threading.Thread(target=watch_source, args=(settings, "bench", "watched"),
                               kwargs={"actor": "bench", "interval_s": 1.0, "stop": stop, "on_report": on_report},
                               daemon=True)
    started = time.perf_counter()
    watcher.start()
    if not synced.wait(timeout=3600):
        sys.exit("watch: the first sync did not finish within an hour")
    print(f"watch: {files + 2} files, first sync {time.perf_counter() - started:.1f} s (embedder load included)")

    scope = AccessScope("bench", frozenset({"group:facilities"}))
    service = QuestionService(runtime)
    ask = Ask(WATCH_QUESTION, strategy="standard")
    asker = Asker(scope, asked_by="bench")
    retrieve = _retriever(runtime)
    for attempt in ("cold", "warm"):  # builds the strategy and loads the model; and a warm answer's latency
        began = time.perf_counter()
        before = service.answer(ask, asker).result
        shown = _shown(before)
        print(f"  answer before the change ({attempt}): {time.perf_counter() - began:.1f} s, "
              f"{before.answer_source}, old text shown: {OLD_MARK in shown}, new text shown: "
              f"{NEW_MARK in shown}; answer {before.answer[:100]!r}; slowest steps {_slowest(before)}")

    synced.clear()
    (folder / "bikes.txt").write_text(NEW_FACT)
    changed = time.perf_counter()
    to_retrieval: list[float] = []

    def poll_retrieval() -> None:
        while not stop.is_set() and time.perf_counter() - changed < 300:
            if any(NEW_MARK in (doc.content or "") for doc in retrieve(WATCH_QUESTION, scope)):
                to_retrieval.append(time.perf_counter() - changed)
                return
            time.sleep(0.2)

    poller = threading.Thread(target=poll_retrieval, daemon=True)
    poller.start()
    answers: list[tuple[float, float, Any]] = []
    while time.perf_counter() - changed < 300:
        began = time.perf_counter() - changed
        result = service.answer(ask, asker).result
        answers.append((began, time.perf_counter() - changed, result))
        if _reflects(result):
            break
    synced.wait(timeout=60)
    synced_at = next((at - changed for at in reported if at > changed), None)
    poller.join(timeout=60)
    stop.set()
    watcher.join(timeout=30)
    service.close()

    print("watch: change to retrieval " + (f"{to_retrieval[0]:.1f} s" if to_retrieval else "not within 300 s")
          + " (1 s look interval, 1 s quiet period, then the sync and a dense top-5 retrieval, polled every 0.2 s)")
    if synced_at is not None:
        print(f"  the watcher's sync of the change reported at {synced_at:.1f} s")
    for began, ended, result in answers:
        print(f"  answer asked at +{began:.1f} s, done at +{ended:.1f} s: {result.answer_source}, reflects the "
              f"change: {_reflects(result)}; answer {result.answer[:100]!r}; cited "
              f"{[c.source or c.document_id for c in result.citations]}; slowest steps {_slowest(result)}")
    last_began, last_ended, last = answers[-1]
    if _reflects(last):
        stale = [began for began, _, result in answers if not _reflects(result)]
        print(f"watch: change to an answer that reflects it {last_ended:.1f} s (that question was asked at "
              f"+{last_began:.1f} s and took {last_ended - last_began:.1f} s; the last answer still without the "
              "change was asked at " + (f"+{stale[-1]:.1f} s" if stale else "- (none)")
              + f"); shown answer from the {last.answer_source}, new text in the answer: "
              f"{NEW_MARK in last.answer}, in a citation: {any(NEW_MARK in c.snippet for c in last.citations)}")
    else:
        print("watch: no answer reflected the change within 300 s")


def _slowest(result: Any, count: int = 3) -> str:
    """Where an answer's time went: its longest top-level steps."""
    steps = sorted((step for step in result.steps if step.parent is None), key=lambda step: -step.duration_s)
    return ", ".join(f"{step.name} {step.duration_s:.1f} s" for step in steps[:count])


def _shown(result: Any) -> str:
    """What a reader sees of a result: the answer and the cited passages."""
    return "\n".join([result.answer, *(citation.snippet for citation in result.citations)])


def _reflects(result: Any) -> bool:
    shown = _shown(result)
    return NEW_MARK in shown and OLD_MARK not in shown


def _retriever(runtime: Runtime) -> Any:
    from docqa.access import restrict

    text_embedder = runtime.text_embedder()
    if hasattr(text_embedder, "warm_up"):
        text_embedder.warm_up()
    def retrieve(question: str, scope: Any) -> list[Any]:
        embedding = text_embedder.run(text=question)["embedding"]
        store = runtime.document_store
        return store.embedding_retrieval(query_embedding=embedding, filters=restrict(scope, None), top_k=5)

    return retrieve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--imap", type=int, default=0, help="also sync this many mail messages over IMAP")
    parser.add_argument("--watch", action="store_true",
                        help="also time a watched folder's change to retrieval and to an answer")
    parser.add_argument("--watch-files", type=int, default=100, help="other files in the watched folder")
    args = parser.parse_args()
    if not (shared_data_dir() / "multihop" / "hotpotqa_train_corpus.json").is_file():
        sys.exit(f"skipped: shared data not found under {shared_data_dir()}")
    with tempfile.TemporaryDirectory(prefix="docqa-sources-bench-") as tmp:
        root = Path(tmp)
        settings = Settings(data_dir=root / "data")
        runtime = CountingRuntime(settings)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if args.files:
            folder_figures(settings, runtime, args.files, root)
        if args.imap:
            imap_figures(settings, runtime, args.imap)
        if args.watch:
            with _llm(settings):
                watch_figures(settings, runtime, root, args.watch_files)


@contextlib.contextmanager
def _llm(settings: Settings) -> Iterator[None]:
    """The configured LLM endpoint, or the packaged model's local server for the time of the figures."""
    if settings.llm_base_url is not None:
        print(f"LLM: {settings.llm_base_url}")
        yield
        return
    from docqa.llm.local_server import ensure_local_llm, stop_local_llm

    if importlib.util.find_spec("llama_cpp") is None:
        sys.exit("watch: no LLM (set DOCQA_LLM_BASE_URL, or pip install 'docqa[local-llm]' for the packaged model)")
    print(f"LLM: {ensure_local_llm(settings)}")
    try:
        yield
    finally:
        stop_local_llm(settings)


if __name__ == "__main__":
    main()
