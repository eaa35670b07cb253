import pytest

from docqa.access import EVERYONE, AccessScope, restrict, validate_access_meta


class TestAccessScope:
    def test_filters_always_include_tenant_and_everyone(self):
        scope = AccessScope(tenant="acme", principals=frozenset({"alice", "group:hr"}))
        filters = scope.to_filters()
        assert filters["operator"] == "AND"
        tenant, access = filters["conditions"]
        assert tenant == {"field": "meta.tenant", "operator": "==", "value": "acme"}
        assert access["operator"] == "in"
        assert access["value"] == sorted(["alice", "group:hr", EVERYONE])

    def test_a_tenant_is_required(self):
        with pytest.raises(ValueError):
            AccessScope(tenant="")

    def test_restrict_keeps_access_conditions_when_extra_filters_are_given(self):
        scope = AccessScope(tenant="acme")
        extra = {"field": "meta.topic", "operator": "==", "value": 3}
        combined = restrict(scope, extra)
        assert combined["operator"] == "AND"
        assert combined["conditions"][:2] == scope.to_filters()["conditions"]
        assert combined["conditions"][2] == extra
        assert restrict(scope, None) == scope.to_filters()


class TestValidateAccessMeta:
    @pytest.mark.parametrize(
        "meta",
        [{}, {"tenant": "acme"}, {"tenant": "acme", "access": []}, {"tenant": "", "access": ["a"]},
         {"tenant": "acme", "access": "everyone"}, {"tenant": "acme", "access": [""]}],
    )
    def test_rejects_documents_without_access_metadata(self, meta):
        with pytest.raises(ValueError):
            validate_access_meta(meta)

    def test_accepts_complete_metadata(self):
        validate_access_meta({"tenant": "acme", "access": ["everyone"]})
