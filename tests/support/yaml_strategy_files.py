"""YAML strategy files the tests load: a BM25 retriever feeding docqa's cited answer generator."""


def bm25_rag_yaml(top_k: int) -> str:
    """A strategy file of BM25 retrieval (`top_k` passages) and a cited answer; its store path is the deployment's."""
    return f"""\
components:
  retriever:
    type: docqa.components.embedded_bm25_retriever.EmbeddedBM25Retriever
    init_parameters:
      document_store:
        type: docqa.stores.embedded.EmbeddedDocumentStore
        init_parameters: {{path: /nowhere/else.sqlite3}}
      top_k: {top_k}
  answerer:
    type: docqa.components.cited_answer_generator.CitedAnswerGenerator
    init_parameters:
      chat_generator:
        type: docqa.llm.role_generator.RoleChatGenerator
        init_parameters: {{role: generator}}
      max_tokens: 64
connections:
  - sender: retriever.documents
    receiver: answerer.documents
"""
