import threading

import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage

from docqa.recording import StepRecorder, record_llm_call, run_concurrently, to_jsonable
from docqa.result import LLMUsage


class TestStepRecorder:
    def test_steps_are_ordered_and_nested_steps_get_their_parent(self):
        recorder = StepRecorder()
        with (
            recorder.step("plan", "planner") as outer,
            recorder.step("retrieval", "retriever", inputs={"query": "q"}) as inner,
        ):
            inner.outputs["n"] = 3
        with recorder.step("generation", "generator"):
            pass
        assert [s.kind for s in recorder.steps] == ["plan", "retrieval", "generation"]
        assert [s.index for s in recorder.steps] == [0, 1, 2]
        assert recorder.steps[1].parent == outer.index
        assert recorder.steps[2].parent is None
        assert recorder.steps[1].outputs == {"n": 3}

    def test_llm_calls_are_attributed_to_the_current_step_and_totalled(self):
        recorder = StepRecorder()
        with recorder.step("generation", "generator"):
            record_llm_call(prompt="p", response="r", usage=LLMUsage(1, 10, 2), model="m")
            record_llm_call(prompt="p2", response="r2", usage=LLMUsage(1, 5, 1), model="m")
        step = recorder.steps[0]
        assert step.llm.calls == 2
        assert [c["prompt"] for c in step.outputs["llm_calls"]] == ["p", "p2"]
        totals = recorder.totals()
        assert (totals.llm_calls, totals.prompt_tokens, totals.completion_tokens) == (2, 15, 3)

    def test_llm_call_outside_a_step_is_ignored(self):
        record_llm_call(prompt="p", response="r", usage=LLMUsage(1, 1, 1))
        recorder = StepRecorder()
        with recorder.step("generation", "generator"):
            pass
        assert recorder.totals().llm_calls == 0 and "llm_calls" not in recorder.steps[0].outputs

    def test_error_is_recorded_and_reraised(self):
        recorder = StepRecorder()
        with pytest.raises(RuntimeError), recorder.step("retrieval", "retriever"):
            raise RuntimeError("store down")
        assert recorder.steps[0].error == "RuntimeError: store down"
        with recorder.step("generation", "generator"):
            pass
        assert recorder.steps[1].parent is None

    def test_concurrent_calls_keep_their_own_step(self):
        recorder = StepRecorder()
        barrier = threading.Barrier(2)

        def work(name: str) -> str:
            with recorder.step("summary", name) as step:
                barrier.wait(timeout=5)
                record_llm_call(prompt=name, response=name, usage=LLMUsage(1, 1, 1))
                return step.name

        with recorder.step("iteration", "loop") as parent:
            names = run_concurrently(lambda: work("global"), lambda: work("local"))
        assert names == ["global", "local"]
        by_name = {s.name: s for s in recorder.steps}
        assert by_name["global"].outputs["llm_calls"][0]["prompt"] == "global"
        assert by_name["local"].outputs["llm_calls"][0]["prompt"] == "local"
        assert by_name["global"].parent == parent.index


class TestToJsonable:
    def test_drops_embeddings_and_masks_secrets(self):
        doc = Document(id="d1", content="text", meta={"source": "a.md"}, embedding=[0.1, 0.2], score=0.5)
        data = to_jsonable({"docs": [doc], "api_key": "sk-123", "nested": {"Authorization": "Bearer x"}})
        assert data["docs"][0] == {"id": "d1", "score": 0.5, "source": "a.md", "snippet": "text"}
        assert data["api_key"] == "***"
        assert data["nested"]["Authorization"] == "***"
        assert "sk-123" not in repr(data)

    def test_chat_messages_and_tuples(self):
        data = to_jsonable((ChatMessage.from_user("hi"), 1, None))
        assert data == [{"role": "user", "text": "hi"}, 1, None]
