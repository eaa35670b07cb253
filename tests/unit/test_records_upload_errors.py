"""Malformed FHIR bundles: `POST /v1/records` answers 422 naming the problem, and the queued path fails the item
with the same message; a wrong JSON type anywhere the parser reads never escapes as another exception, and a
bundle that parses never loses a record."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from haystack import Document

from docqa.errors import UnreadableFileError
from docqa.ingestion.pipeline import Source
from docqa.ingestion.record_bundles import ingest_record_bundle
from docqa.ingestion.records import parse_fhir_bundle
from docqa.settings import Settings
from tests.support.hash_embedder import HashDocumentEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

KEPT_IDS = [
    "Encounter/enc1",
    "Condition/cond1",
    "Observation/obs1",
    "Observation/obs2",
    "Observation/obs3",
    "MedicationRequest/med1",
    "Procedure/proc1",
    "Immunization/imm1",
    "AllergyIntolerance/all1",
    "CarePlan/cp1",
]


def bundle() -> dict[str, Any]:
    """Every resource type the parser keeps, with every field it reads, plus the resources it looks up."""
    coding = {"system": "http://snomed.info/sct", "code": "44054006", "display": "Diabetes"}
    resources: list[dict[str, Any]] = [
        {"resourceType": "Patient", "id": "p1", "birthDate": "1970-01-01"},
        {"resourceType": "Organization", "id": "org1", "name": "General Hospital"},
        {
            "resourceType": "Encounter",
            "id": "enc1",
            "status": "finished",
            "class": {"code": "AMB"},
            "type": [{"coding": [{"system": "http://snomed.info/sct", "code": "185349003", "display": "Check-up"}]}],
            "reasonCode": [{"text": "routine"}],
            "reasonReference": [{"reference": "urn:uuid:cond1", "display": "Diabetes"}],
            "serviceProvider": {"reference": "Organization/org1"},
            "period": {"start": "2020-01-01T10:00:00+00:00", "end": "2020-01-01T11:00:00+00:00"},
        },
        {
            "resourceType": "Condition",
            "id": "cond1",
            "clinicalStatus": {"coding": [{"code": "active"}]},
            "code": {"coding": [coding]},
            "onsetDateTime": "2019-05-01T00:00:00+00:00",
            "recordedDate": "2019-05-01",
            "abatementDateTime": "2021-05-01T00:00:00+00:00",
            "encounter": {"reference": "urn:uuid:enc1"},
        },
        {
            "resourceType": "Observation",
            "id": "obs1",
            "status": "final",
            "category": [{"coding": [{"code": "laboratory"}]}],
            "code": {"coding": [{"system": "http://loinc.org", "code": "2339-0", "display": "Glucose"}]},
            "encounter": {"reference": "urn:uuid:enc1"},
            "effectiveDateTime": "2020-01-01T10:30:00+00:00",
            "valueQuantity": {"value": 130, "unit": "mg/dL", "code": "mg/dL"},
            "interpretation": [{"coding": [{"code": "H"}]}],
            "referenceRange": [{"low": {"value": 70, "unit": "mg/dL"}, "high": {"value": 99, "unit": "mg/dL"}}],
        },
        {
            "resourceType": "Observation",
            "id": "obs2",
            "category": [{"coding": [{"code": "vital-signs"}]}],
            "code": {"text": "Blood pressure"},
            "effectivePeriod": {"start": "2020-01-01T10:40:00+00:00"},
            "component": [
                {
                    "code": {"coding": [{"code": "8480-6", "display": "Systolic"}]},
                    "valueQuantity": {"value": 140.5, "unit": "mm[Hg]"},
                },
                {"code": {"text": "Diastolic"}, "valueString": "85", "interpretation": [{"coding": [{"code": "N"}]}]},
            ],
        },
        {
            "resourceType": "Observation",
            "id": "obs3",
            "code": {"text": "Smoking"},
            "valueCodeableConcept": {"coding": [{"display": "Never smoked"}]},
        },
        {
            "resourceType": "MedicationRequest",
            "id": "med1",
            "status": "active",
            "medicationCodeableConcept": {"coding": [{"system": "rxnorm", "code": "860975", "display": "Metformin"}]},
            "reasonCode": [{"coding": [coding]}],
            "reasonReference": [{"reference": "Condition/cond1"}],
            "dosageInstruction": [{"text": "500 mg twice daily"}],
            "authoredOn": "2020-01-01",
        },
        {
            "resourceType": "Procedure",
            "id": "proc1",
            "code": {"text": "Foot exam"},
            "performedPeriod": {"start": "2020-01-01T10:45:00+00:00", "end": "2020-01-01T10:50:00+00:00"},
            "performedDateTime": "2020-01-01T10:45:00+00:00",
            "reasonReference": [{"display": "Diabetes"}],
        },
        {
            "resourceType": "Immunization",
            "id": "imm1",
            "vaccineCode": {"text": "Influenza"},
            "occurrenceDateTime": "2020-01-01T10:55:00+00:00",
        },
        {
            "resourceType": "AllergyIntolerance",
            "id": "all1",
            "code": {"text": "Peanuts"},
            "onsetDateTime": "2000-01-01T00:00:00+00:00",
            "recordedDate": "2000-01-01",
            "reaction": [{"manifestation": [{"text": "Hives"}]}],
        },
        {
            "resourceType": "CarePlan",
            "id": "cp1",
            "category": [{"text": "Diabetes self management"}],
            "activity": [{"detail": {"code": {"text": "Diet"}}}],
            "addresses": [{"reference": "urn:uuid:cond1"}],
            "period": {"start": "2020-01-01"},
        },
        {"resourceType": "Claim", "id": "claim1", "total": {"value": 100}},
    ]
    return {
        "resourceType": "Bundle",
        "type": "transaction",
        "entry": [{"fullUrl": f"urn:uuid:{r['id']}", "resource": r} for r in resources],
    }


def resource(data: dict[str, Any], kind_and_id: str) -> dict[str, Any]:
    kind, resource_id = kind_and_id.split("/")
    return next(
        e["resource"]
        for e in data["entry"]
        if e["resource"]["resourceType"] == kind and e["resource"]["id"] == resource_id
    )


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"x": [value]}
    return value


def source_keys(documents: list[Document]) -> list[str]:
    return [d.meta["source"].split("#", 1)[1] for d in documents]


class TestTheParserReadsTypesStrictly:
    def test_the_sample_bundle_keeps_every_record(self):
        documents = parse_fhir_bundle(bundle())
        assert source_keys(documents) == KEPT_IDS
        glucose = documents[KEPT_IDS.index("Observation/obs1")]
        assert (glucose.meta["value"], glucose.meta["reference_range"], glucose.meta["abnormal"]) == (
            130.0,
            "70-99 mg/dL",
            True,
        )
        assert "General Hospital" in documents[0].content and "Diabetes" in documents[0].content

    def test_any_wrong_type_anywhere_is_rejected_or_harmless(self):
        """Every value of the bundle, replaced by each JSON value of another type: the bundle is rejected with
        an UnreadableFileError, or it parses with every record still there."""
        original = bundle()
        tried = 0
        for path, value in walk(original):
            for wrong in wrong_values(value):
                data = copy.deepcopy(original)
                replace(data, path, wrong)
                tried += 1
                try:
                    documents = parse_fhir_bundle(data)
                except UnreadableFileError as exc:
                    assert exc.message.startswith("bundle: "), exc.message
                    continue
                assert source_keys(documents) == KEPT_IDS, (path, wrong)
        assert tried > 500

    @pytest.mark.parametrize(
        "where,field,value,message",
        [
            (
                "Observation/obs1",
                "code",
                {"coding": "2339-0"},
                "Observation/obs1: code.coding must be a list, not a string",
            ),
            ("Observation/obs1", "code", "Glucose", "Observation/obs1: code must be an object, not a string"),
            (
                "Observation/obs1",
                "category",
                {"coding": []},
                "Observation/obs1: category must be a list, not an object",
            ),
            (
                "Observation/obs1",
                "valueQuantity",
                {"value": "130"},
                "Observation/obs1: valueQuantity.value must be a number, not a string",
            ),
            (
                "Observation/obs1",
                "valueQuantity",
                {"value": True},
                "Observation/obs1: valueQuantity.value must be a number, not a boolean",
            ),
            (
                "Observation/obs1",
                "valueQuantity",
                {"value": math.inf},
                "Observation/obs1: valueQuantity.value must be a finite number",
            ),
            ("Observation/obs1", "status", nested(500), "Observation/obs1: status must be a string, not an object"),
            (
                "Observation/obs2",
                "component",
                [{"code": {"coding": [7]}}],
                "Observation/obs2: component[0].code.coding[0] must be an object, not a number",
            ),
            ("Encounter/enc1", "class", "AMB", "Encounter/enc1: class must be an object, not a string"),
            (
                "Encounter/enc1",
                "reasonReference",
                [{"reference": 5}],
                "Encounter/enc1: reasonReference[0].reference must be a string, not a number",
            ),
            (
                "MedicationRequest/med1",
                "dosageInstruction",
                [{"text": ["500 mg"]}],
                "MedicationRequest/med1: dosageInstruction[0].text must be a string, not a list",
            ),
            (
                "Organization/org1",
                "name",
                {"text": "General Hospital"},
                "Organization/org1: name must be a string, not an object",
            ),
            ("Patient/p1", "birthDate", 1970, "Patient/p1: birthDate must be a string, not a number"),
            ("Observation/obs1", "id", 12, "Bundle: entry[4].resource.id must be a string, not a number"),
            ("Observation/obs1", "id", None, "Observation: a resource without an id"),
        ],
    )
    def test_the_message_names_resource_and_field(self, where, field, value, message):
        data = bundle()
        resource(data, where)[field] = value
        with pytest.raises(UnreadableFileError) as caught:
            parse_fhir_bundle(data, label="upload.json")
        assert caught.value.message == f"upload.json: {message}"

    def test_a_null_field_is_absent_but_a_null_list_item_is_wrong(self):
        data = bundle()
        resource(data, "Observation/obs1")["code"] = {"coding": None, "text": None}
        resource(data, "Encounter/enc1")["reasonCode"] = None
        documents = parse_fhir_bundle(data)
        assert source_keys(documents) == KEPT_IDS
        assert documents[KEPT_IDS.index("Observation/obs1")].meta["title"] == "Observation"
        resource(data, "Encounter/enc1")["reasonCode"] = [None, {"text": "routine"}]
        with pytest.raises(
            UnreadableFileError,
            match=r"^bundle: Encounter/enc1: reasonCode\[0\] must be an "
            r"object, not null$",
        ):
            parse_fhir_bundle(data)

    @pytest.mark.parametrize(
        "change,message",
        [
            (lambda d: d.update(entry="all of them"), "bundle: Bundle: entry must be a list, not a string"),
            (lambda d: d["entry"].append(["x"]), "bundle: Bundle: entry[13] must be an object, not a list"),
            (lambda d: d["entry"][4].update(resource=None), "bundle: Bundle: entry[4].resource is null"),
            (
                lambda d: d["entry"][4]["resource"].pop("resourceType"),
                "bundle: Bundle: entry[4].resource has no resourceType",
            ),
            (
                lambda d: d["entry"].append(copy.deepcopy(d["entry"][4])),
                "bundle: Observation/obs1 appears more than once in the bundle",
            ),
            (lambda d: d["entry"][0]["resource"].pop("id"), "bundle: the bundle's Patient has no id"),
        ],
    )
    def test_bundle_structure(self, change, message):
        data = bundle()
        change(data)
        with pytest.raises(UnreadableFileError) as caught:
            parse_fhir_bundle(data)
        assert caught.value.message == message


def walk(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if path:
        yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (*path, index))


def replace(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        data = data[step]
    data[path[-1]] = value


def wrong_values(value: Any) -> list[Any]:
    candidates: list[Any] = ["text", 7, 2.5, math.nan, True, None, [], ["text"], {}, {"text": "x"}, nested(50)]
    wrong = [c for c in candidates if type(c) is not type(value) or (isinstance(value, float) and c is math.nan)]
    return [*wrong, "lone \ud800 surrogate"] if isinstance(value, str) else wrong


class WarmHashEmbedder(HashDocumentEmbedder):
    def warm_up(self) -> None:
        pass


@pytest.fixture
def server(tmp_path) -> Iterator[tuple[TestClient, dict[str, str], Any]]:
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="ok"))
    runtime = app.state.context.runtime
    runtime.document_embedder = WarmHashEmbedder
    with TestClient(app) as client:
        yield client, keys, runtime


def upload(client: TestClient, key: str, raw: bytes | str, name: str = "patient.json") -> Any:
    return client.post(
        "/v1/records",
        headers=auth(key),
        files=[("bundle", (name, raw, "application/json"))],
        data={"access": ["group:care"]},
    )


def assert_422(response: Any, message: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "unreadable_file"
    assert error["message"] == message


class TestRecordsEndpoint:
    def test_coding_that_is_a_string_is_422(self, server):
        client, keys, _ = server
        data = bundle()
        resource(data, "Observation/obs1")["code"]["coding"] = "http://loinc.org|2339-0"
        assert_422(
            upload(client, keys["root"], json.dumps(data)),
            "patient.json: Observation/obs1: code.coding must be a list, not a string",
        )

    def test_a_50000_deep_bundle_is_422(self, server):
        client, keys, _ = server
        depth = 50_000
        raw = '{"resourceType": "Bundle", "entry": ' + "[" * depth + "]" * depth + "}"
        assert_422(upload(client, keys["root"], raw), "patient.json: not a FHIR Bundle: its JSON is nested too deeply")
        deep_object = '{"resourceType": "Bundle", "entry": [' + '{"a":' * depth + "1" + "}" * depth + "]}"
        assert_422(
            upload(client, keys["root"], deep_object), "patient.json: not a FHIR Bundle: its JSON is nested too deeply"
        )

    @pytest.mark.parametrize(
        "raw,message",
        [
            (
                b"{not json",
                "patient.json: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
            ),
            (b"\xff\xfe\xfa", None),
            (
                b'{"resourceType": "Bundle", "entry": [], "total": NaN}',
                "patient.json: not JSON (NaN is not a JSON value)",
            ),
            (b'{"resourceType": "Bundle", "total": ' + b"9" * 5000 + b"}", None),
            (b"[]", "patient.json: not a FHIR Bundle"),
            (b'{"resourceType": "Patient"}', "patient.json: not a FHIR Bundle"),
            (
                b'{"resourceType": "Bundle", "entry": [{"resource": {"resourceType": "Patient", "id": "p1"}}]}',
                "patient.json: the bundle holds no records",
            ),
        ],
    )
    def test_unreadable_uploads_are_422(self, server, raw, message):
        client, keys, _ = server
        response = upload(client, keys["root"], raw)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "unreadable_file"
        if message is not None:
            assert response.json()["error"]["message"] == message

    def test_a_number_too_large_for_a_float_is_422(self, server):
        client, keys, _ = server
        raw = json.dumps(bundle()).replace('"value": 130,', '"value": 1e400,')
        assert_422(
            upload(client, keys["root"], raw),
            "patient.json: Observation/obs1: valueQuantity.value must be a finite number",
        )

    def test_a_lone_surrogate_is_422(self, server):
        client, keys, _ = server
        data = bundle()
        resource(data, "Observation/obs1")["code"]["text"] = "Glu\ud800cose"
        assert_422(
            upload(client, keys["root"], json.dumps(data)),
            "patient.json: Observation/obs1: code.text is not valid Unicode text",
        )

    def test_a_rejected_bundle_leaves_the_stored_records_alone(self, server):
        client, keys, runtime = server
        written = upload(client, keys["root"], json.dumps(bundle()))
        assert written.status_code == 200, written.text
        body = written.json()
        assert {k: body[k] for k in ("patient_id", "written", "deleted")} == {
            "patient_id": "p1",
            "written": len(KEPT_IDS),
            "deleted": 0,
        }
        assert body["topic_model"]["state"] == "missing"
        before = sorted(d.id for d in runtime.document_store.filter_documents())
        data = bundle()
        resource(data, "Condition/cond1")["code"] = ["Diabetes"]
        assert_422(
            upload(client, keys["root"], json.dumps(data)),
            "patient.json: Condition/cond1: code must be an object, not a list",
        )
        assert sorted(d.id for d in runtime.document_store.filter_documents()) == before


class TestQueuedBundlesShareTheChecks:
    @pytest.mark.parametrize(
        "raw,message",
        [
            (
                json.dumps(
                    {
                        **bundle(),
                        "entry": [
                            {"resource": {"resourceType": "Patient", "id": "p1"}},
                            {"resource": {"resourceType": "Observation", "id": "o", "code": {"coding": "x"}}},
                        ],
                    }
                ).encode(),
                "patient.json: Observation/o: code.coding must be a list, not a string",
            ),
            (b"[" * 50_000 + b"]" * 50_000, "patient.json: not a FHIR Bundle: its JSON is nested too deeply"),
        ],
    )
    def test_the_item_fails_with_the_same_message(self, tmp_path, raw, message):
        # The bundle is parsed in the conversion box, within the runtime's DOCQA_CONVERT_* limits.
        runtime = SimpleNamespace(settings=Settings(data_dir=tmp_path))
        result = ingest_record_bundle(
            runtime, Source("patient.json", "patient.json", data=raw), "acme", ["group:care"], embedder=None
        )
        assert (result.status, result.code, result.reason) == ("failed", "unreadable_file", message)
