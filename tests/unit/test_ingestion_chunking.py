import pytest

from docqa.conversion.chunking import ChunkSpec, build_chunks, chunk_id, clean_text, content_hash, split_words


def spec(**overrides) -> ChunkSpec:
    values = {"source_id": "doc-1", "source": "/docs/doc-1.txt", "title": "Doc", "tenant": "acme",
              "access": ["group:hr"]}
    return ChunkSpec(**{**values, **overrides})


class TestCleanText:
    def test_collapses_whitespace_and_control_characters(self) -> None:
        assert clean_text("  a\t\tb\x07c \r\n\r\n\r\n\n d  ") == "a b c\n\nd"


class TestSplitWords:
    def test_windows_overlap(self) -> None:
        words = " ".join(str(i) for i in range(10))
        assert split_words(words, 4, 1) == ["0 1 2 3", "3 4 5 6", "6 7 8 9"]

    def test_short_text_is_one_window(self) -> None:
        assert split_words("a b c", 4, 1) == ["a b c"]

    def test_no_trailing_window_inside_the_previous_one(self) -> None:
        assert split_words("0 1 2 3 4", 4, 2) == ["0 1 2 3", "2 3 4"]

    @pytest.mark.parametrize(("size", "overlap"), [(0, 0), (4, 4), (4, -1)])
    def test_invalid_sizes(self, size: int, overlap: int) -> None:
        with pytest.raises(ValueError):
            split_words("a b", size, overlap)


class TestBuildChunks:
    def test_ids_are_deterministic_per_tenant_source_and_index(self) -> None:
        text = " ".join(f"w{i}" for i in range(50))
        first = build_chunks(text, spec(), chunk_words=20, overlap_words=5)
        again = build_chunks(text, spec(), chunk_words=20, overlap_words=5)
        assert [c.id for c in first] == [c.id for c in again]
        assert [c.id for c in first] == [chunk_id("acme", "doc-1", i) for i in range(len(first))]
        assert len({c.id for c in first}) == len(first) == 3
        other_tenant = build_chunks(text, spec(tenant="globex"), chunk_words=20, overlap_words=5)
        assert not {c.id for c in first} & {c.id for c in other_tenant}

    def test_id_parts_cannot_collide_by_concatenation(self) -> None:
        assert chunk_id("ab", "c", 1) != chunk_id("a", "bc", 1)

    def test_meta(self) -> None:
        chunks = build_chunks("alpha  beta\n\ngamma", spec(extra_meta={"file_type": "text"}), chunk_words=20,
                              overlap_words=5, ingested_at="2026-01-01T00:00:00+00:00")
        assert len(chunks) == 1
        assert chunks[0].content == "alpha beta gamma"
        assert chunks[0].meta == {
            "file_type": "text",
            "source": "/docs/doc-1.txt",
            "source_id": "doc-1",
            "title": "Doc",
            "tenant": "acme",
            "access": ["group:hr"],
            "content_hash": content_hash("alpha beta\n\ngamma"),
            "ingested_at": "2026-01-01T00:00:00+00:00",
            "chunk_index": 0,
        }

    def test_extra_meta_cannot_override_access(self) -> None:
        chunks = build_chunks("text", spec(extra_meta={"access": ["everyone"], "tenant": "x"}),
                              chunk_words=20, overlap_words=5)
        assert chunks[0].meta["access"] == ["group:hr"]
        assert chunks[0].meta["tenant"] == "acme"

    @pytest.mark.parametrize("overrides", [{"access": []}, {"access": [""]}, {"tenant": ""}])
    def test_missing_access_metadata_is_rejected(self, overrides: dict) -> None:
        with pytest.raises(ValueError, match="access-control metadata"):
            build_chunks("some text", spec(**overrides), chunk_words=20, overlap_words=5)

    def test_empty_text_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="no text"):
            build_chunks(" \n ", spec(), chunk_words=20, overlap_words=5)
