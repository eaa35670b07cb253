"""Follow-up retrieval recall@5 on the shipped conversation sets, three ways: the raw follow-up, the previous
rewrite (docqa/conversation.py at a git revision: earlier questions only) and the current one
(`docqa.followups`, against the whole exchange). Also the exact-rewrite rate and the method mix of each.

The HotpotQA sample corpus (../shared/data/multihop) and the demo corpus are stored together in a temporary
embedded store, so every follow-up retrieves from ~1,000 passages with the hybrid retriever the strategies use.
Prints figures; asserts nothing.

    python bench/followup_recall.py                       # previous rewrite read from the base revision below
    python bench/followup_recall.py --previous-rev HEAD~5
    DOCQA_CONVERSATION_REWRITE=llm python bench/followup_recall.py --llm   # adds the model's rewrite
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))  # docqa_eval is a checkout folder

from haystack import Document  # noqa: E402

from docqa.access import EVERYONE, AccessScope  # noqa: E402
from docqa.evaluation.conversations import evaluate_conversations, load_conversations, summarize  # noqa: E402
from docqa.evaluation.corpus import read_corpus  # noqa: E402
from docqa.followups import rewrite_followup, rewrite_with_settings  # noqa: E402
from docqa.runtime import Runtime  # noqa: E402
from docqa.settings import Settings  # noqa: E402
from docqa_eval.datasets import shared_data_dir  # noqa: E402

# The revision before follow-ups were rewritten against the answers (docqa/conversation.py read questions only).
BASE_REV = "2b462fc2a8a0364500163262f40470a58042cc1d"
K = 5
TENANT = "followups"


def previous_rewriter(rev: str) -> Any:
    """`standalone_question(user_turns)` of docqa/conversation.py at `rev`, without its pipeline wrapper."""
    source = subprocess.run(["git", "-C", str(CHECKOUT), "show", f"{rev}:docqa/conversation.py"],
                            check=True, capture_output=True, text=True).stdout
    source = source.split("\nclass RewrittenQuestion", 1)[0]
    source = "\n".join(line for line in source.splitlines()
                       if not line.startswith(("from docqa.pipelines", "from docqa.access")))
    module = types.ModuleType("previous_conversation")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(source, f"{rev}:docqa/conversation.py", "exec"), module.__dict__)
    return lambda messages: module.standalone_question([m["content"] for m in messages if m["role"] == "user"])


class Raw:
    method = "raw"
    rejected = None

    def __init__(self, messages: Any) -> None:
        self.question = messages[-1]["content"]


def demo_documents() -> list[Document]:
    folder = CHECKOUT / "docqa" / "sample_corpus"
    return [Document(id=f"sample:{p.name}", content=p.read_text(encoding="utf-8"),
                     meta={"source": p.name, "title": p.stem, "tenant": TENANT, "access": [EVERYONE]})
            for p in sorted(folder.glob("*.md"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--previous-rev", default=BASE_REV)
    parser.add_argument("--llm", action="store_true", help="also the model's rewrite (DOCQA_CONVERSATION_REWRITE)")
    args = parser.parse_args()
    corpus_file = shared_data_dir() / "multihop" / "hotpotqa_train_corpus.json"
    if not corpus_file.is_file():
        sys.exit(f"shared data not found at {corpus_file}; nothing to measure")
    folder = CHECKOUT / "docqa_eval" / "conversations"
    cases = [c for path in sorted(folder.glob("*.jsonl")) for c in load_conversations(path)]
    with tempfile.TemporaryDirectory() as workdir:
        settings = Settings(data_dir=Path(workdir))
        runtime = Runtime(settings)
        documents = read_corpus(corpus_file, tenant=TENANT, access=[EVERYONE]) + demo_documents()
        started = time.perf_counter()
        embedder = runtime.document_embedder()
        embedder.warm_up()
        runtime.document_store.write_documents(embedder.run(documents=documents)["documents"])
        print(f"{len(documents)} passages embedded and stored in {time.perf_counter() - started:.0f} s "
              f"(backend {settings.embedding_backend}); {len(cases)} follow-ups in "
              f"{len({c.conversation_id for c in cases})} conversations")
        scope = AccessScope(TENANT)
        rewriters: dict[str, Any] = {
            "raw follow-up": Raw,
            f"previous rewrite ({args.previous_rev[:7]})": previous_rewriter(args.previous_rev),
            "new rewrite (deterministic)": rewrite_followup,
        }
        if args.llm:
            rewriters[f"new rewrite ({settings.conversation_rewrite})"] = (
                lambda messages: rewrite_with_settings(messages, settings, runtime.chat_generator))
        print(f"\n| rewrite | recall@{K} | exact rewrite | methods |\n|---|---:|---:|---|")
        by_kind: dict[str, dict[str, Any]] = {}
        for name, rewrite in rewriters.items():
            summary = summarize(evaluate_conversations(runtime, cases, scope, K, rewrite=rewrite), K)
            methods = ", ".join(f"{m} {n}" for m, n in summary["methods"].items())
            print(f"| {name} | {summary[f'recall_at_{K}']:.3f} | {summary['exact_rewrite_rate']:.3f} | {methods} |")
            by_kind[name] = summary["by_kind"]
        kinds = sorted({kind for blocks in by_kind.values() for kind in blocks})
        print(f"\nrecall@{K} by kind of follow-up (n):")
        print("| rewrite | " + " | ".join(f"{k} ({by_kind['raw follow-up'][k]['followups']})" for k in kinds) + " |")
        print("|---|" + "---:|" * len(kinds))
        for name, blocks in by_kind.items():
            print(f"| {name} | " + " | ".join(f"{blocks[k][f'recall_at_{K}']:.3f}" for k in kinds) + " |")


if __name__ == "__main__":
    main()
